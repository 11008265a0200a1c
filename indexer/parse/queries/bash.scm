; repoctx tags query for Bash (also used for .zsh). Conventions: see python.scm.
; Functions are definitions; so are the variables a script sets at its top level (a `readonly`
; or `declare -r` one is a constant). Running a command is a call reference (the shell's own
; commands resolve as builtins, see lang_hooks.BASH); `$UPPER_CASE` expansions are attribute
; references. `source FILE` / `. FILE` is an import of that file (@import.module; lang_hooks.BASH
; makes `"$DIR/lib.sh"` a path relative to the sourcing script).
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(function_definition name: (word) @name) @definition.function

; readonly X=1; declare -r X=1 (one definition per statement: the first variable it sets)
((program (declaration_command (variable_assignment name: (variable_name) @name)) @definition.constant)
  (#match? @definition.constant "^(readonly|(declare|typeset|local)\\s+(-[a-zA-Z]*\\s+)*-[a-zA-Z]*r)"))
(program (declaration_command (variable_assignment name: (variable_name) @name)) @definition.variable)
(program (variable_assignment name: (variable_name) @name) @definition.variable)

; ---- references ----------------------------------------------------------------------------

((command name: (command_name (word) @name)) @reference.call
  (#not-match? @name "^(source|\\.)$"))

((simple_expansion (variable_name) @name) @reference.attribute
  (#match? @name "^[A-Z_][A-Z0-9_]*$"))
((expansion (variable_name) @name) @reference.attribute
  (#match? @name "^[A-Z_][A-Z0-9_]*$"))

; ---- imports -------------------------------------------------------------------------------

((command
  name: (command_name (word) @_source)
  . argument: (_) @import.module) @import
  (#any-of? @_source "source" "."))
