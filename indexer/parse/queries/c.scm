; repoctx tags query for C. Conventions: see python.scm. Includes capture the directive as
; @import with @import.module (the path; quotes and <> are stripped by the parser).
; cpp.scm carries these patterns adapted to the C++ grammar; keep the two in step.
; Where two patterns capture the same node the earlier pattern wins. Top-level things also sit
; inside #if/#ifdef blocks (include guards), hence the lists of parents.

; ---- definitions ---------------------------------------------------------------------------

; functions: the whole definition, named through up to two pointer declarators
(function_definition
  declarator: [
    (function_declarator declarator: (identifier) @name)
    (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
    (pointer_declarator
      declarator: (pointer_declarator declarator: (function_declarator declarator: (identifier) @name)))
  ]) @definition.function

; prototypes at file level (headers document their API there)
(translation_unit
  (declaration
    declarator: [
      (function_declarator declarator: (identifier) @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_ifdef
  (declaration
    declarator: [
      (function_declarator declarator: (identifier) @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_if
  (declaration
    declarator: [
      (function_declarator declarator: (identifier) @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_else
  (declaration
    declarator: [
      (function_declarator declarator: (identifier) @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_elif
  (declaration
    declarator: [
      (function_declarator declarator: (identifier) @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
    ]) @definition.function)

; struct/union/enum with a body, named by their tag; inside a typedef they take the typedef's
; name instead (below), so the tag is not captured there
(translation_unit
  [
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_ifdef
  [
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_if
  [
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_else
  [
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_elif
  [
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(declaration
  [
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(field_declaration
  [
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])

(type_definition
  type: (struct_specifier body: (_))
  declarator: (type_identifier) @name) @definition.struct
(type_definition
  type: (union_specifier body: (_))
  declarator: (type_identifier) @name) @definition.union
(type_definition
  type: (enum_specifier body: (_))
  declarator: (type_identifier) @name) @definition.enum
(type_definition
  declarator: [
    (type_identifier) @name
    (pointer_declarator declarator: (type_identifier) @name)
    (function_declarator
      declarator: (parenthesized_declarator (pointer_declarator declarator: (type_identifier) @name)))
  ]) @definition.type

(enumerator_list (enumerator name: (identifier) @name) @definition.constant)
(field_declaration_list
  (field_declaration
    declarator: [
      (field_identifier) @name
      (pointer_declarator declarator: (field_identifier) @name)
      (array_declarator declarator: (field_identifier) @name)
    ]) @definition.field)

(preproc_def name: (identifier) @name) @definition.macro
(preproc_function_def name: (identifier) @name) @definition.macro

; file-level const-qualified variables
; @include c_constants.scm

; ---- references ----------------------------------------------------------------------------

(call_expression function: (identifier) @name) @reference.call
(call_expression
  function: (field_expression argument: (_) @receiver field: (field_identifier) @name)) @reference.call

((type_identifier) @name @reference.type
  (#not-match? @name "^(u?int(8|16|32|64|ptr|max)_t|s?size_t|ptrdiff_t|off_t|bool|FILE|va_list)$"))

; ---- imports -------------------------------------------------------------------------------

(preproc_include path: (_) @import.module) @import
