; repoctx tags query for TypeScript: the JavaScript patterns (javascript.scm) adapted to the
; TypeScript grammar, plus interfaces, enums, type aliases, namespaces and type references.
; tsx.scm includes this file and adds the JSX patterns.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

[
  (class_declaration name: (_) @name)
  (abstract_class_declaration name: (_) @name)
] @definition.class

(lexical_declaration
  (variable_declarator name: (identifier) @name value: (class))) @definition.class

(interface_declaration name: (_) @name) @definition.interface
(enum_declaration name: (_) @name) @definition.enum
(type_alias_declaration name: (_) @name) @definition.type
[
  (internal_module name: [(identifier) (nested_identifier)] @name)
  (module name: [(identifier) (nested_identifier)] @name)
] @definition.namespace

(method_definition
  name: [(property_identifier) (private_property_identifier)] @name) @definition.method
[
  (method_signature name: (property_identifier) @name)
  (abstract_method_signature name: (property_identifier) @name)
] @definition.method

(public_field_definition
  name: [(property_identifier) (private_property_identifier)] @name
  value: [(arrow_function) (function_expression)]) @definition.method
; `value: (_)?` makes this match end after the value, so the method pattern above (an earlier
; pattern ending at the same node) reaches the parser first and wins.
(public_field_definition
  name: [(property_identifier) (private_property_identifier)] @name
  value: (_)?) @definition.field
(property_signature name: (property_identifier) @name) @definition.field

(enum_body name: (property_identifier) @name @definition.constant)
(enum_body (enum_assignment name: (property_identifier) @name) @definition.constant)

[
  (function_declaration name: (identifier) @name)
  (generator_function_declaration name: (identifier) @name)
  (function_signature name: (identifier) @name)
] @definition.function

(lexical_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function
(variable_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function

(expression_statement
  (assignment_expression
    left: [
      (identifier) @name
      (member_expression property: (property_identifier) @name)
    ]
    right: [(arrow_function) (function_expression)])) @definition.function

(pair
  key: (property_identifier) @name
  value: [(arrow_function) (function_expression)]) @definition.function

((program
  (lexical_declaration
    kind: "const"
    (variable_declarator
      name: (identifier) @name
      value: [
        (number) (string) (template_string) (true) (false) (null) (undefined) (regex)
        (object) (array) (identifier) (member_expression) (binary_expression)
        (unary_expression) (ternary_expression) (new_expression) (await_expression)
        (parenthesized_expression) (as_expression) (satisfies_expression)
        (non_null_expression)
        (call_expression function: (_) @_fn)
      ])) @definition.constant)
  (#not-eq? @_fn "require"))
((program
  (export_statement
    declaration: (lexical_declaration
      kind: "const"
      (variable_declarator
        name: (identifier) @name
        value: [
          (number) (string) (template_string) (true) (false) (null) (undefined) (regex)
          (object) (array) (identifier) (member_expression) (binary_expression)
          (unary_expression) (ternary_expression) (new_expression) (await_expression)
          (parenthesized_expression) (as_expression) (satisfies_expression)
          (non_null_expression)
          (call_expression function: (_) @_fn)
        ])) @definition.constant))
  (#not-eq? @_fn "require"))

; ---- references ----------------------------------------------------------------------------

((call_expression function: (identifier) @name) @reference.call
  (#not-eq? @name "require"))
(call_expression
  function: (member_expression
    object: (_) @receiver
    property: [(property_identifier) (private_property_identifier)] @name)) @reference.call

(new_expression constructor: (identifier) @name) @reference.call
(new_expression
  constructor: (member_expression
    object: (_) @receiver
    property: (property_identifier) @name)) @reference.call

; class A extends B<T> implements C, ns.D, E<F>; interface I extends J
(extends_clause value: (identifier) @name) @reference.inherit
(extends_clause
  value: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.inherit
(implements_clause (type_identifier) @name) @reference.inherit
(implements_clause
  (nested_type_identifier module: (_) @receiver name: (type_identifier) @name)) @reference.inherit
(implements_clause (generic_type name: (type_identifier) @name)) @reference.inherit
(implements_clause
  (generic_type
    name: (nested_type_identifier module: (_) @receiver name: (type_identifier) @name))) @reference.inherit
(extends_type_clause type: (type_identifier) @name) @reference.inherit
(extends_type_clause
  type: (nested_type_identifier module: (_) @receiver name: (type_identifier) @name)) @reference.inherit
(extends_type_clause type: (generic_type name: (type_identifier) @name)) @reference.inherit

; every use of a type name: annotations, generics, casts, heritage, aliases. The qualified form
; comes first: for the same name it matches from an outer node, so its @receiver is kept.
(nested_type_identifier module: (_) @receiver name: (type_identifier) @name) @reference.type
(type_identifier) @name @reference.type

; ---- imports -------------------------------------------------------------------------------

(import_statement
  (import_clause (identifier) @import.name @import.alias)
  source: (string) @import.module) @import
(import_statement
  (import_clause (namespace_import (identifier) @import.alias))
  source: (string) @import.module) @import
(import_statement
  (import_clause
    (named_imports (import_specifier name: (_) @import.name alias: (_)? @import.alias)))
  source: (string) @import.module) @import
(import_statement . source: (string) @import.module) @import
; import fs = require('fs')
(import_statement
  (import_require_clause (identifier) @import.alias source: (string) @import.module)) @import

(export_statement
  (export_clause (export_specifier name: (_) @import.name alias: (_)? @import.alias))
  source: (string) @import.module) @import
(export_statement "*" @import.name source: (string) @import.module) @import
(export_statement
  (namespace_export (_) @import.alias)
  source: (string) @import.module) @import

((variable_declarator
  name: (identifier) @import.alias
  value: (call_expression
    function: (identifier) @_req
    arguments: (arguments . (string) @import.module .))) @import
  (#eq? @_req "require"))
((variable_declarator
  name: (object_pattern
    (shorthand_property_identifier_pattern) @import.name @import.alias)
  value: (call_expression
    function: (identifier) @_req
    arguments: (arguments . (string) @import.module .))) @import
  (#eq? @_req "require"))
((variable_declarator
  name: (object_pattern
    (pair_pattern key: (property_identifier) @import.name value: (identifier) @import.alias))
  value: (call_expression
    function: (identifier) @_req
    arguments: (arguments . (string) @import.module .))) @import
  (#eq? @_req "require"))
