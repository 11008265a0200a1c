; repoctx tags query for Haskell. Conventions: see python.scm. A function is each of its
; equations (`function`/`bind` nodes; a function of several clauses is several definitions);
; its type signature and Haddock comment above it are read as its doc (HaskellHooks). `data`,
; `newtype` and `type` are types, a `class` an interface whose signatures are methods, an
; `instance C T` an impl named after T with C as an inherit reference. Imports capture the
; `import` as @import with @import.module, @import.alias (`as M`) and @import.name (each name
; of an import list). Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(data_type name: (name) @name) @definition.type
(newtype name: (name) @name) @definition.type
(type_synonym name: (name) @name) @definition.type
(type_family name: (name) @name) @definition.type
(class name: (name) @name) @definition.interface
(instance patterns: (type_patterns . [(name) @name (apply constructor: (name) @name)
                                     (parens (apply constructor: (name) @name))])) @definition.impl

(record fields: (fields (field name: (field_name (variable) @name)) @definition.field))
(data_constructor constructor: (prefix name: (constructor) @name)) @definition.constant
(data_constructor constructor: (record name: (constructor) @name)) @definition.constant

(class_declarations (signature name: (variable) @name) @definition.function)
(instance_declarations (function name: (variable) @name) @definition.function)
(instance_declarations (bind name: (variable) @name) @definition.function)
(declarations (function name: (variable) @name) @definition.function)
(declarations (bind name: (variable) @name) @definition.variable)

; ---- references ----------------------------------------------------------------------------

; f x, Map.lookup k m (a module path of more than one part is receiver "?"), Con x
(apply function: (variable) @name) @reference.call
(apply function: (qualified module: (module . (module_id) @receiver .) id: (variable) @name)) @reference.call
(apply function: (qualified module: (module) @receiver id: (variable) @name)) @reference.call
(apply function: (constructor) @name) @reference.call
(apply function: (qualified module: (module . (module_id) @receiver .) id: (constructor) @name)) @reference.call
; x & f, f $ x, f . g and `f` infix: the operands that are functions
(infix operator: (infix_id (variable) @name)) @reference.call

(instance name: (name) @name) @reference.inherit
(deriving classes: [(name) @name (parens (name) @name) (tuple (name) @name)]) @reference.inherit

; every use of a type name, qualified first so its @receiver is kept; the Prelude's types are
; not references
(qualified module: (module . (module_id) @receiver .) id: (name) @name) @reference.type
((name) @name @reference.type
  (#not-match? @name "^(Int|Integer|Double|Float|Char|String|Bool|Maybe|Either|IO|Word|Ordering|Show|Eq|Ord|Num|Functor|Monad|Applicative|Foldable|Traversable|Semigroup|Monoid)$"))

; ---- imports -------------------------------------------------------------------------------

(import module: (module) @import.module !alias !names) @import
(import module: (module) @import.module alias: (module) @import.alias !names) @import
(import module: (module) @import.module
  names: (import_list name: (import_name [(variable) (name)] @import.name))) @import
