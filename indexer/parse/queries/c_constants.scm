; repoctx tags query: file-level const-qualified variables, at the top of a C or C++ file and
; inside its preprocessor conditionals (an include guard wraps a whole header). Included by
; c.scm and cpp.scm (`; @include`).

(translation_unit
  (declaration
    (type_qualifier)
    declarator: (init_declarator
      declarator: [
        (identifier) @name
        (pointer_declarator declarator: (identifier) @name)
        (array_declarator declarator: (identifier) @name)
      ])) @definition.constant)
(preproc_ifdef
  (declaration
    (type_qualifier)
    declarator: (init_declarator
      declarator: [
        (identifier) @name
        (pointer_declarator declarator: (identifier) @name)
        (array_declarator declarator: (identifier) @name)
      ])) @definition.constant)
(preproc_if
  (declaration
    (type_qualifier)
    declarator: (init_declarator
      declarator: [
        (identifier) @name
        (pointer_declarator declarator: (identifier) @name)
        (array_declarator declarator: (identifier) @name)
      ])) @definition.constant)
(preproc_else
  (declaration
    (type_qualifier)
    declarator: (init_declarator
      declarator: [
        (identifier) @name
        (pointer_declarator declarator: (identifier) @name)
        (array_declarator declarator: (identifier) @name)
      ])) @definition.constant)
(preproc_elif
  (declaration
    (type_qualifier)
    declarator: (init_declarator
      declarator: [
        (identifier) @name
        (pointer_declarator declarator: (identifier) @name)
        (array_declarator declarator: (identifier) @name)
      ])) @definition.constant)
