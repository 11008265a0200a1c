; repoctx tags query for C#. Conventions: see python.scm. Namespaces are not definitions: one
; namespace spreads over many files, and classes nested under a per-file namespace symbol would
; be out of reach of cross-file lookups (as Java's `package`). `using A.B;` imports a namespace
; (@import.module, no name); `using C = A.B.C;` has the whole name as module, its last part as
; @import.name and C as alias, so a file at A/B/C.cs (folder = namespace) resolves it.
; Where two patterns capture the same node the earlier pattern wins.

; ---- definitions ---------------------------------------------------------------------------

(class_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
(struct_declaration name: (identifier) @name) @definition.struct
(interface_declaration name: (identifier) @name) @definition.interface
(enum_declaration name: (identifier) @name) @definition.enum
(delegate_declaration name: (identifier) @name) @definition.type

(method_declaration name: (identifier) @name) @definition.method
(constructor_declaration name: (identifier) @name) @definition.method
(destructor_declaration name: (identifier) @name) @definition.method
(local_function_statement name: (identifier) @name) @definition.function

(enum_member_declaration name: (identifier) @name) @definition.constant
; `const` fields are constants, other fields fields (one definition per declaration)
((field_declaration
  (modifier) @_const
  (variable_declaration (variable_declarator name: (identifier) @name))) @definition.constant
  (#eq? @_const "const"))
(field_declaration
  (variable_declaration (variable_declarator name: (identifier) @name))) @definition.field
(event_field_declaration
  (variable_declaration (variable_declarator name: (identifier) @name))) @definition.field
(property_declaration name: (identifier) @name) @definition.field
(event_declaration name: (identifier) @name) @definition.field

; ---- references ----------------------------------------------------------------------------

; f(), obj.M(), this.x.M(), F<T>(), obj.M<T>(), obj?.M()
(invocation_expression function: (identifier) @name) @reference.call
(invocation_expression function: (generic_name . (identifier) @name)) @reference.call
(invocation_expression
  function: (member_access_expression expression: _ @receiver name: (identifier) @name)) @reference.call
(invocation_expression
  function: (member_access_expression
    expression: _ @receiver name: (generic_name . (identifier) @name))) @reference.call
(invocation_expression
  function: (conditional_access_expression
    condition: (_) @receiver (member_binding_expression name: (identifier) @name))) @reference.call

; new T(), new T<U>(), new A.T()
(object_creation_expression type: (identifier) @name) @reference.call
(object_creation_expression type: (generic_name . (identifier) @name)) @reference.call
(object_creation_expression
  type: (qualified_name qualifier: (_) @receiver name: (identifier) @name)) @reference.call

; [Attribute]
(attribute name: (identifier) @name) @reference.call

; class C : Base, IFace, IComparable<C>, Ns.Other
(base_list [
  (identifier) @name
  (generic_name . (identifier) @name)
  (qualified_name qualifier: (_) @receiver name: (identifier) @name)
] @reference.inherit)

; types of parameters, variables, fields, properties, returns and type arguments
(parameter type: [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(variable_declaration type: [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(property_declaration type: [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(method_declaration returns: [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(delegate_declaration type: [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(nullable_type type: [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(array_type type: [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(type_argument_list [(identifier) @name (qualified_name qualifier: (_) @receiver name: (identifier) @name)]) @reference.type
(generic_name . (identifier) @name) @reference.type

; ---- imports -------------------------------------------------------------------------------

; using System;  using System.Linq;  using static System.Math;
(using_directive . [(identifier) (qualified_name)] @import.module .) @import
; using Pricing = Shop.Models.Pricing;
(using_directive
  name: (identifier) @import.alias
  (qualified_name name: (identifier) @import.name) @import.module) @import
