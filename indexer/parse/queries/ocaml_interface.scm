; repoctx tags query for OCaml interfaces (.mli). Conventions: see python.scm and ocaml.scm;
; the definitions and type references both share are in ocaml_common.scm (included): `val` declarations
; are functions, `type` types, `module M : sig ... end` namespaces, `module type` interfaces.
; Imports: `open M` captures @import with @import.module.

; @include ocaml_common.scm

; ---- references ----------------------------------------------------------------------------

(include_module_type (module_type_path (module_type_name) @name)) @reference.inherit

; ---- imports -------------------------------------------------------------------------------

(open_module_signature module: (extended_module_path) @import.module @import.alias) @import
(open_module module: (module_path) @import.module @import.alias) @import
