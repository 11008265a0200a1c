"""`run_command`, `git_diff` and `finish`."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from typing import Any, cast

from indexer import RepoctxError

from ..command_policy import plan_command, refused_git_option
from ..errors import CommandNotAllowedError, InvalidCommandError, NotAFileError
from ..runner import CommandResult, ResourceLimits, run_command
from ..sandbox import SandboxMode, SandboxPolicy
from ..workspace import Workspace
from .core import Tool, ToolContext, ToolResult, fail, ok

#: git subcommands `run_command` allows unless `agent.git_write` is true: they only read.
GIT_READ_SUBCOMMANDS: frozenset[str] = frozenset(
    {
        "status",
        "diff",
        "log",
        "show",
        "blame",
        "grep",
        "ls-files",
        "ls-tree",
        "rev-parse",
        "shortlog",
        "describe",
        "cat-file",
        "merge-base",
        "rev-list",
        "whatchanged",
        "help",
        "version",
    }
)
#: A command is killed once it has printed this much (the output kept is capped far lower).
MAX_DRAIN_BYTES = 64 * 2**20
#: git options that run programs, change where git looks, or write files.
_GIT_GLOBAL_REFUSED = (
    "-c",
    "--exec-path",
    "--config-env",
    "-C",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
)
_GIT_WORDS = {"git"}
#: `git config` forms that only read.
_GIT_CONFIG_READS = {
    "--get",
    "--get-all",
    "--get-regexp",
    "--get-urlmatch",
    "--get-color",
    "--get-colorbool",
    "--list",
    "-l",
}
_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./~^@{}:-]*$")
_SECRET_SCAN = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)


def _words(command: str | list[str]) -> list[str]:
    if isinstance(command, list):
        return list(command)
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError as exc:
        raise InvalidCommandError(
            f"The command cannot be parsed ({exc}) — check the quoting."
        ) from exc


def _secret_argument(ws: Workspace, word: str) -> str | None:
    """The deny pattern a path-like argument hits, best effort: commands can still read secrets
    in ways no argument shows, which is why `execute` is a separate permission."""
    value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
    if not value or value.startswith("-"):
        return None
    candidates = {os.path.basename(value.rstrip("/"))}
    # Outside the workspace, or not a path: then only the name is checked.
    with contextlib.suppress(RepoctxError, ValueError):
        candidates.add(ws.relative(value))
    for cand in candidates:
        if cand and cand not in (".", "..") and ws.is_secret(cand):
            return value
    return None


def check_git(words: list[str], allow_write: bool) -> None:
    """Refuse git invocations that change the repository (unless allowed) or run programs."""
    for i, word in enumerate(words):
        if os.path.basename(word) not in _GIT_WORDS:
            continue
        j = i + 1
        while j < len(words) and words[j].startswith("-"):
            opt = words[j].split("=", 1)[0]
            if opt in _GIT_GLOBAL_REFUSED:
                raise CommandNotAllowedError(
                    f"git option `{opt}` is not allowed — it can run programs or leave the "
                    "workspace. Run git without it."
                )
            j += 1
        sub = words[j] if j < len(words) else ""
        if sub == "config" and not _GIT_CONFIG_READS & set(words[j + 1 :]):
            # git obeys its configuration later, outside any sandbox (core.fsmonitor, hooks,
            # filters ...): only the user changes it.
            raise CommandNotAllowedError(
                "`git config` may only read (--get, --list ...): the repository's configuration "
                "can make later git commands run programs. Ask the user to change it."
            )
        if sub and sub not in GIT_READ_SUBCOMMANDS and not allow_write:
            raise CommandNotAllowedError(
                f"`git {sub}` is not one of the read-only git subcommands (it may change the "
                "repository, or be an alias that runs a program) — only these are allowed "
                f"({', '.join(sorted(GIT_READ_SUBCOMMANDS))}). Set `agent.git_write = true` "
                "to allow it."
            )
        for arg in words[j + 1 :]:
            if arg in ";&|" or arg in ("&&", "||"):
                break
            refused = refused_git_option(arg)
            if refused is not None:
                raise CommandNotAllowedError(
                    f"git option `{refused}` is not allowed — it writes files or runs programs."
                )


def sandbox_policy(
    ctx: ToolContext,
    *,
    git_writable: bool = False,
    write: tuple[str, ...] = (),
    hide_secrets: bool = True,
) -> SandboxPolicy:
    """The sandbox of a command run on the agent's behalf, from the `[agent]` settings: the
    workspace writable, the index directory and `.git` read-only (``git_writable`` only for a
    git command the tool planned itself with `agent.git_write`), and the workspace's secret
    files hidden (``hide_secrets``; off for git commands whose output repoctx filters itself or
    that write: git would see hidden files as emptied, and commit them so)."""
    agent = ctx.agent
    return SandboxPolicy(
        workspace=ctx.workspace.root,
        mode=cast(SandboxMode, agent.sandbox),  # checked against SANDBOX_MODES by the config
        network=agent.network,
        read=agent.sandbox_read,
        write=(*agent.sandbox_write, *write),
        deny_read=agent.sandbox_deny_read,
        readonly=(str(ctx.config.index_path),),
        git_writable=git_writable,
        is_secret=ctx.workspace.is_secret if hide_secrets else None,
    )


def sandbox_data(res: CommandResult) -> dict[str, Any]:
    """What the sandbox did, for a tool result's data."""
    data: dict[str, Any] = {"sandbox": list(res.sandbox), "sandbox_note": res.sandbox_note}
    if res.sandbox_warning:
        data["sandbox_warning"] = res.sandbox_warning
    return data


def _git_subcommand(argv: tuple[str, ...]) -> str:
    rest = [a for a in argv[1:] if not a.startswith("-")]
    return rest[0] if rest else ""


def _render(res: CommandResult, shown: str) -> str:
    lines = [f"$ {shown}", f"exit code {res.exit_code} ({res.duration_s:.1f} s)"]
    if res.sandbox_warning:
        lines.append(f"[sandbox] {res.sandbox_warning}")
    if res.truncated:
        lines.append(
            f"[output truncated: {res.stdout_bytes} bytes stdout, {res.stderr_bytes} bytes "
            "stderr; the middle was dropped]"
        )
    if res.stdout:
        lines += ["--- stdout ---", res.stdout.rstrip("\n")]
    if res.stderr:
        lines += ["--- stderr ---", res.stderr.rstrip("\n")]
    return "\n".join(lines)


def _result_data(res: CommandResult) -> dict[str, Any]:
    return {
        "argv": list(res.argv),
        "exit_code": res.exit_code,
        "timed_out": res.timed_out,
        "killed": res.killed,
        "kill_reason": res.kill_reason,
        "truncated": res.truncated,
        "duration_s": round(res.duration_s, 3),
        "stdout_bytes": res.stdout_bytes,
        "stderr_bytes": res.stderr_bytes,
        **sandbox_data(res),
    }


def run_command_tool(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    command = args["command"]
    if isinstance(command, list) and not command:
        return fail("command is empty — pass a program and its arguments.")
    words = _words(command)
    for word in words[1:]:
        hit = _secret_argument(ctx.workspace, word)
        if hit is not None:
            return fail(
                f"`{hit}` is on the secrets deny list — commands may not name it. "
                "Leave secrets alone; see `agent.deny` to change the list.",
                refused=True,
            )
    check_git(words, ctx.agent.git_write)
    cwd = ctx.workspace.resolve(args["cwd"])
    if not cwd.is_dir():
        raise NotAFileError(f"cwd {args['cwd']} is not a directory of the workspace.")
    timeout = float(args.get("timeout_s") or ctx.agent.command_timeout_s)
    planned = plan_command(command, ctx.agent.allow_commands)
    # `.git` is writable only for a git program run directly (no shell), with agent.git_write,
    # for a subcommand that writes.
    git_writable = (
        ctx.agent.git_write
        and os.path.basename(planned[0]) in _GIT_WORDS
        and _git_subcommand(planned) not in GIT_READ_SUBCOMMANDS
    )
    res = run_command(
        command,
        cwd,
        timeout_s=timeout,
        max_output_bytes=ctx.agent.max_output_bytes,
        env_allow=ctx.agent.env_allow,
        allowlist=ctx.agent.allow_commands,
        limits=ResourceLimits(max_drain_bytes=MAX_DRAIN_BYTES),
        sandbox=sandbox_policy(ctx, git_writable=git_writable, hide_secrets=not git_writable),
    )
    shown = command if isinstance(command, str) else shlex.join(command)
    text = _render(res, shown)
    data = _result_data(res)
    if res.timed_out:
        return fail(
            f"The command did not finish within {timeout:g} s and was killed (with every "
            "process it started). Run something shorter, or raise timeout_s.",
            text,
            **data,
        )
    if res.killed:
        why = {
            "output_limit": f"it printed more than {MAX_DRAIN_BYTES} bytes",
            "process_limit": "it started too many processes",
        }.get(res.kill_reason or "", "")
        return fail(f"The command was killed: {why}.", text, **data)
    return ok(text, **data)


RUN_COMMAND = Tool(
    "run_command",
    "Run an allowlisted program in the repository (python, pytest, git read commands, ls, cat, "
    "grep, rg, ...), with a timeout and capped output. A string is split like a shell would; "
    "pipes and && work when every program is allowed. Non-zero exit codes are reported, "
    "not errors. It runs sandboxed: it can write only inside the repository (not .git) and in "
    "a private /tmp that is discarded when it ends, has no network, and cannot read secrets.",
    {
        "type": "object",
        "properties": {
            "command": {
                "type": ["string", "array"],
                "items": {"type": "string"},
                "minLength": 1,
                "maxLength": 8000,
                "description": "A command line, or an argv array.",
            },
            "cwd": {
                "type": "string",
                "default": ".",
                "description": "Directory inside the repository to run in.",
            },
            "timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    "execute",
    run_command_tool,
    lambda a: (
        "run `"
        + (a["command"] if isinstance(a["command"], str) else shlex.join(a["command"]))
        + "`"
    ),
)


# -- git_diff -------------------------------------------------------------------------------------


def _drop_secret_blocks(ws: Workspace, diff: str) -> tuple[str, list[str]]:
    blocks = re.split(r"(?m)^(?=diff --git )", diff)
    kept, dropped = [], []
    for block in blocks:
        m = _SECRET_SCAN.match(block)
        if m and (ws.is_secret(m.group(1)) or ws.is_secret(m.group(2))):
            dropped.append(m.group(2))
            continue
        kept.append(block)
    return "".join(kept), dropped


def git_diff(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    ws = ctx.workspace
    argv = ["git", "diff", "--no-ext-diff", "--no-textconv", "--no-color", f"-U{args['context']}"]
    if args["staged"]:
        argv.append("--cached")
    if args["stat"]:
        argv.append("--stat")
    ref = args.get("ref")
    if ref:
        if not _REF.match(ref):
            return fail(f"{ref!r} is not a revision — pass a commit, branch or tag name.")
        argv.append(ref)
    paths = [ws.relative(p) for p in args.get("paths") or ()]
    for p in paths:
        ws.check_readable(p)
    argv += ["--", *paths]
    # The diff's secret files are dropped below; hiding them would show them as emptied.
    policy = sandbox_policy(ctx, hide_secrets=False)
    res = run_command(
        argv,
        ws.root,
        timeout_s=60,
        max_output_bytes=ctx.agent.max_output_bytes,
        sandbox=policy,
    )
    if res.exit_code != 0:
        return fail(
            f"git diff failed (exit {res.exit_code}): {res.stderr.strip()[:500]} — is this a git "
            "repository, and does the revision exist?",
            exit_code=res.exit_code,
        )
    diff, dropped = _drop_secret_blocks(ws, res.stdout)
    untracked_res = run_command(
        ["git", "ls-files", "--others", "--exclude-standard", "--", *paths],
        ws.root,
        timeout_s=60,
        sandbox=policy,
    )
    untracked = (
        [p for p in untracked_res.stdout.splitlines() if p and not ws.is_secret(p)]
        if untracked_res.exit_code == 0
        else []
    )
    text = diff.rstrip("\n") or "No changes."
    if res.truncated:
        text += "\n[diff truncated; pass paths to see less at a time]"
    if dropped:
        text += f"\n[{len(dropped)} secret file(s) left out]"
    if untracked and not args["staged"]:
        text += "\nUntracked files (new, not in the diff): " + ", ".join(untracked[:50])
    return ok(
        text,
        diff=diff,
        untracked=untracked,
        truncated=res.truncated,
        secret_files_left_out=len(dropped),
        **sandbox_data(res),
    )


GIT_DIFF = Tool(
    "git_diff",
    "Show uncommitted changes (git diff against the index, or against `ref`), plus untracked "
    "files. Secret files are left out.",
    {
        "type": "object",
        "properties": {
            "paths": {"type": "array", "items": {"type": "string", "minLength": 1}},
            "ref": {"type": "string", "description": "Compare with this commit (e.g. HEAD)."},
            "staged": {"type": "boolean", "default": False},
            "stat": {"type": "boolean", "default": False},
            "context": {"type": "integer", "minimum": 0, "maximum": 50, "default": 3},
        },
        "additionalProperties": False,
    },
    "read",
    git_diff,
)


# -- finish ---------------------------------------------------------------------------------------


def finish(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return ok(args["summary"], finished=True, status=args["status"], summary=args["summary"])


FINISH = Tool(
    "finish",
    "End the task: say what was done (or why it could not be), for the user.",
    {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "minLength": 1, "maxLength": 20000},
            "status": {"type": "string", "enum": ["done", "blocked", "gave_up"], "default": "done"},
        },
        "required": ["summary"],
        "additionalProperties": False,
    },
    "read",
    finish,
)

COMMAND_TOOLS = (RUN_COMMAND, GIT_DIFF, FINISH)
