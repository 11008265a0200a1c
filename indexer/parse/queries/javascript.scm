; repoctx tags query for JavaScript (and JSX).
; Conventions: see python.scm. Imports capture the statement as @import with @import.module,
; @import.name and @import.alias. Where two patterns capture the same node the earlier
; pattern wins, so the specific ones come first.

; ---- definitions ---------------------------------------------------------------------------

(class_declaration name: (_) @name) @definition.class

; const Foo = class { ... }
(lexical_declaration
  (variable_declarator name: (identifier) @name value: (class))) @definition.class

(method_definition
  name: [(property_identifier) (private_property_identifier)] @name) @definition.method

; class fields holding a function are methods in all but syntax
(field_definition
  property: [(property_identifier) (private_property_identifier)] @name
  value: [(arrow_function) (function_expression)]) @definition.method
; `value: (_)?` makes this match end after the value, so the method pattern above (an earlier
; pattern ending at the same node) reaches the parser first and wins.
(field_definition
  property: [(property_identifier) (private_property_identifier)] @name
  value: (_)?) @definition.field

[
  (function_declaration name: (identifier) @name)
  (generator_function_declaration name: (identifier) @name)
] @definition.function

; the declaration, not the declarator, so the doc comment and `const` are in reach
(lexical_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function
(variable_declaration
  (variable_declarator
    name: (identifier) @name
    value: [(arrow_function) (function_expression) (generator_function)])) @definition.function

; exports.f = function () {}, Foo.prototype.bar = () => {}
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

; module-level `const NAME = value` (functions, classes and require() are handled above/below)
((program
  (lexical_declaration
    kind: "const"
    (variable_declarator
      name: (identifier) @name
      value: [
        (number) (string) (template_string) (true) (false) (null) (undefined) (regex)
        (object) (array) (identifier) (member_expression) (binary_expression)
        (unary_expression) (ternary_expression) (new_expression) (await_expression)
        (parenthesized_expression)
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
          (parenthesized_expression)
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

; JSX components (lower-case tags are HTML elements)
((jsx_opening_element name: (identifier) @name) @reference.call
  (#match? @name "^[A-Z]"))
((jsx_self_closing_element name: (identifier) @name) @reference.call
  (#match? @name "^[A-Z]"))
(jsx_opening_element
  name: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.call
(jsx_self_closing_element
  name: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.call

(class_heritage (identifier) @name) @reference.inherit
(class_heritage
  (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.inherit

; ---- imports -------------------------------------------------------------------------------

; import x from 'm'  (the default export; its local name stands in for the exported one)
(import_statement
  (import_clause (identifier) @import.name @import.alias)
  source: (string) @import.module) @import
; import * as ns from 'm'
(import_statement
  (import_clause (namespace_import (identifier) @import.alias))
  source: (string) @import.module) @import
; import {a, b as c} from 'm'
(import_statement
  (import_clause
    (named_imports (import_specifier name: (_) @import.name alias: (_)? @import.alias)))
  source: (string) @import.module) @import
; import 'm'
(import_statement . source: (string) @import.module) @import

; re-exports: export {a, b as c} from 'm'; export * from 'm'; export * as ns from 'm'
(export_statement
  (export_clause (export_specifier name: (_) @import.name alias: (_)? @import.alias))
  source: (string) @import.module) @import
(export_statement "*" @import.name source: (string) @import.module) @import
(export_statement
  (namespace_export (_) @import.alias)
  source: (string) @import.module) @import

; CommonJS: const x = require('m'); const {a, b: c} = require('m')
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
