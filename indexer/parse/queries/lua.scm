; repoctx tags query for Lua. Conventions: see python.scm. Lua has no classes: a module or
; "class" is a table, so a top-level `local T = { ... }` is a namespace and the functions of its
; constructor are nested in it (`T.f`). `function T.f()` and `function T:m()` stand outside the
; table's node, so their qualname is the bare name (kind function / method); their resolution
; goes through the name (`util.f()` looks `f` up in the module `util` requires).
; Imports capture `local x = require("a.b")` as @import with @import.module and @import.alias.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

; function f() / local function f() / function T.f() / function a.b.f()
(function_declaration name: (identifier) @name) @definition.function
(function_declaration name: (dot_index_expression field: (identifier) @name)) @definition.function
; function T:m()
(function_declaration name: (method_index_expression method: (identifier) @name)) @definition.method

; local f = function() ... end;  T.f = function() ... end
(variable_declaration
  (assignment_statement
    (variable_list . name: (identifier) @name .)
    (expression_list . value: (function_definition) .))) @definition.function
; (an assignment statement of its own: one inside `local ... =` is the pattern above)
(chunk (assignment_statement
  (variable_list . name: [
    (identifier) @name
    (dot_index_expression field: (identifier) @name)
  ] .)
  (expression_list . value: (function_definition) .)) @definition.function)
(block (assignment_statement
  (variable_list . name: [
    (identifier) @name
    (dot_index_expression field: (identifier) @name)
  ] .)
  (expression_list . value: (function_definition) .)) @definition.function)

; { name = function() ... end } inside a table that is itself a definition
(table_constructor
  (field name: (identifier) @name value: (function_definition)) @definition.function)

; top-level tables are namespaces: local M = {}, Config = { ... }
(chunk (variable_declaration
  (assignment_statement
    (variable_list . name: (identifier) @name .)
    (expression_list . value: (table_constructor) .))) @definition.namespace)
(chunk (assignment_statement
  (variable_list . name: (identifier) @name .)
  (expression_list . value: (table_constructor) .)) @definition.namespace)

; other top-level variables (UPPER_CASE ones stay constants, see lang_hooks.LUA); a
; `local x = require(...)` binds an import, not a variable
((chunk (variable_declaration
  (assignment_statement (variable_list . name: (identifier) @name))) @definition.constant)
  (#not-match? @definition.constant "^local\\s+[A-Za-z_][A-Za-z0-9_]*\\s*=\\s*require\\b"))
(chunk (assignment_statement (variable_list . name: (identifier) @name)) @definition.constant)

; ---- references ----------------------------------------------------------------------------

; f(), T.f(), a.b.f(), obj:m()
((function_call name: (identifier) @name) @reference.call
  (#not-eq? @name "require"))
(function_call
  name: (dot_index_expression table: (_) @receiver field: (identifier) @name)) @reference.call
(function_call
  name: (method_index_expression table: (_) @receiver method: (identifier) @name)) @reference.call

; setmetatable(T, { __index = Base }): T inherits from Base
((function_call
  name: (identifier) @_set
  arguments: (arguments
    (table_constructor
      (field name: (identifier) @_key value: [
        (identifier) @name
        (dot_index_expression table: (_) @receiver field: (identifier) @name)
      ]) @reference.inherit)))
  (#eq? @_set "setmetatable")
  (#eq? @_key "__index"))

; ---- imports -------------------------------------------------------------------------------

; local x = require("a.b");  local x = require "a.b"
((variable_declaration
  (assignment_statement
    (variable_list . name: (identifier) @import.alias .)
    (expression_list . value: (function_call
      name: (identifier) @_require
      arguments: (arguments . (string content: (string_content) @import.module) .)) .))) @import
  (#eq? @_require "require"))
; a statement of its own: require("a.b")
(chunk ((function_call
  name: (identifier) @_require
  arguments: (arguments . (string content: (string_content) @import.module) .)) @import
  (#eq? @_require "require")))
(block ((function_call
  name: (identifier) @_require
  arguments: (arguments . (string content: (string_content) @import.module) .)) @import
  (#eq? @_require "require")))
