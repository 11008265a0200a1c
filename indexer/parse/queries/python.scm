; repoctx tags query for Python.
; Conventions (all languages): a pattern captures the whole node as @definition.KIND or
; @reference.KIND and the identifier as @name; attribute references may capture @receiver.
; Python imports are read from the syntax tree in code (relative imports need the path).

(class_definition name: (identifier) @name) @definition.class
(function_definition name: (identifier) @name) @definition.function

(module (expression_statement
  (assignment left: (identifier) @name) @definition.constant))

; calls: f(), obj.method(), pkg.mod.func()
(call function: (identifier) @name) @reference.call
(call function: (attribute object: (_) @receiver attribute: (identifier) @name)) @reference.call

; decorators: @name, @mod.name, @name(...)
(decorator (identifier) @name) @reference.call
(decorator (attribute object: (_) @receiver attribute: (identifier) @name)) @reference.call

; inheritance
(class_definition superclasses: (argument_list (identifier) @name) @reference.inherit)
(class_definition superclasses: (argument_list
  (attribute object: (_) @receiver attribute: (identifier) @name) @reference.inherit))

; type annotations: x: T, -> T, T[U], mod.T
(type (identifier) @name) @reference.type
(type (attribute object: (_) @receiver attribute: (identifier) @name)) @reference.type
(type (generic_type (identifier) @name)) @reference.type
(type (subscript value: (identifier) @name)) @reference.type

; imports are interpreted in code (relative levels, aliases)
[(import_statement) (import_from_statement) (future_import_statement)] @import.statement
