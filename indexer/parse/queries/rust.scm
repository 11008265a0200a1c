; repoctx tags query for Rust. Conventions: see python.scm. `impl T { ... }` is captured as
; @definition.impl named after the type, so methods get the qualname `T.method`; the trait of
; `impl Trait for T` is an inherit reference. Imports capture the use declaration as @import
; with @import.module (the path before the last `::`), @import.name and @import.alias.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(struct_item name: (type_identifier) @name) @definition.struct
(enum_item name: (type_identifier) @name) @definition.enum
(union_item name: (type_identifier) @name) @definition.union
(trait_item name: (type_identifier) @name) @definition.trait
(type_item name: (type_identifier) @name) @definition.type
(mod_item name: (identifier) @name) @definition.module
(macro_definition name: (identifier) @name) @definition.macro

(impl_item
  type: [
    (type_identifier) @name
    (generic_type type: (type_identifier) @name)
    (scoped_type_identifier name: (type_identifier) @name)
    (generic_type type: (scoped_type_identifier name: (type_identifier) @name))
  ]) @definition.impl

; functions; inside an impl or trait the parser makes them methods
(function_item name: (identifier) @name) @definition.function
(function_signature_item name: (identifier) @name) @definition.function

(const_item name: (identifier) @name) @definition.constant
(static_item name: (identifier) @name) @definition.constant
(enum_variant_list (enum_variant name: (identifier) @name) @definition.constant)
(field_declaration_list (field_declaration name: (field_identifier) @name) @definition.field)

; ---- references ----------------------------------------------------------------------------

; f(), obj.m(), path::f(), f::<T>(), obj.m::<T>()
(call_expression function: (identifier) @name) @reference.call
(call_expression
  function: (field_expression value: (_) @receiver field: (field_identifier) @name)) @reference.call
(call_expression
  function: (scoped_identifier path: (_) @receiver name: (identifier) @name)) @reference.call
(call_expression function: (generic_function function: (identifier) @name)) @reference.call
(call_expression
  function: (generic_function
    function: (field_expression value: (_) @receiver field: (field_identifier) @name))) @reference.call
(call_expression
  function: (generic_function
    function: (scoped_identifier path: (_) @receiver name: (identifier) @name))) @reference.call

(macro_invocation macro: (identifier) @name) @reference.call
(macro_invocation
  macro: (scoped_identifier path: (_) @receiver name: (identifier) @name)) @reference.call

; impl Trait for T; trait T: Super + Other
(impl_item
  trait: [
    (type_identifier) @name
    (generic_type type: (type_identifier) @name)
    (scoped_type_identifier path: (_) @receiver name: (type_identifier) @name)
    (generic_type type: (scoped_type_identifier path: (_) @receiver name: (type_identifier) @name))
  ]) @reference.inherit
(trait_item
  bounds: (trait_bounds [
    (type_identifier) @name
    (generic_type type: (type_identifier) @name)
    (scoped_type_identifier path: (_) @receiver name: (type_identifier) @name)
  ])) @reference.inherit

; every use of a type name; the qualified form first so its @receiver is kept
(scoped_type_identifier path: (_) @receiver name: (type_identifier) @name) @reference.type
((type_identifier) @name @reference.type
  (#not-eq? @name "Self"))

; ---- imports -------------------------------------------------------------------------------

; use foo;  use a::b::C;  use a::b::C as D;  use a::*;
(use_declaration argument: (identifier) @import.module) @import
(use_declaration
  argument: (scoped_identifier path: (_) @import.module name: (identifier) @import.name)) @import
(use_declaration
  argument: (use_as_clause
    path: (scoped_identifier path: (_) @import.module name: (identifier) @import.name)
    alias: (identifier) @import.alias)) @import
(use_declaration
  argument: (use_as_clause path: (identifier) @import.module alias: (identifier) @import.alias)) @import
(use_declaration argument: (use_wildcard (_) @import.module "*" @import.name)) @import
; use a::b::{C, D as E, self};  (nested groups inside the braces are not followed)
(use_declaration
  argument: (scoped_use_list
    path: (_) @import.module
    list: (use_list (identifier) @import.name))) @import
(use_declaration
  argument: (scoped_use_list
    path: (_) @import.module
    list: (use_list
      (use_as_clause path: (identifier) @import.name alias: (identifier) @import.alias)))) @import
(use_declaration
  argument: (scoped_use_list
    path: [
      (identifier) @import.module @import.alias
      (scoped_identifier name: (identifier) @import.alias) @import.module
    ]
    list: (use_list (self)))) @import
