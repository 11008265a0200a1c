; repoctx tags query for PHP. Conventions: see python.scm. `namespace X;` is not a definition
; (it names a scope spread over many files, as Java's `package`). `use A\B\C [as D];` imports
; with @import.module the whole qualified name (the PHP hooks turn `A\B\C` into `A.B.C`, the
; module of a file at A/B/C.php, PSR-4's one class per file) and @import.name its last part;
; `use A\B\{C, D as E};` has the prefix as module. `require`/`include` of a string literal
; (also `__DIR__ . '/x.php'`) import a file, made a module by the hooks.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class_declaration name: (name) @name) @definition.class
(interface_declaration name: (name) @name) @definition.interface
(trait_declaration name: (name) @name) @definition.trait
(enum_declaration name: (name) @name) @definition.enum

(function_definition name: (name) @name) @definition.function
(method_declaration name: (name) @name) @definition.method

; const X = 1;  public const X = 1;  (one definition per declaration: its first element)
(const_declaration (const_element . (name) @name)) @definition.constant
(enum_case name: (name) @name) @definition.constant
(property_declaration
  (property_element name: (variable_name (name) @name))) @definition.field

; ---- references ----------------------------------------------------------------------------

; f(), \ns\f(), $obj->m(), $obj?->m(), Cls::m(), new Cls(), new \ns\Cls()
(function_call_expression function: (name) @name) @reference.call
(function_call_expression function: (qualified_name (name) @name .)) @reference.call
; `$this->m()`: the receiver is `this`, as the resolver knows it
(member_call_expression
  object: (variable_name (name) @receiver) name: (name) @name) @reference.call
(member_call_expression object: (_) @receiver name: (name) @name) @reference.call
(nullsafe_member_call_expression
  object: (variable_name (name) @receiver) name: (name) @name) @reference.call
(nullsafe_member_call_expression object: (_) @receiver name: (name) @name) @reference.call
(scoped_call_expression scope: (_) @receiver name: (name) @name) @reference.call
((object_creation_expression (name) @name) @reference.call
  (#not-match? @name "^(self|static|parent)$"))
(object_creation_expression (qualified_name (name) @name .)) @reference.call

; extends / implements / use Trait;
(base_clause [(name) @name (qualified_name (name) @name .)] @reference.inherit)
(class_interface_clause [(name) @name (qualified_name (name) @name .)] @reference.inherit)
(use_declaration [(name) @name (qualified_name (name) @name .)] @reference.inherit)

; type declarations: parameters, returns, properties
((named_type (name) @name) @reference.type
  (#not-match? @name "^(self|static|parent|mixed|iterable|object|callable)$"))
(named_type (qualified_name (name) @name .)) @reference.type

; ---- imports -------------------------------------------------------------------------------

; use A\B\C;  use A\B\C as D;  (a class: the module is the whole name)
((namespace_use_clause
  (qualified_name (name) @import.name .) @import.module !alias) @import
  (#not-match? @import "^(function|const)\\s"))
((namespace_use_clause
  (qualified_name (name) @import.name .) @import.module alias: (name) @import.alias) @import
  (#not-match? @import "^(function|const)\\s"))
; use function A\B\f;  use const A\B\X;  (the module is the namespace)
((namespace_use_clause
  (qualified_name prefix: (_) @import.module (name) @import.name .) !alias) @import
  (#match? @import "^(function|const)\\s"))
((namespace_use_clause
  (qualified_name prefix: (_) @import.module (name) @import.name .) alias: (name) @import.alias) @import
  (#match? @import "^(function|const)\\s"))
; use Foo;  (a global class)
(namespace_use_declaration
  (namespace_use_clause . (name) @import.module @import.name !alias)) @import
; use A\B\{C, D as E};
(namespace_use_declaration
  (namespace_name) @import.module
  body: (namespace_use_group (namespace_use_clause . (name) @import.name !alias))) @import
(namespace_use_declaration
  (namespace_name) @import.module
  body: (namespace_use_group
    (namespace_use_clause . (name) @import.name alias: (name) @import.alias))) @import

; require 'x.php';  include_once __DIR__ . '/x.php';
(require_expression [
  (string . (string_content) @import.module .)
  (binary_expression right: (string . (string_content) @import.module .))
]) @import
(require_once_expression [
  (string . (string_content) @import.module .)
  (binary_expression right: (string . (string_content) @import.module .))
]) @import
(include_expression [
  (string . (string_content) @import.module .)
  (binary_expression right: (string . (string_content) @import.module .))
]) @import
(include_once_expression [
  (string . (string_content) @import.module .)
  (binary_expression right: (string . (string_content) @import.module .))
]) @import
