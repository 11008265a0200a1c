; repoctx tags query for Julia. `function f(...)`, the short form `f(x) = ...` and
; `macro m(...)` are definitions named by their signature's call; `module`, `struct` (fields
; nested), `abstract type` and `const` are definitions too. A docstring is the string literal
; just above a definition (the hooks read it as a comment). `include("item.jl")` is an import
; that brings the file's names into scope; calls, `x.f(...)` calls and `x::T` types are
; references.

(module_definition name: (identifier) @name) @definition.namespace
(struct_definition (type_head (identifier) @name)) @definition.struct
(struct_definition (type_head (binary_expression . (identifier) @name))) @definition.struct
(struct_definition (type_head (parametrized_type_expression . (identifier) @name))) @definition.struct
(struct_definition (typed_expression . (identifier) @name) @definition.field)
(abstract_definition (type_head (identifier) @name)) @definition.interface
(abstract_definition (type_head (binary_expression . (identifier) @name))) @definition.interface
(function_definition (signature (call_expression . (identifier) @name))) @definition.function
(function_definition (signature (call_expression . (field_expression (identifier) @name .))))
  @definition.function
(function_definition (signature (where_expression (call_expression . (identifier) @name))))
  @definition.function
(macro_definition (signature (call_expression . (identifier) @name))) @definition.macro
(assignment . (call_expression . (identifier) @name) (operator) @_op (#eq? @_op "="))
  @definition.function
(assignment . (call_expression . (field_expression (identifier) @name .)) (operator) @_op
  (#eq? @_op "=")) @definition.function
(assignment . (where_expression . (call_expression . (identifier) @name)) (operator) @_op
  (#eq? @_op "=")) @definition.function
(assignment . (where_expression . (call_expression . (field_expression (identifier) @name .)))
  (operator) @_op (#eq? @_op "=")) @definition.function
(function_definition (signature (where_expression (call_expression . (field_expression (identifier) @name .)))))
  @definition.function
(const_statement (assignment . (identifier) @name)) @definition.constant

; calls: f(x), mod.f(x) (a definition's own signature is not a call of it)
(call_expression . (identifier) @name) @reference.call
(call_expression . (field_expression . (identifier) @receiver (identifier) @name .)) @reference.call
; types: x::T, T{...}, S <: T
(typed_expression (identifier) (identifier) @name .) @reference.type
(type_head (binary_expression (identifier) (operator) (identifier) @name .)) @reference.inherit

; ---- imports -------------------------------------------------------------------------------
(call_expression . (identifier) @_f (argument_list . (string_literal (content) @import.module) .)
  (#eq? @_f "include")) @import
(using_statement (identifier) @import.module) @import
(import_statement (identifier) @import.module) @import
