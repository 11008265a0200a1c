; repoctx tags query for OCaml implementations (.ml). Conventions: see python.scm. The
; definitions and types it shares with interfaces are in ocaml_common.scm (included). A `module M = struct ... end` is a namespace (its `let`s are its
; members: `M.f`), a `module type` an interface, a `let` with parameters a function and one
; without a variable. Imports: `open M` and `module A = M` capture @import with
; @import.module (and @import.alias); the module of a file is its capitalised stem
; (OCamlHooks). Where two patterns capture the same node the earlier pattern wins.

; @include ocaml_common.scm

; ---- implementation definitions ------------------------------------------------------------

(value_definition (let_binding pattern: (value_name) @name (parameter))) @definition.function
(value_definition (let_binding pattern: (value_name) @name body: (fun_expression))) @definition.function
(value_definition (let_binding pattern: (value_name) @name body: (function_expression))) @definition.function
(value_definition (let_binding pattern: (value_name) @name)) @definition.variable
(class_definition (class_binding (class_name) @name)) @definition.class
(method_definition (method_name) @name) @definition.method

; ---- references ----------------------------------------------------------------------------

; f x, M.f x, A.B.f x (receiver "A.B")
(application_expression function: (value_path (module_path) @receiver (value_name) @name)) @reference.call
(application_expression function: (value_path . (value_name) @name)) @reference.call
; x |> f, x |> M.f
((infix_expression operator: (_) @_op
  right: (value_path (module_path) @receiver (value_name) @name)) @reference.call
  (#eq? @_op "|>"))
((infix_expression operator: (_) @_op right: (value_path . (value_name) @name)) @reference.call
  (#eq? @_op "|>"))
(method_invocation object: (_) @receiver method: (method_name) @name) @reference.call
(include_module (module_path (module_name) @name)) @reference.inherit

; ---- imports -------------------------------------------------------------------------------

(open_module module: (module_path) @import.module @import.alias) @import
(module_definition
  (module_binding (module_name) @import.alias body: (module_path) @import.module)) @import
