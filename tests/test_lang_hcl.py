"""HCL (Terraform): the tags query on a fixture module, a broken file, and a real index build
where a module's files resolve each other's names (a Terraform module is one directory)."""

from __future__ import annotations

import pytest

from indexer.parse.languages import kind_of, language_for_path
from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("hcl")


def test_files_are_config() -> None:
    for path in ("infra/main.tf", "prod.tfvars", "packer/build.pkr.hcl"):
        assert language_for_path(path) == "hcl" and kind_of("hcl") == "config"


def test_definitions(pf) -> None:
    assert pf.doc == "Web tier of the shop: one instance behind the shared network."
    check_def(pf, "aws", "provider", 7, 'provider "aws"')
    # a resource or data source is named by its type and name: the name holds the dot
    ubuntu = next(d for d in pf.definitions if d.qualname == "aws_ami.ubuntu")
    assert (ubuntu.name, ubuntu.kind, ubuntu.span.start_line, ubuntu.signature, ubuntu.doc) == (
        "aws_ami.ubuntu", "data", 12, 'data "aws_ami" "ubuntu"',
        "Newest Ubuntu image for the instances.")
    check_def(pf, "name", "variable", 19, 'name = "shop-${var.environment}"',
              "Name prefix of every resource.")
    check_def(pf, "tags", "variable", 20, "tags = merge(var.extra_tags, { Service = local.name })")
    check_def(pf, "network", "module_call", 24, 'module "network"', "The network the instances live in.")
    assert [(d.name, d.kind, d.span.start_line, d.signature, d.doc) for d in pf.definitions
            if d.kind == "resource"] == [
        ("aws_instance.web", "resource", 31, 'resource "aws_instance" "web"', "One web server."),
        ("aws_eip.web", "resource", 43, 'resource "aws_eip" "web"', ""),
    ]
    check_def(pf, "web_ip", "output", 48, 'output "web_ip"', "Public address of the web server.")
    # the `terraform` block has no label, `lifecycle` is nested: neither is a definition
    assert [d.qualname for d in pf.definitions] == [
        "aws", "aws_ami.ubuntu", "name", "tags", "network", "aws_instance.web", "aws_eip.web",
        "web_ip"]
    web = next(d for d in pf.definitions if d.qualname == "aws_instance.web")
    assert (web.span.start_line, web.span.end_line) == (31, 41)


def test_references(pf) -> None:
    assert refs(pf, "region", "attribute") == [(8, "", "aws")]
    assert refs(pf, "aws_ami.ubuntu", "attribute") == [(32, "", "aws_instance.web")]
    assert refs(pf, "network", "attribute") == [(34, "", "aws_instance.web")]
    assert refs(pf, "aws_instance.web", "attribute") == [(44, "", "aws_eip.web")]
    assert refs(pf, "aws_eip.web", "attribute") == [(49, "", "web_ip")]
    assert refs(pf, "name", "attribute") == [(20, "", "tags"), (27, "", "network")]
    assert refs(pf, "file", "call") == [(35, "", "aws_instance.web")]
    # path.module, terraform, count... are Terraform's own: no reference
    assert not [r for r in pf.references if r.name in ("module", "path", "path.module")]


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = (
        'variable "ok" {\n  type = string\n}\n'
        'resource "aws_s3_bucket" "logs" {\n  bucket = = "x"\n}\n'
        'output "after" {\n  value = var.ok\n}\n'
    )
    pf = parse_source("broken.tf", src.encode(), "hcl", "broken")
    assert pf.has_errors
    names = [d.qualname for d in pf.definitions]
    assert "ok" in names and "after" in names


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "hcl", {
        "infra/web/main.tf": (FIXTURES / "hcl" / "main.tf").read_text(),
        "infra/web/variables.tf": (FIXTURES / "hcl" / "variables.tf").read_text(),
        # another module declares a `region` of its own: the directory decides
        "infra/dns/variables.tf": 'variable "region" {\n  type = string\n}\n',
        "infra/dns/main.tf": 'output "zone_region" {\n  value = var.region\n}\n',
        # a definition that shares a name with a Terraform function
        "tools/file.py": "def file(path):\n    return open(path)\n",
    })


WEB_VARS, WEB_MAIN = "infra.web.variables", "infra.web.main"


@pytest.mark.parametrize(("path", "line", "name", "target", "how"), [
    # var.region: the variables.tf beside it, not the other module's
    ("infra/web/main.tf", 8, "region", f"{WEB_VARS}.region", "package"),
    ("infra/web/main.tf", 19, "environment", f"{WEB_VARS}.environment", "package"),
    ("infra/web/main.tf", 20, "name", f"{WEB_MAIN}.name", "scope"),  # local.name, same file
    ("infra/web/main.tf", 32, "aws_ami.ubuntu", f"{WEB_MAIN}.aws_ami.ubuntu", "scope"),
    # two resources named web: the type tells them apart
    ("infra/web/main.tf", 44, "aws_instance.web", f"{WEB_MAIN}.aws_instance.web", "scope"),
    ("infra/web/main.tf", 49, "aws_eip.web", f"{WEB_MAIN}.aws_eip.web", "scope"),
    ("infra/web/main.tf", 34, "network", f"{WEB_MAIN}.network", "scope"),
    ("infra/dns/main.tf", 2, "region", "infra.dns.variables.region", "package"),
])
def test_cross_file_resolution(graph, path, line, name, target, how) -> None:
    assert resolved(graph, path, line, name, "attribute") == (target, how)


def test_terraform_functions_are_builtins(graph) -> None:
    assert resolved(graph, "infra/web/main.tf", 35, "file", "call") == (None, "builtin")
    assert resolved(graph, "infra/web/main.tf", 20, "merge", "call") == (None, "builtin")
