"""Which command runs and whether the allowlist allows it — decided before anything is spawned.

Commands given as a string are split like a shell would. A string that uses no shell syntax runs
directly; one with operators, redirections, expansions or globs runs under ``bash -c``, and then
every command word of every pipeline/list must be allowed. Command and process substitution
(``$(...)``, backticks, ``<(...)``) and ``for``/``case``/``select``/``function`` cannot be checked
word by word, so they are refused when an allowlist is given. Allowlisting an interpreter or a
wrapper (bash, python, env, xargs, sudo ...) allows everything it can run.

This is a policy on the agent's requests, not the security boundary: what a command can reach is
enforced by the kernel (`agent.sandbox`) and the process supervision of `agent.runner`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .errors import CommandNotAllowedError, InvalidCommandError

_OPERATORS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")", "\n")
_REDIRECTS = ("&>>", "<<<", "<<-", "&>", "<<", ">>", "<&", ">&", "<>", ">|", "<", ">")
_PREFIX_WORDS = {"!", "if", "then", "else", "elif", "while", "until", "do", "{", "time"}
_END_WORDS = {"fi", "done", "}", "esac"}
_UNCHECKABLE_WORDS = {"for", "case", "select", "function", "coproc"}
#: Shell builtins with no program of the same name on PATH: such strings need the shell.
_SHELL_BUILTINS = {
    ".",
    "alias",
    "cd",
    "declare",
    "eval",
    "exec",
    "exit",
    "export",
    "local",
    "popd",
    "pushd",
    "read",
    "return",
    "set",
    "shift",
    "source",
    "trap",
    "type",
    "ulimit",
    "umask",
    "unset",
    "wait",
}
#: `NAME=value` or `NAME+=value` (bash appends; to an unset variable that is plain assignment).
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
#: Variables a command may not set (`GIT_X=… git`, `env GIT_X=… git`, `export GIT_X=…`): they make git run a program or read a configuration the runner's
#: command-scope configuration does not outrank (see agent/sandbox_env.py), or make the loader or
#: a shell run code in an allowlisted program.
REFUSED_VARIABLES: tuple[str, ...] = ("GIT_*", "LD_*", "BASH_ENV", "ENV")
#: git options that run a program or write a file (long ones are refused in any abbreviation
#: git accepts); `-O` also attached (`-Ocmd`) or at the end of a cluster (`-nOcmd`).
GIT_REFUSED_OPTIONS: tuple[str, ...] = (
    "--output",
    "--open-files-in-pager",
    "--ext-diff",
    "--exec",
    "--upload-pack",
    "--receive-pack",
)
_GIT_REFUSED_SHORT = "O"
#: Programs and builtins whose `NAME=value` arguments become variables of what runs next.
_SETS_VARIABLES = {"env", "export", "declare", "typeset", "local", "readonly"}
#: Short git options whose argument may follow attached: the rest of the cluster is that argument.
_GIT_SHORT_WITH_ARGUMENT = "efABCmUS"


@dataclass(frozen=True)
class _Token:
    kind: Literal["word", "op", "redirect"]
    text: str
    #: False when the word holds an expansion, a glob or a substitution the shell would rewrite.
    literal: bool = True


@dataclass(frozen=True)
class _Parsed:
    tokens: tuple[_Token, ...]
    substitution: bool

    @property
    def needs_shell(self) -> bool:
        return self.substitution or any(t.kind != "word" or not t.literal for t in self.tokens)


def _tokenize(command: str) -> _Parsed:
    tokens: list[_Token] = []
    substitution = False
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c in " \t\r":
            i += 1
        elif command.startswith("\\\n", i):
            i += 2
        elif c == "#":
            while i < n and command[i] != "\n":
                i += 1
        elif redir := next((r for r in _REDIRECTS if command.startswith(r, i)), None):
            # Before operators, so `&>` is a redirection and not `&` then `>`.
            i += len(redir)
            if redir in ("<", ">") and command.startswith("(", i):
                substitution = True
            tokens.append(_Token("redirect", redir))
        elif op := next((o for o in _OPERATORS if command.startswith(o, i)), None):
            tokens.append(_Token("op", op))
            i += len(op)
        else:
            i, word, literal, subst = _word(command, i)
            substitution |= subst
            if word.isdigit() and command.startswith(("<", ">"), i) and literal:
                continue  # an fd number: `2>&1`; the redirect itself is the next token
            tokens.append(_Token("word", word, literal))
    return _Parsed(tuple(tokens), substitution)


def _word(s: str, i: int) -> tuple[int, str, bool, bool]:
    out: list[str] = []
    literal = True
    subst = False
    start = i
    while i < len(s):
        c = s[i]
        if c in " \t\r\n|&;()<>":
            break
        if c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise InvalidCommandError("Unterminated ' quote in the command — close the quote.")
            out.append(s[i + 1 : end])
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= len(s):
                    raise InvalidCommandError(
                        'Unterminated " quote in the command — close the quote.'
                    )
                d = s[i]
                if d == '"':
                    i += 1
                    break
                if d == "\\" and i + 1 < len(s) and s[i + 1] in '$`"\\\n':
                    out.append(s[i + 1])
                    i += 2
                    continue
                if d in "$`":
                    literal = False
                    subst |= d == "`" or s.startswith("$(", i)
                out.append(d)
                i += 1
        elif c == "\\":
            if i + 1 < len(s):
                out.append(s[i + 1])
            i += 2
        else:
            if c in "$`*?[{}" or (c == "~" and i == start):
                literal = False
                subst |= c == "`" or s.startswith("$(", i)
                if s.startswith("$(", i):
                    # Keep `$(` inside the word so the parenthesis is not read as a subshell.
                    out.append("$(")
                    i += 2
                    continue
            out.append(c)
            i += 1
    word = "".join(out)
    # A lone brace is the group keyword, not a brace expansion.
    return i, word, literal or word in ("{", "}"), subst


def _command_words(parsed: _Parsed) -> list[_Token]:
    """The first word of every simple command, skipping assignments, redirections and keywords."""
    words: list[_Token] = []
    expect_command = True
    skip_target = False
    for tok in parsed.tokens:
        if skip_target:
            skip_target = False
            continue
        if tok.kind == "redirect":
            skip_target = True
        elif tok.kind == "op":
            expect_command = tok.text != ")"
        elif expect_command and not _ASSIGNMENT.match(tok.text):
            if tok.literal and tok.text in _PREFIX_WORDS:
                continue
            if tok.literal and tok.text in _END_WORDS:
                expect_command = False
                continue
            if tok.literal and tok.text in _UNCHECKABLE_WORDS:
                raise CommandNotAllowedError(
                    f"`{tok.text}` commands cannot be checked against the allowlist — "
                    "run the commands one by one, or pass an argv list."
                )
            words.append(tok)
            expect_command = False
    return words


def _refuse(name: str, allowlist: tuple[str, ...]) -> CommandNotAllowedError:
    allowed = ", ".join(sorted(allowlist)) or "(empty)"
    return CommandNotAllowedError(
        f"`{name}` is not in the command allowlist ({allowed}) — add it to "
        "`agent.allow_commands` in your user-level config (~/.config/repoctx/config.toml) to permit it, or use an allowed command."
    )


def refused_git_option(word: str) -> str | None:
    """The refused git option ``word`` spells (see GIT_REFUSED_OPTIONS), or None."""
    if word.startswith("--"):
        name = word.split("=", 1)[0].rstrip("+")
        if len(name) > 3:
            for option in GIT_REFUSED_OPTIONS:
                if option.startswith(name):
                    return option  # git takes any unambiguous prefix of a long option
        return None
    if word.startswith("-") and len(word) > 1:
        for char in word[1:]:
            if char in _GIT_REFUSED_SHORT:
                return f"-{char}"
            if char in _GIT_SHORT_WITH_ARGUMENT or char.isdigit():
                return None
    return None


def _simple_commands(parsed: _Parsed) -> list[list[str]]:
    """The words of each simple command (redirections and their targets left out)."""
    commands: list[list[str]] = [[]]
    skip_target = False
    for tok in parsed.tokens:
        if skip_target:
            skip_target = False
        elif tok.kind == "redirect":
            skip_target = True
        elif tok.kind == "op":
            commands.append([])
        else:
            commands[-1].append(tok.text)
    return [c for c in commands if c]


def _check_variables(command: Sequence[str]) -> None:
    """Refuse a REFUSED_VARIABLES assignment where the shell or a program makes it a variable
    of what runs: before the command word (`GIT_X=… git`), or in the arguments of `env`,
    `export` and the like. Elsewhere it is only text (`grep -r LD_PRELOAD= .`)."""
    words = [w for w in command if w not in _PREFIX_WORDS]
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i]):
        i += 1
    assignments = words[:i]
    if i < len(words) and os.path.basename(words[i]) in _SETS_VARIABLES:
        assignments += [w for w in words[i + 1 :] if _ASSIGNMENT.match(w)]
    for word in assignments:
        name = word.split("=", 1)[0].rstrip("+")
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in REFUSED_VARIABLES):
            raise CommandNotAllowedError(
                f"Setting `{name}` is not allowed — it can make git, the loader or a shell run "
                "a program. Run the command without it."
            )


def plan_command(command: Sequence[str] | str, allowlist: Sequence[str] | None) -> tuple[str, ...]:
    """The argv that will be executed for ``command``, after checking it against ``allowlist``
    and REFUSED_VARIABLES.

    Names are compared by basename: allowing ``pytest`` allows ``.venv/bin/pytest``.
    """
    allowed = tuple(allowlist) if allowlist is not None else None
    if not isinstance(command, str):
        argv = tuple(command)
        if not argv or not argv[0]:
            raise InvalidCommandError()
        _check_variables(argv)
        if allowed is not None and os.path.basename(argv[0]) not in allowed:
            raise _refuse(argv[0], allowed)
        return argv
    if "\x00" in command:
        raise InvalidCommandError("The command contains a NUL byte — remove it.")
    parsed = _tokenize(command)
    for simple in _simple_commands(parsed):
        _check_variables(simple)
    words = _command_words(parsed)
    if not words:
        raise InvalidCommandError()
    if allowed is not None:
        if parsed.substitution:
            raise CommandNotAllowedError(
                "Command or process substitution ($(...), `...`, <(...)) cannot be checked against "
                "the allowlist — run the inner command separately, or pass an argv list."
            )
        for word in words:
            if not word.literal:
                raise CommandNotAllowedError(
                    f"The command name `{word.text}` is not literal — write the program name "
                    "itself so it can be checked against the allowlist."
                )
            if os.path.basename(word.text) not in allowed:
                raise _refuse(word.text, allowed)
    # A leading assignment or keyword (`FOO=1 make`, `! grep`) also needs the shell.
    if parsed.needs_shell or words[0] is not parsed.tokens[0] or words[0].text in _SHELL_BUILTINS:
        return (shutil.which("bash") or "/bin/sh", "-c", command)
    return tuple(t.text for t in parsed.tokens)
