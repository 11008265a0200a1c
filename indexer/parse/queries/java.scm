; repoctx tags query for Java. Conventions: see python.scm. Imports capture the declaration as
; @import with @import.module (the package or type path before the last dot) and @import.name.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
(interface_declaration name: (identifier) @name) @definition.interface
(annotation_type_declaration name: (identifier) @name) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum

(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(compact_constructor_declaration name: (identifier) @name) @definition.method

(enum_constant name: (identifier) @name) @definition.constant

; static final fields are constants, other fields are fields; the modifiers come before the
; declarator, so both patterns end at the same node and the earlier (constant) one wins
(field_declaration
  [(modifiers "static" "final") (modifiers "final" "static")]
  declarator: (variable_declarator name: (identifier) @name)) @definition.constant
(field_declaration declarator: (variable_declarator name: (identifier) @name)) @definition.field
(interface_body
  (constant_declaration declarator: (variable_declarator name: (identifier) @name)) @definition.constant)

; ---- references ----------------------------------------------------------------------------

(method_invocation !object name: (identifier) @name) @reference.call
(method_invocation object: (_) @receiver name: (identifier) @name) @reference.call
(object_creation_expression type: (type_identifier) @name) @reference.call
(object_creation_expression
  type: (scoped_type_identifier (_) @receiver . (type_identifier) @name .)) @reference.call
(object_creation_expression
  type: (generic_type [
    (type_identifier) @name
    (scoped_type_identifier (_) @receiver . (type_identifier) @name .)
  ])) @reference.call

; extends / implements
(superclass [
  (type_identifier) @name
  (generic_type (type_identifier) @name)
  (scoped_type_identifier (_) @receiver . (type_identifier) @name .)
]) @reference.inherit
(super_interfaces (type_list [
  (type_identifier) @name
  (generic_type (type_identifier) @name)
  (scoped_type_identifier (_) @receiver . (type_identifier) @name .)
] @reference.inherit))
(extends_interfaces (type_list [
  (type_identifier) @name
  (generic_type (type_identifier) @name)
  (scoped_type_identifier (_) @receiver . (type_identifier) @name .)
] @reference.inherit))

(marker_annotation name: (identifier) @name) @reference.call
(annotation name: (identifier) @name) @reference.call

; every use of a type name; the qualified form first so its @receiver is kept
(scoped_type_identifier (_) @receiver . (type_identifier) @name .) @reference.type
(type_identifier) @name @reference.type

; ---- imports -------------------------------------------------------------------------------

; import a.b.C;  import static a.b.C.m;
(import_declaration
  (scoped_identifier scope: (_) @import.module name: (identifier) @import.name)
  .) @import
; import a.b.*;
(import_declaration
  (scoped_identifier) @import.module
  (asterisk) @import.name) @import
