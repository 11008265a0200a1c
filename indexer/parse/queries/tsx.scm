; repoctx tags query for TSX: typescript.scm (included) plus the JSX component patterns.
; Where two patterns capture the same node the earlier pattern wins.

; @include typescript.scm

; ---- JSX -----------------------------------------------------------------------------------

; JSX components (lower-case tags are HTML elements)
((jsx_opening_element name: (identifier) @name) @reference.call
  (#match? @name "^[A-Z]"))
((jsx_self_closing_element name: (identifier) @name) @reference.call
  (#match? @name "^[A-Z]"))
(jsx_opening_element
  name: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.call
(jsx_self_closing_element
  name: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.call
