; repoctx tags query for Perl. Conventions: see python.scm. A `package` statement is a
; namespace definition; the subs after it are its siblings in the tree (the package lasts to the
; next one), so their qualnames are bare. Package paths are written `A::B`: the Perl hooks
; (lang_hooks.PERL, `path_sep`) read `A::B::f()` as a call of `f` on the receiver `A.B`, the
; module `use A::B` binds. `use X ...;` and `require X;` are imports of the module X (pragmas
; such as `strict` stay unresolved, as external modules do); `use parent`/`use base` name
; the classes a package inherits from.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(package_statement name: (package) @name) @definition.namespace
(subroutine_declaration_statement name: (bareword) @name) @definition.function
(method_declaration_statement name: (bareword) @name) @definition.method

; use constant NAME => value;  use constant { A => 1, B => 2 };
((use_statement
  module: (package) @_pragma
  (list_expression . (autoquoted_bareword) @name)) @definition.constant
  (#eq? @_pragma "constant"))

; ---- references ----------------------------------------------------------------------------

; f(...), A::B::f(...), f ... (no parentheses), &f(...)
(function_call_expression function: (function) @name) @reference.call
(ambiguous_function_call_expression function: (function) @name) @reference.call
; $obj->m(...), Class->new(...), A::B->m(...)
(method_call_expression invocant: (_) @receiver method: (method) @name) @reference.call

; use parent -norequire, 'Base';  use base qw(A B);
((use_statement
  module: (package) @_pragma
  [
    (string_literal (string_content) @name)
    (interpolated_string_literal (string_content) @name)
    (quoted_word_list (string_content) @name)
    (list_expression (string_literal (string_content) @name))
  ]) @reference.inherit
  (#any-of? @_pragma "parent" "base"))

; ---- imports -------------------------------------------------------------------------------

((use_statement module: (package) @import.module) @import
  (#not-match? @import.module "^(strict|warnings|utf8|constant|parent|base|lib|vars|feature|overload|integer|bytes|less|sort|subs|version|bignum|open|locale|diagnostics|autodie|if|mro|re|threads|v?[0-9][0-9._]*)$"))
(require_expression (bareword) @import.module) @import
