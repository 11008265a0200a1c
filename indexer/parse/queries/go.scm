; repoctx tags query for Go. Conventions: see python.scm. Imports capture the spec as @import
; with @import.module and @import.alias. Methods are top-level in Go (`func (s *T) M()`), so
; their qualname is the bare method name; the receiver type is a type reference.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(function_declaration name: (identifier) @name) @definition.function
(method_declaration name: (field_identifier) @name) @definition.method

;
; A lone `type T ...` / `const C = ...` is captured whole, so its doc comment and keyword are in
; reach; inside a group `type ( ... )` each spec is captured (its comment sits above it there).
; Every pattern ends at the `type:`/`value:` child so that, for the same node, the more specific
; earlier pattern reaches the parser first.
((type_declaration (type_spec name: (type_identifier) @name type: (struct_type))) @definition.struct
  (#not-match? @definition.struct "^type\\s*\\("))
((type_declaration (type_spec name: (type_identifier) @name type: (interface_type))) @definition.interface
  (#not-match? @definition.interface "^type\\s*\\("))
((type_declaration [
    (type_spec name: (type_identifier) @name type: (_))
    (type_alias name: (type_identifier) @name type: (_))
  ]) @definition.type
  (#not-match? @definition.type "^type\\s*\\("))
(type_declaration "("
  (type_spec name: (type_identifier) @name type: (struct_type)) @definition.struct)
(type_declaration "("
  (type_spec name: (type_identifier) @name type: (interface_type)) @definition.interface)
(type_declaration "(" [
    (type_spec name: (type_identifier) @name type: (_))
    (type_alias name: (type_identifier) @name type: (_))
  ] @definition.type)

; struct fields and interface methods
(field_declaration_list
  (field_declaration name: (field_identifier) @name) @definition.field)
(interface_type (method_elem name: (field_identifier) @name) @definition.method)

; package-level constants and variables, lone and grouped as for types
((source_file (const_declaration (const_spec name: (identifier) @name)) @definition.constant)
  (#not-match? @definition.constant "^const\\s*\\("))
(source_file (const_declaration "(" (const_spec name: (identifier) @name) @definition.constant))
((source_file (var_declaration (var_spec name: (identifier) @name)) @definition.constant)
  (#not-match? @definition.constant "^var\\s*\\("))
(source_file (var_declaration
  (var_spec_list (var_spec name: (identifier) @name) @definition.constant)))

; ---- references ----------------------------------------------------------------------------

(call_expression function: (identifier) @name) @reference.call
(call_expression
  function: (selector_expression operand: (_) @receiver field: (field_identifier) @name)) @reference.call
(call_expression
  function: (parenthesized_expression (identifier) @name)) @reference.call

; composite literals: Entry{...}, pkg.Type{...}
(composite_literal type: (type_identifier) @name) @reference.call
(composite_literal
  type: (qualified_type package: (package_identifier) @receiver name: (type_identifier) @name)) @reference.call

; embedded fields and interfaces: struct { Base }, interface { io.Reader }
(field_declaration_list
  (field_declaration . type: (type_identifier) @name . ) @reference.inherit)
(field_declaration_list
  (field_declaration . type: (pointer_type (type_identifier) @name) . ) @reference.inherit)
(field_declaration_list
  (field_declaration
    . type: (qualified_type package: (_) @receiver name: (type_identifier) @name) . ) @reference.inherit)
(interface_type (type_elem (type_identifier) @name) @reference.inherit)
(interface_type
  (type_elem (qualified_type package: (_) @receiver name: (type_identifier) @name)) @reference.inherit)

; every use of a type name; the qualified form first so its @receiver is kept
(qualified_type package: (package_identifier) @receiver name: (type_identifier) @name) @reference.type
((type_identifier) @name @reference.type
  (#not-match? @name "^(any|bool|byte|comparable|complex(64|128)|error|float(32|64)|u?int(8|16|32|64)?|rune|string|uintptr)$"))

; ---- imports -------------------------------------------------------------------------------

(import_spec !name path: (_) @import.module) @import
(import_spec name: (package_identifier) @import.alias path: (_) @import.module) @import
; import . "m" and import _ "m"
(import_spec name: [(dot) (blank_identifier)] @import.name path: (_) @import.module) @import
