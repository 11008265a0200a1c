; repoctx tags query for HCL (Terraform, Packer, Nomad...). A top-level block is a definition
; named by its labels: `variable "region"` -> region, `output "ip"`, `module "vpc"`,
; `provider "aws"`, and `resource "aws_instance" "web"` / `data "aws_ami" "ubuntu"` ->
; aws_instance.web / aws_ami.ubuntu (@qualifier prefixes the name with the type label); every
; attribute of a `locals` block is a variable. References name what they use, without a
; receiver — `var.region` -> region, `local.name` -> name, `module.vpc.id` -> vpc,
; `aws_instance.web.id` -> aws_instance.web, `data.aws_ami.ubuntu.id` -> aws_ami.ubuntu — so
; the resolver looks in the file, then the directory (a Terraform module is one directory),
; then the repository.

(block (identifier) @_kw . (string_lit (template_literal) @name) . (block_start)
  (#eq? @_kw "variable")) @definition.variable
(block (identifier) @_kw . (string_lit (template_literal) @name) . (block_start)
  (#eq? @_kw "output")) @definition.output
(block (identifier) @_kw . (string_lit (template_literal) @name) . (block_start)
  (#eq? @_kw "module")) @definition.module_call
(block (identifier) @_kw . (string_lit (template_literal) @name) . (block_start)
  (#eq? @_kw "provider")) @definition.provider
(block (identifier) @_kw . (string_lit (template_literal) @qualifier) .
  (string_lit (template_literal) @name) . (block_start)
  (#eq? @_kw "resource")) @definition.resource
(block (identifier) @_kw . (string_lit (template_literal) @qualifier) .
  (string_lit (template_literal) @name) . (block_start)
  (#eq? @_kw "data")) @definition.data
(block (identifier) @_kw (body (attribute (identifier) @name) @definition.variable)
  (#eq? @_kw "locals"))

; var.NAME, local.NAME, module.NAME
(expression (variable_expr (identifier) @_root) . (get_attr (identifier) @name)
  (#any-of? @_root "var" "local" "module")) @reference.attribute
; data.TYPE.NAME
(expression (variable_expr (identifier) @_root) . (get_attr (identifier) @qualifier) .
  (get_attr (identifier) @name)
  (#eq? @_root "data")) @reference.attribute
; TYPE.NAME of a resource (a root that is not one of Terraform's own namespaces)
(expression (variable_expr (identifier) @qualifier) . (get_attr (identifier) @name)
  (#not-match? @qualifier "^(var|local|module|data|path|terraform|count|each|self)$")) @reference.attribute
; function calls: file(...), merge(...)
(function_call (identifier) @name) @reference.call
