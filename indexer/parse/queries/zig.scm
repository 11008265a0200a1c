; repoctx tags query for Zig. A container is a constant whose value is a struct/enum/union/
; opaque declaration (`const Inventory = struct { ... }`); its fields and functions nest in it.
; `const x = @import("file.zig")` is an import bound to x (the hooks turn the path into a
; module), not a definition; other top-level constants and variables are definitions.

(function_declaration name: (identifier) @name) @definition.function
(variable_declaration (identifier) @name (struct_declaration)) @definition.struct
(variable_declaration (identifier) @name (union_declaration)) @definition.struct
(variable_declaration (identifier) @name (opaque_declaration)) @definition.struct
(variable_declaration (identifier) @name (enum_declaration)) @definition.enum
(container_field (identifier) @name) @definition.field
(source_file (variable_declaration (identifier) @name) @definition.constant
  (#not-match? @definition.constant "@import\\s*\\("))

; calls: f(x), obj.f(x), mod.f(x)
(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression object: (_) @receiver member: (identifier) @name))
  @reference.call
; types named in parameters, results, fields and declarations: Item, mod.Item
(parameter type: (identifier) @name) @reference.type
(pointer_type (identifier) @name) @reference.type
(function_declaration type: (identifier) @name) @reference.type
(variable_declaration (field_expression object: (identifier) @receiver member: (identifier) @name))
  @reference.type

; ---- imports -------------------------------------------------------------------------------
(variable_declaration (identifier) @import.alias
  (builtin_function (builtin_identifier) @_b (arguments (string (string_content) @import.module)))
  (#eq? @_b "@import")) @import
