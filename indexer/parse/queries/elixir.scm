; repoctx tags query for Elixir. Conventions: see python.scm. Everything is a macro call in
; Elixir, so definitions are calls whose target is `defmodule`, `def`, `defp`, ... (matched with
; #match? on an @_-prefixed capture, which the parser ignores). `defmodule A.B` is a namespace
; named "A.B" (a class kind, so `A.B.f()` finds its functions); `def`/`defp` inside it are
; functions with the qualname `A.B.f`; `defstruct` is a struct named `defstruct`. Imports:
; `alias`/`import`/`require`/`use A.B` capture @import.module (rewritten by ElixirHooks to the
; file Mix puts A.B in) and @import.name (the module, the name its functions are reached by).
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

((call target: (identifier) @_kw (arguments . (alias) @name)) @definition.namespace
  (#any-of? @_kw "defmodule" "defprotocol"))
((call target: (identifier) @_kw (arguments . (alias) @name)) @definition.impl
  (#eq? @_kw "defimpl"))

((call target: (identifier) @_kw
  (arguments . [
    (call target: (identifier) @name)
    (identifier) @name
    (binary_operator left: [(call target: (identifier) @name) (identifier) @name] operator: "when")
  ])) @definition.function
  (#any-of? @_kw "def" "defp" "defdelegate"))
((call target: (identifier) @_kw
  (arguments . [
    (call target: (identifier) @name)
    (identifier) @name
    (binary_operator left: [(call target: (identifier) @name) (identifier) @name] operator: "when")
  ])) @definition.macro
  (#any-of? @_kw "defmacro" "defmacrop" "defguard" "defguardp"))

((call target: (identifier) @name) @definition.struct
  (#any-of? @name "defstruct" "defexception"))

; @type t :: ...; @callback f(t) :: r
((unary_operator operand: (call target: (identifier) @_kw
  (arguments (binary_operator
    left: [(identifier) @name (call target: (identifier) @name)] operator: "::")))) @definition.type
  (#any-of? @_kw "type" "typep" "opaque"))
((unary_operator operand: (call target: (identifier) @_kw
  (arguments (binary_operator
    left: (call target: (identifier) @name) operator: "::")))) @definition.function
  (#any-of? @_kw "callback" "macrocallback"))

; ---- references ----------------------------------------------------------------------------

; Remote calls: Store.put(x), Shop.Store.count(x), :ets.new(...) (receiver "?"), mod.f()
; (a field access, `item.name`, is a call without arguments and no reference)
(call target: (dot left: (_) @receiver right: (identifier) @name) (arguments)) @reference.call
; function captures: &helper/1, &Mod.fun/2
(unary_operator operator: "&"
  operand: (binary_operator left: (identifier) @name operator: "/")) @reference.call
(unary_operator operator: "&"
  operand: (binary_operator
    left: (call target: (dot left: (_) @receiver right: (identifier) @name))
    operator: "/")) @reference.call

; Local calls: f(x), f x. A def head is a call too, so a local call is matched only where a
; definition head cannot be: in a body, in an operator (but the left of `when`/`::`), in a
; collection, or among the arguments of a call that is not a definition or a directive.
([
  (do_block (call target: (identifier) @name) @reference.call)
  (else_block (call target: (identifier) @name) @reference.call)
  (after_block (call target: (identifier) @name) @reference.call)
  (rescue_block (call target: (identifier) @name) @reference.call)
  (catch_block (call target: (identifier) @name) @reference.call)
  (body (call target: (identifier) @name) @reference.call)
  (source (call target: (identifier) @name) @reference.call)
  (block (call target: (identifier) @name) @reference.call)
  (list (call target: (identifier) @name) @reference.call)
  (tuple (call target: (identifier) @name) @reference.call)
  (pair (call target: (identifier) @name) @reference.call)
  (interpolation (call target: (identifier) @name) @reference.call)
  (map_content (call target: (identifier) @name) @reference.call)
 ]
  (#not-match? @name "^(def|defp|defmacro|defmacrop|defguard|defguardp|defdelegate|defmodule|defprotocol|defimpl|defstruct|defexception|alias|import|require|use|if|unless|case|cond|with|for|fn|quote|unquote|receive|try|raise|reraise|throw|super)$"))
((binary_operator operator: _ @_op right: (call target: (identifier) @name) @reference.call)
  (#not-eq? @_op "::")
  (#not-match? @name "^(if|unless|case|cond|with|for|quote|unquote|receive|try)$"))
((binary_operator left: (call target: (identifier) @name) @reference.call operator: _ @_op)
  (#not-match? @_op "^(when|::)$"))
((call target: (_) @_kw (arguments (call target: (identifier) @name) @reference.call))
  (#not-match? @_kw "^(def|defp|defmacro|defmacrop|defguard|defguardp|defdelegate|alias|import|require|use|spec|type|typep|opaque|callback|macrocallback|doc|moduledoc)$")
  (#not-match? @name "^(if|unless|case|cond|with|for|quote|unquote|receive|try)$"))

; struct literals and behaviours: %Item{}, @behaviour Shop.Priced
(struct (alias) @name) @reference.call
((unary_operator operand: (call target: (identifier) @_kw (arguments (alias) @name))) @reference.inherit
  (#eq? @_kw "behaviour"))
((call target: (identifier) @_kw (arguments . (alias) @name)) @reference.inherit
  (#eq? @_kw "use"))

; ---- imports -------------------------------------------------------------------------------

; alias A.B;  import A.B;  require A.B;  use A.B
((call target: (identifier) @_kw (arguments . (alias) @import.module @import.name .)) @import
  (#any-of? @_kw "alias" "import" "require" "use"))
((call target: (identifier) @_kw
  (arguments . (alias) @import.module @import.name (keywords) @_opts)) @import
  (#any-of? @_kw "import" "require" "use")
  (#not-match? @_opts "^as:"))
; alias A.B, as: C
((call target: (identifier) @_kw
  (arguments . (alias) @import.module @import.name
    (keywords (pair key: (keyword) @_as value: (alias) @import.alias)))) @import
  (#any-of? @_kw "alias" "import" "require")
  (#match? @_as "^as:"))
