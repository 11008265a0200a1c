; repoctx tags query for Swift. Conventions: see python.scm. The grammar parses class, struct,
; enum, actor and extension as one `class_declaration` told apart by its keyword; an extension
; is an @definition.impl named after the extended type, so its members get the qualname
; `Type.member`. Imports capture the module (`import Foundation`, `import struct A.B`) as
; @import.module: Swift imports whole modules (build targets), so names from another file of
; the same target resolve by directory or globally, not through the import.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class_declaration declaration_kind: "struct" name: (type_identifier) @name) @definition.struct
(class_declaration declaration_kind: "enum" name: (type_identifier) @name) @definition.enum
(class_declaration declaration_kind: "extension"
  name: (user_type . (type_identifier) @name)) @definition.impl
(class_declaration name: (type_identifier) @name) @definition.class
(protocol_declaration name: (type_identifier) @name) @definition.interface
(typealias_declaration name: (type_identifier) @name) @definition.type

; functions; inside a type, protocol or extension the parser makes them methods
(function_declaration name: (simple_identifier) @name) @definition.function
(protocol_function_declaration name: (simple_identifier) @name) @definition.function
(init_declaration "init" @name) @definition.method

(enum_entry name: (simple_identifier) @name) @definition.constant

; properties of a type; top-level `let` is a constant, `var` a variable
(class_body
  (property_declaration name: (pattern bound_identifier: (simple_identifier) @name)) @definition.field)
(enum_class_body
  (property_declaration name: (pattern bound_identifier: (simple_identifier) @name)) @definition.field)
(protocol_body
  (protocol_property_declaration
    name: (pattern bound_identifier: (simple_identifier) @name)) @definition.field)
(source_file
  (property_declaration (value_binding_pattern "let")
    name: (pattern bound_identifier: (simple_identifier) @name)) @definition.constant)
(source_file
  (property_declaration name: (pattern bound_identifier: (simple_identifier) @name)) @definition.variable)

; ---- references ----------------------------------------------------------------------------

; f(), Type(), obj.m(), Type.m()
(call_expression . (simple_identifier) @name) @reference.call
(call_expression
  . (navigation_expression
    target: (_) @receiver
    suffix: (navigation_suffix suffix: (simple_identifier) @name))) @reference.call

; class C: Base, Proto;  extension C: Proto
(inheritance_specifier inherits_from: (user_type . (type_identifier) @name)) @reference.inherit

; every use of a type name
((user_type . (type_identifier) @name) @reference.type
  (#not-match? @name "^(Any|AnyObject|Bool|Character|Double|Float|Int|Int8|Int16|Int32|Int64|Never|Self|String|UInt|UInt8|UInt16|UInt32|UInt64|Void)$"))

; ---- imports -------------------------------------------------------------------------------

(import_declaration (identifier) @import.module) @import
