; repoctx tags query for Ruby. Conventions: see python.scm. A Ruby `module` is a namespace (a
; `namespace` definition: repoctx's `module` kind is the file itself); `def` directly inside a
; module is a (mixin) method, `def self.x` there a module function; inside a class both are
; methods. `require`/`require_relative`/`load` capture the whole call as @import.module: the
; Ruby hooks (lang_hooks.py) read which of them it is and turn the file path into a module.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class name: [
  (constant) @name
  (scope_resolution name: (constant) @name)
]) @definition.class
(module name: [
  (constant) @name
  (scope_resolution name: (constant) @name)
]) @definition.namespace

(module body: (body_statement (method name: (_) @name) @definition.method))
(method name: (_) @name) @definition.function
(singleton_method name: (_) @name) @definition.function

; NAME = value (a constant assignment inside a method is a syntax error in Ruby)
(assignment left: (constant) @name) @definition.constant

; ---- references ----------------------------------------------------------------------------

; Item.new(...), Shop::Item.new(...): a call of the class, as Java's `new Item()`
((call
  receiver: [
    (constant) @name
    (scope_resolution scope: (_) @receiver name: (constant) @name)
  ]
  method: (identifier) @_new) @reference.call
  (#eq? @_new "new"))

; include / extend / prepend Mixin: inheritance
((call
  !receiver
  method: (identifier) @_mixin
  arguments: (argument_list [
    (constant) @name
    (scope_resolution scope: (_) @receiver name: (constant) @name)
  ])) @reference.inherit
  (#any-of? @_mixin "include" "extend" "prepend"))

; obj.m(), Mod::m(), m(args) / m args; require and friends are imports, not calls
(call receiver: (_) @receiver method: (identifier) @name) @reference.call
((call !receiver method: (identifier) @name) @reference.call
  (#not-match? @name "^(require|require_relative|load)$"))

; class A < B, class A < Mod::B
(superclass [
  (constant) @name
  (scope_resolution scope: (_) @receiver name: (constant) @name)
]) @reference.inherit

; uses of class and module names (CamelCase constants; ALL_CAPS ones are values)
((scope_resolution scope: (_) @receiver name: (constant) @name) @reference.type
  (#match? @name "[a-z]"))
((constant) @name @reference.type
  (#match? @name "[a-z]"))

; ---- imports -------------------------------------------------------------------------------

; require "json"; require "shop/item"; require_relative "../lib/x"; load "tasks.rb"
((call
  !receiver
  method: (identifier) @_req
  arguments: (argument_list . (string . (string_content) .) .)) @import @import.module
  (#any-of? @_req "require" "require_relative" "load"))
