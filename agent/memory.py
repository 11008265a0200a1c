"""Project memory: the instruction files a repository already has, and what runs learn about it
(test command, layout, conventions) kept in `<index_dir>/memory.json` for later runs."""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from indexer import check_index_dir, read_regular, write_atomic

from .errors import AgentError
from .models.base import ToolSpec
from .workspace import Workspace

MEMORY_FILE = "memory.json"
_FORMAT = 1
#: Read in this order; the first README test section is added after them.
INSTRUCTION_FILES = (
    "AGENTS.md",
    "CLAUDE.md",
    "CONTRIBUTING.md",
    "CONTRIBUTING",
    "CONTRIBUTING.rst",
    ".github/CONTRIBUTING.md",
)
READMES = ("README.md", "README.rst", "README")
#: Characters read from one instruction file (the prompt budget clips further).
MAX_FILE_CHARS = 20_000
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_TEST_HEADING = re.compile(r"\btest", re.I)

REMEMBER = ToolSpec(
    "remember",
    "Save a fact about this repository for later runs (test command, layout, conventions). "
    "Keys are short names such as test_command or style; a new value replaces the old one.",
    {
        "type": "object",
        "properties": {
            "key": {"type": "string", "minLength": 1, "maxLength": 64},
            "value": {"type": "string", "minLength": 1, "maxLength": 2000},
        },
        "required": ["key", "value"],
        "additionalProperties": False,
    },
)


class ProjectMemoryError(AgentError):
    """The project memory file cannot be used — fix or delete `<index_dir>/memory.json`."""


@dataclass(frozen=True)
class MemoryEntry:
    key: str
    value: str
    #: user | remember | run_tests | run_command
    source: str
    updated: str
    run_id: str = ""


class ProjectMemory:
    """Entries by key, persisted atomically on every change."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries: dict[str, MemoryEntry] = {}
        # The index directory can come with the clone (`.repoctx` → ~/dir, `memory.json` →
        # ~/secret.json): refuse a linked or special one as every index writer does, and read
        # the file regular-only with no link followed out of it.
        check_index_dir(self.path.parent)
        raw = read_regular(self.path.parent, self.path.name)
        if raw is not None:
            try:
                data = json.loads(raw.decode("utf-8"))
                self.entries = {
                    k: MemoryEntry(**{"key": k, **v}) for k, v in data.get("entries", {}).items()
                }
            except (OSError, ValueError, TypeError, AttributeError, RecursionError) as exc:
                raise ProjectMemoryError(
                    f"Cannot read {self.path} ({exc}) — fix the JSON or delete the file."
                ) from exc

    @classmethod
    def for_index(cls, index_dir: Path) -> ProjectMemory:
        return cls(Path(index_dir) / MEMORY_FILE)

    def set(self, key: str, value: str, source: str = "user", run_id: str = "") -> MemoryEntry:
        if not _KEY.match(key):
            raise ProjectMemoryError(
                f"Invalid memory key {key!r} — use a letter then letters, digits, '_', '.', '-'."
            )
        value = value.strip()
        if not value:
            raise ProjectMemoryError(f"Empty value for {key} — to remove it use --forget {key}.")
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        entry = MemoryEntry(key, value[:2000], source, stamp, run_id)
        self.entries[key] = entry
        self.save()
        return entry

    def forget(self, key: str) -> bool:
        if key not in self.entries:
            return False
        del self.entries[key]
        self.save()
        return True

    def render(self) -> str:
        return "\n".join(f"- {e.key}: {e.value}" for e in self.entries.values())

    def to_dict(self) -> dict[str, Any]:
        return {k: asdict(e) for k, e in self.entries.items()}

    def save(self) -> None:
        check_index_dir(self.path.parent)  # swapped for a link since it was read: write nothing
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "format": _FORMAT,
            "entries": {
                k: {f: v for f, v in asdict(e).items() if f != "key"}
                for k, e in self.entries.items()
            },
        }
        # Private to the user, as the file has always been made (mkstemp's 0o600).
        write_atomic(self.path, json.dumps(data, indent=1, ensure_ascii=False), mode=0o600)


# -- instruction files ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Instructions:
    text: str
    files: tuple[str, ...]


def read_instructions(root: Path) -> Instructions:
    """The repository's own guidance for contributors and agents, each file headed by its path."""
    parts: list[str] = []
    files: list[str] = []
    ws = Workspace(root)
    for name in INSTRUCTION_FILES:
        text = _read(ws, name)
        if text:
            parts.append(f"## {name}\n{text.strip()}")
            files.append(name)
    for name in READMES:
        text = _read(ws, name)
        if text:
            section = readme_test_section(text)
            if section:
                parts.append(f"## {name} (testing section)\n{section}")
                files.append(name)
            break
    return Instructions("\n\n".join(parts), tuple(files))


def _read(ws: Workspace, name: str) -> str:
    # Through the workspace: a link to a file outside it or to a deny-listed one (AGENTS.md ->
    # ~/.netrc) is refused, and a FIFO or a device never blocks the run.
    try:
        data = ws.read_bytes(name, MAX_FILE_CHARS * 4)
    except (OSError, AgentError):
        return ""
    return data.decode("utf-8", errors="replace")[:MAX_FILE_CHARS]


def readme_test_section(text: str) -> str:
    """The first Markdown section whose heading mentions tests, up to the next heading of the
    same or a higher level."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _HEADING.match(line)
        if not m or not _TEST_HEADING.search(m.group(2)):
            continue
        level = len(m.group(1))
        out = [line]
        for nxt in lines[i + 1 :]:
            h = _HEADING.match(nxt)
            if h and len(h.group(1)) <= level:
                break
            out.append(nxt)
        return "\n".join(out).strip()
    return ""


# -- learning from tool results ------------------------------------------------------------------


def learned_facts(
    name: str, args: dict[str, Any], data: dict[str, Any], root: Path
) -> dict[str, str]:
    """Facts worth keeping from one successful tool call."""
    if name == "run_tests" and data.get("passed") is True:
        runs = data.get("runs") or []
        full = [r for r in runs if r.get("scope") == "full"] or runs
        if not full:
            return {}
        argv = list(full[-1].get("argv") or ())
        cut = argv.index("-q") if "-q" in argv else len(argv)
        facts = {"test_command": _portable(argv[:cut], root)}
        ids = [t for r in runs for t in r.get("test_ids") or ()]
        dirs = sorted({t.split("::")[0].rsplit("/", 1)[0] for t in ids if "/" in t})
        total = sum(r.get("passed", 0) for r in full)
        if dirs or total:
            where = ", ".join(d + "/" for d in dirs[:5]) or "the repository"
            facts["tests"] = f"pytest; tests in {where}; {total} passing in the full suite"
        return facts
    if name == "run_command" and data.get("exit_code") == 0:
        argv = list(data.get("argv") or ())
        words = [os.path.basename(w) for w in argv[:3]]
        if words[:1] == ["pytest"] or words[1:3] == ["-m", "pytest"]:
            return {"test_command": _portable(argv, root)}
    return {}


def _portable(argv: list[str], root: Path) -> str:
    """The command without this machine's interpreter path (kept when it is the repo's venv)."""
    if argv and os.path.isabs(argv[0]):
        try:
            argv = [Path(argv[0]).relative_to(root).as_posix(), *argv[1:]]
        except ValueError:
            argv = [os.path.basename(argv[0]), *argv[1:]]
    return shlex.join(argv)
