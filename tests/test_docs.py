"""The docs say only what is true of the command line: docs/cli.md is what `cli.docgen` prints,
every `repoctx …` command and option quoted in README.md and docs/*.md exists, and every
relative link points at a file (and heading) that exists. Click objects only: no subprocess,
no index."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import click
import pytest

from cli import docgen
from cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
README_MAX_LINES = 200

# -- the click tree --------------------------------------------------------------------------

#: ("index", "build") -> (its context, the command); () is the root group.
TREE: dict[tuple[str, ...], tuple[click.Context, click.Command]] = {
    tuple(ctx.command_path.split()[1:]): (ctx, cmd) for ctx, cmd in docgen.walk(cli)
}
_OPTION = re.compile(r"^--?[A-Za-z][\w-]*$")
_WORD = re.compile(r"^[a-z][a-z0-9_-]*$")
_END = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1", "--"}


def _options(path: tuple[str, ...]) -> dict[str, click.Option]:
    ctx, cmd = TREE[path]
    return {
        name: param
        for param in cmd.get_params(ctx)
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    }


def _name(path: tuple[str, ...]) -> str:
    return " ".join(("repoctx", *path))


def _option_names(token: str) -> list[str] | None:
    """The options a usage token names (`--json`, `[-q|--quiet]`, `--mode=lexical`), or None
    when it names none."""
    bare = token.strip("[](),").split("=", 1)[0]
    parts = [p for alt in bare.split("|") for p in (alt.split("/") if "/" in alt else [alt])]
    if not parts or not all(_OPTION.match(p) for p in parts):
        return None
    return parts


def command_problems(tokens: list[str]) -> list[str]:
    """What is wrong with one quoted command line (its tokens after `repoctx`): a subcommand
    that does not exist, an option the command does not take, a choice it does not offer.
    `[...]` optional syntax, `a|b` alternatives and CAPS placeholders are understood."""
    problems: list[str] = []
    path: tuple[str, ...] = ()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token in _END:
            break
        names = _option_names(token)
        if names is not None:
            known = _options(path)
            for name in names:
                if name not in known:
                    problems.append(f"`{_name(path)}` has no option `{name}`")
            option = known.get(names[0])
            if option is None or option.is_flag or option.count or "=" in token:
                continue
            if i < len(tokens) and isinstance(option.type, click.Choice):
                choices = {str(c) for c in option.type.choices}
                for value in tokens[i].strip("[](),").split("|"):
                    if _WORD.match(value) and value not in choices:
                        problems.append(
                            f"`{_name(path)} {name}` takes no value `{value}` "
                            f"(choices: {', '.join(sorted(choices))})"
                        )
            i += 1  # the option's value
            continue
        cmd = TREE[path][1]
        if not isinstance(cmd, click.Group):
            continue  # an argument of a command
        alternatives = token.strip("[](),").split("|")
        if not all(_WORD.match(a) for a in alternatives):
            break  # a placeholder (COMMAND), a URL, prose: nothing more to resolve
        missing = [a for a in alternatives if path + (a,) not in TREE]
        problems += [f"`{_name(path)}` has no command `{a}`" for a in missing]
        if missing or len(alternatives) > 1:
            break
        path += (alternatives[0],)
    return problems


# -- markdown ----------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def split_markdown(text: str) -> tuple[list[str], str]:
    """(the fenced code blocks, the prose with every block blanked out)."""
    blocks: list[str] = []
    prose: list[str] = []
    fence = ""
    body: list[str] = []
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                blocks.append("\n".join(body))
                fence, body = "", []
            else:
                body.append(line)
            prose.append("")
        elif m:
            fence = m.group(1)
            prose.append("")
        else:
            prose.append(line)
    if fence:
        blocks.append("\n".join(body))
    return blocks, "\n".join(prose)


def inline_code(prose: str) -> list[str]:
    """Inline code spans, paragraph by paragraph (a span may wrap a line, never a paragraph)."""
    return [
        m.group(2).replace("\n", " ")
        for para in re.split(r"\n\s*\n", prose)
        for m in _INLINE.finditer(para)
    ]


def _block_lines(block: str) -> list[str]:
    """A code block's command lines: `\\` continuations joined, and so are indented lines that
    go on with more `[--options]` (a usage line wrapped to fit)."""
    lines: list[str] = []
    for line in block.splitlines():
        stripped = line.strip()
        if lines and (
            lines[-1].endswith("\\")
            or (line[:1].isspace() and stripped[:1] in "[-" and "repoctx" in lines[-1])
        ):
            lines[-1] = lines[-1].rstrip("\\") + " " + stripped
        else:
            lines.append(line)
    return lines


def _tokens(line: str) -> list[str]:
    line = line.replace("`", " ")
    try:
        return shlex.split(line, comments=True)
    except ValueError:  # an apostrophe in prose: split on spaces, drop a comment
        return re.split(r"\s+#", line, maxsplit=1)[0].split()


def quoted_commands(snippet: str) -> list[list[str]]:
    """Every `repoctx …` command in a line of code, as the tokens after `repoctx`."""
    found = []
    tokens = _tokens(snippet)
    for i, token in enumerate(tokens):
        program = token.strip("()").rstrip(";")
        if program == "repoctx" or program.endswith("/bin/repoctx"):
            rest = [t.rstrip(";") for t in tokens[i + 1 :]]
            found.append(rest)
    return found


def doc_commands(text: str) -> list[list[str]]:
    blocks, prose = split_markdown(text)
    snippets = [line for block in blocks for line in _block_lines(block)] + inline_code(prose)
    return [cmd for s in snippets if "repoctx" in s for cmd in quoted_commands(s)]


def command_errors(text: str) -> list[str]:
    errors = []
    for tokens in doc_commands(text):
        errors += [f"{p} in `repoctx {' '.join(tokens)}`" for p in command_problems(tokens)]
    return errors


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in split_markdown(text)[1].splitlines():
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def link_errors(page: Path, text: str | None = None) -> list[str]:
    """Relative links of ``page`` whose file (or `#heading`) does not exist."""
    text = page.read_text(encoding="utf-8") if text is None else text
    prose = _INLINE.sub("code", split_markdown(text)[1])
    errors = []
    for target in _LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            errors.append(f"{target}: no file {os.path.relpath(dest, ROOT)}")
        elif anchor and dest.suffix == ".md":
            body = text if dest == page else dest.read_text(encoding="utf-8")
            if anchor not in anchors(body):
                errors.append(f"{target}: no heading #{anchor} in {dest.name}")
    return errors


# -- the tests ---------------------------------------------------------------------------------


def test_cli_reference_is_current():
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == docgen.render(), (
        "docs/cli.md is out of date — run `python -m cli.docgen > docs/cli.md`"
    )


def test_docgen_is_deterministic_and_covers_every_command():
    text = docgen.render()
    assert text == docgen.render()
    for path in TREE:
        assert f"## `{_name(path)}`\n" in text
    assert "Usage: repoctx index build [OPTIONS] [PATH]" in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_quoted_commands_exist(page):
    errors = command_errors(page.read_text(encoding="utf-8"))
    assert not errors, f"{page.name} quotes what the CLI does not have:\n" + "\n".join(errors)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    errors = link_errors(page)
    assert not errors, f"{page.name} has broken links:\n" + "\n".join(errors)


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    for cmd in ("make run", "make test"):
        assert cmd in readme
    unlinked = [p.name for p in DOCS if f"](docs/{p.name}" not in readme]
    assert not unlinked, f"README.md links no docs page {unlinked}"


def test_the_checker_finds_made_up_commands_and_options():
    def problems(line: str) -> list[str]:
        return [p for cmd in quoted_commands(line) for p in command_problems(cmd)]

    assert problems("repoctx index frobnicate .") == ["`repoctx index` has no command `frobnicate`"]
    assert problems("repoctx frobnicate") == ["`repoctx` has no command `frobnicate`"]
    assert problems("repoctx search QUERY --frobnicate") == [
        "`repoctx search` has no option `--frobnicate`"
    ]
    assert problems("repoctx index build [PATH] [--full] [-q|--noisy]") == [
        "`repoctx index build` has no option `--noisy`"
    ]
    assert problems("repoctx index status|verify|rebuild") == [
        "`repoctx index` has no command `rebuild`"
    ]
    assert problems("repoctx search Q [--mode hybrid|fuzzy]") == [
        "`repoctx search --mode` takes no value `fuzzy` (choices: hybrid, lexical, semantic)"
    ]
    # an option of another command is not an option of this one
    assert problems("repoctx symbol NAME --history") == [
        "`repoctx symbol` has no option `--history`"
    ]
    # what exists passes: optional syntax, alternatives, placeholders, values, comments
    for line in [
        "repoctx index build [PATH] [--full] [--jobs N] [--engine local|ray] [-q]  # comment",
        '$ repoctx context "the task" --budget 500 --focus PATH:10-40',
        "repoctx index status|verify|build|watch",
        "REPOCTX_JOBS=abc .venv/bin/repoctx index build --json",
        "claude mcp add repoctx -- repoctx serve --mcp /path/to/repo",
        "repoctx agent run --resume RUN --max-steps 50",
        "repoctx COMMAND --help",
    ]:
        assert problems(line) == [], line


def test_the_checker_reads_markdown_code_blocks_and_inline_code(tmp_path):
    page = tmp_path / "page.md"
    text = (
        "# Title\n\nRun `repoctx index verify --fix` and then\n`repoctx index\nfrobnicate`.\n\n"
        "```sh\nrepoctx search QUERY [--json]\n                 [--no-such-flag]\n```\n\n"
        "````console\n$ repoctx agent replay --list\n$ repoctx agent rewind last\n````\n\n"
        "See [the title](#title), [nothing](#nothing), [gone](gone.md) and [web](https://x.y/z).\n"
    )
    page.write_text(text)
    assert command_errors(text) == [
        "`repoctx search` has no option `--no-such-flag` in `repoctx search QUERY [--json] "
        "[--no-such-flag]`",
        "`repoctx agent` has no command `rewind` in `repoctx agent rewind last`",
        "`repoctx index verify` has no option `--fix` in `repoctx index verify --fix`",
        "`repoctx index` has no command `frobnicate` in `repoctx index frobnicate`",
    ]
    assert link_errors(page) == [
        "#nothing: no heading #nothing in page.md",
        f"gone.md: no file {os.path.relpath(tmp_path / 'gone.md', ROOT)}",
    ]
