; repoctx tags query for Dart. Conventions: see python.scm. The grammar puts a function's
; signature and its body side by side (no node holds both), so a function or method is its
; signature node: its span is the signature and the references of its body are enclosed by
; the class (methods) or the file (top-level functions). Imports capture the import
; specification as @import with @import.module (the URI, rewritten by DartHooks), @import.alias
; (`as p`) and @import.name (each name of `show`). Where two patterns capture the same node the
; earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class_definition name: (identifier) @name) @definition.class
(class_definition (mixin_application_class . (identifier) @name)) @definition.class
(mixin_declaration (identifier) @name) @definition.trait
(enum_declaration name: (identifier) @name) @definition.enum
(enum_constant name: (identifier) @name) @definition.constant
(extension_declaration name: (identifier) @name) @definition.impl
(type_alias . (type_identifier) @name) @definition.type

; methods with a body: the method_signature (its doc comment is its sibling)
(method_signature (function_signature name: (identifier) @name)) @definition.function
(method_signature (getter_signature name: (identifier) @name)) @definition.function
(method_signature (setter_signature name: (identifier) @name)) @definition.function
(method_signature (operator_signature) @name) @definition.function
(method_signature
  (constructor_signature name: (identifier) @name . parameters: (_))) @definition.function
(method_signature
  (factory_constructor_signature (identifier) @name . (formal_parameter_list))) @definition.function

; abstract methods, constructors without a body and fields: a class body declaration
(declaration (function_signature name: (identifier) @name)) @definition.function
(declaration (getter_signature name: (identifier) @name)) @definition.function
(declaration (setter_signature name: (identifier) @name)) @definition.function
(declaration
  (constructor_signature name: (identifier) @name . parameters: (_))) @definition.function
(declaration
  (factory_constructor_signature (identifier) @name . (formal_parameter_list))) @definition.function
(declaration
  (constant_constructor_signature (identifier) @name . (formal_parameter_list))) @definition.function
(declaration
  (redirecting_factory_constructor_signature (identifier) @name . (formal_parameter_list))) @definition.function
(declaration (const_builtin)
  (static_final_declaration_list (static_final_declaration (identifier) @name))) @definition.constant
(declaration
  (static_final_declaration_list (static_final_declaration (identifier) @name))) @definition.field
(declaration
  (initialized_identifier_list (initialized_identifier (identifier) @name))) @definition.field
(declaration
  (identifier_list (identifier) @name)) @definition.field

; top-level functions and variables (the grammar does not wrap a top-level variable, so the
; declarator is the definition and its doc comment is out of reach)
(program (function_signature name: (identifier) @name) @definition.function)
(program (getter_signature name: (identifier) @name) @definition.function)
(program (setter_signature name: (identifier) @name) @definition.function)
(program (const_builtin) . (_)? .
  (static_final_declaration_list (static_final_declaration (identifier) @name) @definition.constant))
(program
  (static_final_declaration_list (static_final_declaration (identifier) @name) @definition.variable))
(program
  (initialized_identifier_list (initialized_identifier (identifier) @name) @definition.variable))

; ---- references ----------------------------------------------------------------------------

; f(), Type(), obj.m(), this.m(), a.b.m() (a receiver of more than one part is "?"),
; obj?.m(), list..add()
(_ (identifier) @name . (selector (argument_part)) @reference.call)
(_ [(identifier) (this) (super)] @receiver .
  (selector [(unconditional_assignable_selector (identifier) @name)
             (conditional_assignable_selector (identifier) @name)]) .
  (selector (argument_part)) @reference.call)
(_ (selector) @receiver .
  (selector [(unconditional_assignable_selector (identifier) @name)
             (conditional_assignable_selector (identifier) @name)]) .
  (selector (argument_part)) @reference.call)
(_ (_) @receiver . (cascade_section) * . (cascade_section (cascade_selector (identifier) @name) @reference.call))
(new_expression (type_identifier) @name) @reference.call
(const_object_expression (type_identifier) @name) @reference.call
(annotation name: (identifier) @name) @reference.call

; extends / with / implements / mixin ... on
(superclass (type_identifier) @name) @reference.inherit
(mixins (type_identifier) @name) @reference.inherit
(interfaces (type_identifier) @name) @reference.inherit
(mixin_declaration (type_identifier) @name) @reference.inherit
(mixin_application (type_identifier) @name) @reference.inherit

; every other use of a type name (the core types are not references)
((type_identifier) @name @reference.type
  (#not-match? @name "^(bool|double|dynamic|int|num|Never|Null|Object|String|void)$"))

; ---- imports -------------------------------------------------------------------------------

; import 'x.dart';  import 'x.dart' as p;  import 'x.dart' show A, B;
((import_specification (configurable_uri) @import.module) @import
  (#not-match? @import "\\s(as|show)\\s"))
(import_specification (configurable_uri) @import.module . (identifier) @import.alias) @import
(import_specification
  (configurable_uri) @import.module
  (combinator "show" (identifier) @import.name)) @import
