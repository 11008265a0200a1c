; repoctx tags query: the definitions and type references OCaml implementations (.ml) and
; interfaces (.mli) share. Included by ocaml.scm and ocaml_interface.scm (`; @include`), so
; the two stay one query where they agree.

; ---- definitions ---------------------------------------------------------------------------

(type_definition (type_binding name: (type_constructor) @name)) @definition.type
(record_declaration (field_declaration (field_name) @name) @definition.field)
(variant_declaration (constructor_declaration (constructor_name) @name) @definition.constant)
(module_definition (module_binding (module_name) @name)) @definition.namespace
(module_type_definition (module_type_name) @name) @definition.interface
(value_specification (value_name) @name) @definition.function
(external (value_name) @name) @definition.function
(exception_definition (constructor_declaration (constructor_name) @name)) @definition.class

; ---- types ---------------------------------------------------------------------------------

(type_constructor_path (extended_module_path) @receiver (type_constructor) @name) @reference.type
((type_constructor_path . (type_constructor) @name) @reference.type
  (#not-match? @name "^(int|float|string|bool|char|unit|list|option|array|exn|bytes|int32|int64|result|ref)$"))
(module_type_path (module_type_name) @name) @reference.type
