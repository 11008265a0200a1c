"""Bash: tags query, hooks (shell builtins, `source` paths, `#` comments) and cross-file
resolution of a sourced library."""

from __future__ import annotations

import pytest

from indexer.parse.lang_hooks import BASH
from indexer.parse.parser import parse_source
from tests.lang_graph import graph_of, resolved
from tests.test_languages import FIXTURES, check_def, imports, parse, refs


@pytest.fixture(scope="module")
def pf():
    return parse("bash")


def test_definitions(pf) -> None:
    assert pf.doc == ""  # the first comment is the `#!` line, no documentation
    check_def(
        pf,
        "SCRIPT_DIR",
        "variable",
        7,
        'SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
    )
    check_def(
        pf,
        "DEPLOY_ROOT",
        "variable",
        12,
        'export DEPLOY_ROOT="/srv/shop"',
        "Where releases are unpacked on the host.",
    )
    check_def(
        pf, "KEEP_RELEASES", "constant", 15, "readonly KEEP_RELEASES=5", "How many releases to keep."
    )
    check_def(pf, "TARGETS", "variable", 17, "declare -a TARGETS=()")
    check_def(pf, "usage", "function", 20, "usage()", "Prints a usage line and exits.")
    check_def(
        pf,
        "check_env",
        "function",
        27,
        "function check_env",
        "Checks that the environment is one we deploy to.\nReturns 1 for an unknown environment.",
    )
    check_def(
        pf,
        "unpack_release",
        "function",
        36,
        "unpack_release()",
        "Unpacks the release archive into a fresh directory.",
    )
    check_def(pf, "activate", "function", 46, "function activate()", "Points the current symlink at a release.")
    check_def(pf, "main", "function", 69, "main()")
    # `local` variables inside functions are not definitions
    assert not [d for d in pf.definitions if d.name in ("env", "dest", "version", "count")]


def test_references(pf) -> None:
    assert refs(pf, "log_error", "call") == [(31, "", "check_env"), (77, "", "main")]
    assert refs(pf, "artifact_path", "call") == [(40, "", "unpack_release")]  # in $(...)
    assert refs(pf, "activate", "call") == [(66, "", "rollback"), (76, "", "main")]
    assert refs(pf, "usage", "call") == [(70, "", "main")]  # after ||
    assert refs(pf, "die", "call") == [(65, "", "rollback")]
    assert refs(pf, "main", "call") == [(84, "", "")]
    assert refs(pf, "tar", "call") == [(40, "", "unpack_release")]
    assert refs(pf, "DEPLOY_ROOT", "attribute")[:2] == [(38, "", "unpack_release"), (48, "", "activate")]
    assert refs(pf, "SCRIPT_DIR", "attribute") == [(8, "", "")]
    # `$1`, `$dest`: positional and lower-case (local) variables are not references
    assert not refs(pf, "dest", "attribute") and not refs(pf, "1", "attribute")
    # sourcing is an import, not a call
    assert not refs(pf, "source", "call") and not refs(pf, ".", "call")


def test_imports(pf) -> None:
    # `source` brings every function of the file into scope: a `*` import beside each
    assert imports(pf) == {
        ("./lib.sh", "", "lib.sh"), ("./config.sh", "", "config.sh"),
        ("./lib.sh", "*", "*"), ("./config.sh", "*", "*"),
    }
    assert [(r.name, r.line) for r in pf.references if r.kind == "import"] == [
        ("./lib.sh", 8),
        ("./config.sh", 9),
    ]


@pytest.mark.parametrize(
    ("text", "module"),
    [
        ("$SCRIPT_DIR/lib.sh", "./lib.sh"),
        ("${DIR}/lib/common.sh", "./lib/common.sh"),
        ("${BASH_SOURCE%/*}/lib.sh", "./lib.sh"),
        ('$(dirname "$0")/lib.sh', "./lib.sh"),
        ("lib/x.sh", "./lib/x.sh"),
        ("../shared/x.sh", "../shared/x.sh"),
        ("/etc/profile", "/etc/profile"),
        ("$CONFIG_FILE", "$CONFIG_FILE"),
    ],
)
def test_source_paths(text, module) -> None:
    assert BASH.import_module(text, "scripts/deploy.sh") == module


def test_syntax_error_keeps_definitions_around_it() -> None:
    src = "ok() { echo ok; }\nbroken() {\n  if then fi (\n}\nafter() { :; }\n"
    pf = parse_source("broken.sh", src.encode(), "bash", "broken")
    assert pf.has_errors
    names = [d.qualname for d in pf.definitions]
    assert "ok" in names and "after" in names, names


FILES = {
    "scripts/deploy.sh": (FIXTURES / "bash/deploy.sh").read_text(),
    "scripts/lib.sh": (FIXTURES / "bash/lib.sh").read_text(),
    "scripts/config.sh": 'SLACK_WEBHOOK="https://hooks.example.com/T000"\n',
    "tools/other/more.sh": "notify_slack() { :; }\n",
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    yield from graph_of(tmp_path_factory, "bash", FILES)


@pytest.mark.parametrize(
    ("line", "name", "kind", "target", "how"),
    [
        # source "$SCRIPT_DIR/lib.sh": the import reference resolves to the sourced file
        (8, "./lib.sh", "import", "scripts.lib", "import"),
        (9, "./config.sh", "import", "scripts.config", "import"),
        # A sourced file's functions are not bound by name (the parser has no wildcard
        # import for `source`), so calls resolve through the sourced file's directory:
        # same directory wins over a same-named function elsewhere.
        (31, "log_error", "call", "scripts.lib.log_error", "import"),
        (81, "notify_slack", "call", "scripts.lib.notify_slack", "import"),
        (72, "check_env", "call", "scripts.deploy.check_env", "scope"),
        (38, "DEPLOY_ROOT", "attribute", "scripts.deploy.DEPLOY_ROOT", "scope"),
        (21, "echo", "call", None, "builtin"),
    ],
)
def test_cross_file_resolution(graph, line, name, kind, target, how) -> None:
    assert resolved(graph, "scripts/deploy.sh", line, name, kind) == (target, how)
