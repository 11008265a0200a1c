; repoctx tags query for Kotlin. Conventions: see python.scm. `package` is not a definition (as
; Java's). Imports capture @import.module as the whole imported name and @import.name as its last
; part, so `import a.b.Item` resolves to the class in a/b/Item.kt (file named after its class);
; `import a.b.*` has the package as module and `*` as name. The grammar has no `body` field, so
; signatures are a definition's first line.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class_declaration "interface" name: (identifier) @name) @definition.interface
((class_declaration (modifiers (class_modifier) @_enum) name: (identifier) @name) @definition.enum
  (#eq? @_enum "enum"))
(class_declaration name: (identifier) @name) @definition.class
(object_declaration name: (identifier) @name) @definition.class
(companion_object name: (identifier) @name) @definition.class
(type_alias type: (identifier) @name) @definition.type

; functions; inside a class, interface or object the parser makes them methods
(function_declaration name: (identifier) @name) @definition.function

(enum_entry . (identifier) @name) @definition.constant
((property_declaration
  (modifiers (property_modifier) @_const) (variable_declaration . (identifier) @name)) @definition.constant
  (#eq? @_const "const"))
(source_file (property_declaration (variable_declaration . (identifier) @name)) @definition.variable)
(class_body (property_declaration (variable_declaration . (identifier) @name)) @definition.field)
; class Line(val sku: String): constructor properties
((class_parameter (identifier) @name) @definition.field
  (#match? @definition.field "^([^:]*\\s)?(val|var)\\s"))

; ---- references ----------------------------------------------------------------------------

; f(), Item(...) (a constructor call), obj.m(), this.items.add(), a?.m()
(call_expression . (identifier) @name) @reference.call
(call_expression
  . (navigation_expression (_) @receiver . (identifier) @name .)) @reference.call

; class C : Base(x), Iface, Comparable<C>
(delegation_specifier [
  (user_type (identifier) @name .)
  (user_type (identifier) @name . (type_arguments))
  (constructor_invocation (user_type (identifier) @name .))
  (constructor_invocation (user_type (identifier) @name . (type_arguments)))
] @reference.inherit)

; @Annotation
(annotation (user_type (identifier) @name .)) @reference.call
(annotation (constructor_invocation (user_type (identifier) @name .))) @reference.call

; every use of a type name, less the builtin ones
([(user_type (identifier) @name .) (user_type (identifier) @name . (type_arguments))] @reference.type
  (#not-match? @name "^(Any|Array|Boolean|Byte|Char|Double|Float|Int|Long|Nothing|Number|Short|String|Unit|List|MutableList|Map|MutableMap|Set|MutableSet|Collection|Iterable|Sequence|Pair|Triple)$"))

; ---- imports -------------------------------------------------------------------------------

; import a.b.C;  import a.b.C as D;  import a.b.*
((import (qualified_identifier (identifier) @import.name .) @import.module .) @import
  (#not-match? @import "\\*\\s*$"))
(import
  (qualified_identifier (identifier) @import.name .) @import.module
  (identifier) @import.alias) @import
(import (qualified_identifier) @import.module "*" @import.name) @import
