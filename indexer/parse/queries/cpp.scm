; repoctx tags query for C++: the C patterns (c.scm) adapted to the C++ grammar, plus classes,
; namespaces, templates, methods and inheritance. Conventions: see python.scm. Includes capture
; the directive as @import with @import.module; `using a::b;` imports b from a.
; Where two patterns capture the same node the earlier pattern wins. File-level things also sit
; in #if blocks and namespace/extern "C" bodies (declaration_list), hence the lists of parents.
; Out-of-class definitions `T::m() {...}` are named m (the parser does not join the scope).

; ---- definitions ---------------------------------------------------------------------------

; functions and methods, named through pointer/reference declarators
(function_definition
  declarator: [
    (function_declarator declarator: [
    (identifier) @name
    (field_identifier) @name
    (destructor_name) @name
    (operator_name) @name
    (qualified_identifier name: [(identifier) (destructor_name) (operator_name)] @name)
    (qualified_identifier name: (qualified_identifier name: [(identifier) (destructor_name) (operator_name)] @name))
  ])
    (pointer_declarator declarator: (function_declarator declarator: [
    (identifier) @name
    (field_identifier) @name
    (destructor_name) @name
    (operator_name) @name
    (qualified_identifier name: [(identifier) (destructor_name) (operator_name)] @name)
    (qualified_identifier name: (qualified_identifier name: [(identifier) (destructor_name) (operator_name)] @name))
  ]))
    (reference_declarator (function_declarator declarator: [
    (identifier) @name
    (field_identifier) @name
    (destructor_name) @name
    (operator_name) @name
    (qualified_identifier name: [(identifier) (destructor_name) (operator_name)] @name)
    (qualified_identifier name: (qualified_identifier name: [(identifier) (destructor_name) (operator_name)] @name))
  ]))
  ]) @definition.function

; method declarations inside a class body
(field_declaration_list
  (field_declaration
    declarator: [
      (function_declarator declarator: [(field_identifier) (operator_name)] @name)
      (pointer_declarator declarator: (function_declarator declarator: (field_identifier) @name))
      (reference_declarator (function_declarator declarator: (field_identifier) @name))
    ]) @definition.function)
(field_declaration_list
  (declaration
    declarator: (function_declarator declarator: [(identifier) (destructor_name)] @name)) @definition.function)

; prototypes at file level
(translation_unit
  (declaration
    declarator: [
      (function_declarator declarator: [(identifier) (qualified_identifier)] @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
      (reference_declarator (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_ifdef
  (declaration
    declarator: [
      (function_declarator declarator: [(identifier) (qualified_identifier)] @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
      (reference_declarator (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_if
  (declaration
    declarator: [
      (function_declarator declarator: [(identifier) (qualified_identifier)] @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
      (reference_declarator (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_else
  (declaration
    declarator: [
      (function_declarator declarator: [(identifier) (qualified_identifier)] @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
      (reference_declarator (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(preproc_elif
  (declaration
    declarator: [
      (function_declarator declarator: [(identifier) (qualified_identifier)] @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
      (reference_declarator (function_declarator declarator: (identifier) @name))
    ]) @definition.function)
(declaration_list
  (declaration
    declarator: [
      (function_declarator declarator: [(identifier) (qualified_identifier)] @name)
      (pointer_declarator declarator: (function_declarator declarator: (identifier) @name))
      (reference_declarator (function_declarator declarator: (identifier) @name))
    ]) @definition.function)

(namespace_definition name: [(namespace_identifier) (nested_namespace_specifier)] @name) @definition.namespace

; class/struct/union/enum with a body, named by their tag; inside a typedef they take the
; typedef's name instead (below)
(translation_unit
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_ifdef
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_if
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_else
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(preproc_elif
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(declaration_list
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(declaration
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(field_declaration
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])
(template_declaration
  [
    (class_specifier name: (type_identifier) @name body: (_)) @definition.class
    (struct_specifier name: (type_identifier) @name body: (_)) @definition.struct
    (union_specifier name: (type_identifier) @name body: (_)) @definition.union
    (enum_specifier name: (type_identifier) @name body: (_)) @definition.enum
  ])

(type_definition
  type: [(struct_specifier body: (_)) (class_specifier body: (_))]
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
(alias_declaration name: (type_identifier) @name) @definition.type

(enumerator_list (enumerator name: (identifier) @name) @definition.constant)
(field_declaration_list
  (field_declaration
    declarator: [
      (field_identifier) @name
      (pointer_declarator declarator: (field_identifier) @name)
      (reference_declarator (field_identifier) @name)
      (array_declarator declarator: (field_identifier) @name)
    ]) @definition.field)

(preproc_def name: (identifier) @name) @definition.macro
(preproc_function_def name: (identifier) @name) @definition.macro

; file- and namespace-level const/constexpr variables
; @include c_constants.scm
(declaration_list
  (declaration
    (type_qualifier)
    declarator: (init_declarator
      declarator: [
        (identifier) @name
        (pointer_declarator declarator: (identifier) @name)
        (array_declarator declarator: (identifier) @name)
      ])) @definition.constant)

; ---- references ----------------------------------------------------------------------------

; f(), obj.m(), p->m(), this->m(), ns::f(), T::m(), f<T>(), ns::f<T>()
(call_expression function: (identifier) @name) @reference.call
(call_expression
  function: (field_expression argument: (_) @receiver field: (field_identifier) @name)) @reference.call
(call_expression
  function: (qualified_identifier scope: (_) @receiver name: (identifier) @name)) @reference.call
(call_expression function: (template_function name: (identifier) @name)) @reference.call
(call_expression
  function: (qualified_identifier
    scope: (_) @receiver
    name: (template_function name: (identifier) @name))) @reference.call
(call_expression
  function: (field_expression
    argument: (_) @receiver
    field: (template_method name: (field_identifier) @name))) @reference.call

(new_expression type: (type_identifier) @name) @reference.call
(new_expression
  type: (qualified_identifier scope: (_) @receiver name: (type_identifier) @name)) @reference.call

; class D : public B, private ns::C, public T<U>
(base_class_clause [
  (type_identifier) @name
  (qualified_identifier scope: (_) @receiver name: (type_identifier) @name)
  (template_type name: (type_identifier) @name)
  (qualified_identifier scope: (_) @receiver name: (template_type name: (type_identifier) @name))
] @reference.inherit)

; every use of a type name; the qualified form first so its @receiver is kept
(qualified_identifier scope: (_) @receiver name: (type_identifier) @name) @reference.type
(qualified_identifier
  scope: (_) @receiver name: (template_type name: (type_identifier) @name)) @reference.type
((type_identifier) @name @reference.type
  (#not-match? @name "^(u?int(8|16|32|64|ptr|max)_t|s?size_t|ptrdiff_t|off_t|FILE|va_list)$"))

; ---- imports -------------------------------------------------------------------------------

(preproc_include path: (_) @import.module) @import
; using a::b;  (a using-directive `using namespace a;` binds no single name)
(using_declaration
  (qualified_identifier scope: (_) @import.module name: (identifier) @import.name)) @import
