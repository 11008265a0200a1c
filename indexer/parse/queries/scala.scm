; repoctx tags query for Scala 2 and 3. Conventions: see python.scm. An `object` is a class
; (its companion class keeps its own definition); vals and vars of a class body are fields,
; top-level and object vals are fields too (members resolve through their owner). Imports
; capture the declaration as @import and as @import.module (lang_hooks.SCALA reads the path
; from its text) with @import.name / @import.alias for each imported name.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class_definition name: (identifier) @name) @definition.class
(object_definition name: (identifier) @name) @definition.class
(trait_definition name: (identifier) @name) @definition.trait
(enum_definition name: (identifier) @name) @definition.enum
(simple_enum_case name: (identifier) @name) @definition.constant
(full_enum_case name: (identifier) @name) @definition.class

; functions; inside a class, object, trait or enum the parser makes them methods
(function_definition name: (identifier) @name) @definition.function
(function_declaration name: (identifier) @name) @definition.function

(type_definition name: (type_identifier) @name) @definition.type

; members and top-level values (Scala 3); locals of a function body are not definitions
(template_body (val_definition pattern: (identifier) @name) @definition.field)
(template_body (var_definition pattern: (identifier) @name) @definition.field)
(template_body (val_declaration name: (identifier) @name) @definition.field)
(template_body (var_declaration name: (identifier) @name) @definition.field)
(compilation_unit (val_definition pattern: (identifier) @name) @definition.constant)
(compilation_unit (var_definition pattern: (identifier) @name) @definition.variable)
(given_definition name: (identifier) @name) @definition.variable

; ---- references ----------------------------------------------------------------------------

; f(), obj.m(), pkg.Obj.m(), f[T](), obj.m[T]()
(call_expression function: (identifier) @name) @reference.call
(call_expression
  function: (field_expression value: (_) @receiver field: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (identifier) @name)) @reference.call
(call_expression
  function: (generic_function
    function: (field_expression value: (_) @receiver field: (identifier) @name))) @reference.call
; new T(...), new pkg.T(...), new T[U](...)
(instance_expression . [
  (type_identifier) @name
  (generic_type type: (type_identifier) @name)
  (stable_type_identifier (_) @receiver . (type_identifier) @name .)
]) @reference.call

; extends A with B, derives C
(extends_clause [
  (type_identifier) @name
  (generic_type type: (type_identifier) @name)
  (stable_type_identifier (_) @receiver . (type_identifier) @name .)
  (generic_type type: (stable_type_identifier (_) @receiver . (type_identifier) @name .))
] @reference.inherit)

; every use of a type name; the qualified form first so its @receiver is kept
(stable_type_identifier (_) @receiver . (type_identifier) @name .) @reference.type
((type_identifier) @name @reference.type
  (#not-match? @name "^(Any|AnyRef|AnyVal|Boolean|Byte|Char|Double|Float|Int|Long|Nothing|Null|Short|String|Unit)$"))

; ---- imports -------------------------------------------------------------------------------

; import a.b.C  (module "a.b.C", the file the type is conventionally in; see lang_hooks.SCALA)
(import_declaration (identifier) @import.name .) @import @import.module
; import a.b.{C, D => E, F as G}
(import_declaration
  (namespace_selectors [
    (identifier) @import.name
    (arrow_renamed_identifier name: (identifier) @import.name alias: (identifier) @import.alias)
    (as_renamed_identifier name: (identifier) @import.name alias: (identifier) @import.alias)
  ])) @import @import.module
; import a.b._  /  import a.b.*
(import_declaration (namespace_wildcard) @import.name) @import @import.module
