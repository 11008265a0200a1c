"""The git-history index: commits reachable from the indexed HEAD, the files each one touched
and the definitions it changed, in ``<index>/history.db`` (its own SQLite file: its life follows
commits, not files, so a full graph rebuild leaves it alone).

Only history reachable from HEAD at build time is indexed, so nothing from the future leaks
into a ranking. Builds are incremental: a HEAD that moved forward adds ``old..HEAD``; a HEAD
that moved elsewhere (an older commit, another branch, a rebase) removes the commits no longer
reachable and adds the missing ones; only commits that are not stored yet are read.

Each commit is read in three cheap passes of ``git log`` over the batch:

1. messages (subject, body, parents, author and commit time);
2. ``--raw -M``: the files touched, with status A/M/D/R/C/T (tree diffs only, no contents);
3. ``-p -U0`` for commits touching at most `PATCH_MAX_FILES` files: lines added and removed,
   and, for Python files, the definitions changed — from the hunk headers of git's own python
   funcname driver (given through ``-c core.attributesFile`` so no repository file changes)
   and from ``def``/``class`` lines added or removed.

Merges keep their message but not their diff (their changes are those of the commits they
merge). Huge commits (reformatting, vendoring) are stored with their file list but no patch;
the signals in `retrieval.history` do not let them vote.

Size: reading git in three passes, storing commits incrementally and mapping hunks to definitions
share the history.db schema; the ranking signal that reads it is retrieval/history.py.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from indexer.errors import RepoctxError
from indexer.models import Progress
from indexer.parse.terms import index_terms
from indexer.safety import gitsafe

DB_NAME = "history.db"
SCHEMA_VERSION = 2
#: Commits touching more files than this get no patch pass (reformatting, vendoring, releases).
PATCH_MAX_FILES = 100
#: Commits read per batch: one transaction, three git processes.
BATCH = 1000
#: Batches read at once (git computes their diffs in parallel).
READERS = 4
#: Files whose hunk headers git's python driver understands.
PY_SUFFIXES = (".py", ".pyi")

# Inherited from hooks or scripts these would make git describe another tree than the root.
_GIT_ENV_DROP = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                           "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"})
# Programs a repository's config could make git run while logging: none of them may run.
_GIT_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
             "-c", "log.showSignature=false", "-c", "core.quotePath=false",
             "-c", "diff.external=", "-c", "core.pager=cat")

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@ ?(.*)$")
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_]\w*)")
_ISSUE_REF = re.compile(r"(?<![\w&])#(\d{1,7})\b")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS commits(
    id INTEGER PRIMARY KEY,
    sha TEXT NOT NULL UNIQUE,
    parents INTEGER NOT NULL,
    author_time INTEGER NOT NULL,
    commit_time INTEGER NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    -- files touched (below the root); 0 for merges, whose diffs are skipped
    files INTEGER NOT NULL,
    -- 1 when the patch pass ran (lines and definitions recorded)
    patched INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS changes(
    commit_id INTEGER NOT NULL,
    path TEXT NOT NULL,          -- the path at that commit (the new path of a rename)
    old_path TEXT,               -- renames and copies
    status TEXT NOT NULL,        -- A M D R C T
    added INTEGER,               -- NULL: binary, or no patch pass (huge commit)
    removed INTEGER
);
CREATE INDEX IF NOT EXISTS commits_time ON commits(commit_time);
CREATE INDEX IF NOT EXISTS changes_commit ON changes(commit_id);
CREATE INDEX IF NOT EXISTS changes_renamed ON changes(old_path) WHERE status = 'R';
CREATE TABLE IF NOT EXISTS defs(
    commit_id INTEGER NOT NULL,
    path TEXT NOT NULL,
    name TEXT NOT NULL,
    parent TEXT NOT NULL,        -- the enclosing class when the hunk shows it, else ''
    how TEXT NOT NULL            -- changed (hunk header) | added | removed
);
CREATE INDEX IF NOT EXISTS defs_commit ON defs(commit_id);
CREATE VIRTUAL TABLE IF NOT EXISTS commits_fts USING fts5(
    subject, body, paths, tokenize = 'porter unicode61'
);
-- document frequency of each indexed term, refreshed after each update: queries pick their
-- rarest terms from it without scanning posting lists
CREATE TABLE IF NOT EXISTS vocab(term TEXT PRIMARY KEY, doc INTEGER NOT NULL) WITHOUT ROWID;
"""


class HistoryError(RepoctxError):
    """Reading the git history failed — run `repoctx index build` again; if it keeps failing,
    set `history = false` in .repoctx.toml and report the message."""


@dataclass(frozen=True, slots=True)
class HistoryStats:
    """What one history update did."""

    #: ``ok``, or why there is no history: ``disabled``, ``no_git`` (not a work tree, git
    #: missing), ``no_commits``, ``error`` (see ``note``).
    state: str
    #: ``unchanged``, ``forward`` (HEAD moved on), ``moved`` (HEAD moved elsewhere),
    #: ``sync`` (compared with the full commit list), ``full`` (nothing stored was usable).
    mode: str = ""
    head: str = ""
    added: int = 0
    removed: int = 0
    commits: int = 0
    seconds: float = 0.0
    note: str = ""


# --------------------------------------------------------------------------- git


def _git_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env["GIT_NO_LAZY_FETCH"] = "1"  # a partial clone must not reach the network for a blob
    # and every program the repository's own config names (filters, drivers, aliases, ...) off
    return gitsafe.git_env(root, base=env)


class _Git:
    """git in one work tree, with repository-configured programs neutralised."""

    def __init__(self, root: Path, attributes: str | None = None) -> None:
        self.root = str(root)
        self.extra = ("-c", f"core.attributesFile={attributes}") if attributes else ()

    @property
    def env(self) -> dict[str, str]:
        # Asked of git before every call, never kept: a configuration rewritten between two
        # calls is neutralised on the second (gitsafe's docstring).
        return _git_env(Path(self.root))

    def argv(self, args: Iterable[str]) -> list[str]:
        return ["git", *_GIT_SAFE, *self.extra, *args]

    def run(self, *args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(args), cwd=self.root, input=stdin, capture_output=True,
                              env=self.env, check=False)
        if check and proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip()
            raise HistoryError(f"git {' '.join(args[:3])} failed in {self.root}: {err} — "
                               "run `repoctx index build` again; set `history = false` to skip history.")
        return proc

    def lines(self, *args: str) -> list[str]:
        return self.run(*args).stdout.decode("utf-8", "replace").split()

    def head(self) -> tuple[bool, str | None]:
        """(inside a work tree, the commit HEAD names): one git call.
        (False, None) without git or outside a work tree; (True, None) before the first commit."""
        if gitsafe.find_git_dirs(self.root) is None:
            # No `.git` in root or above it: git would find no work tree (its repository
            # variables are dropped, see _git_env), so spare the ~3 ms of starting it.
            return False, None
        try:
            proc = self.run("rev-parse", "--is-inside-work-tree", "--verify", "-q", "HEAD^{commit}",
                            check=False)
        except OSError:  # git is not installed
            return False, None
        lines = proc.stdout.decode().split()
        if proc.returncode == 0 and len(lines) == 2 and lines[0] == "true":
            return True, lines[1]
        # git answers --is-inside-work-tree before it fails to verify HEAD (no commits yet:
        # "true", exit 1) and prints nothing outside a repository (exit 128), so no second
        # call is needed to tell those apart.
        return lines[:1] == ["true"], None

    def is_ancestor(self, a: str, b: str) -> bool:
        return self.run("merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    def has_commit(self, sha: str) -> bool:
        return self.run("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def merge_base(self, a: str, b: str) -> str | None:
        proc = self.run("merge-base", a, b, check=False)
        if proc.returncode != 0:
            return None
        return proc.stdout.decode().strip() or None


def _unquote(path: str) -> str:
    """A path as git prints it: C-quoted (``"a\\tb"``, octal UTF-8 bytes) when unusual."""
    if len(path) < 2 or path[0] != '"' or path[-1] != '"':
        return path
    body = path[1:-1].encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    simple = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12,
              ord("r"): 13, ord('"'): 34, ord("\\"): 92}
    while i < len(body):
        c = body[i]
        if c == 92 and i + 1 < len(body):
            nxt = body[i + 1]
            if 48 <= nxt <= 55 and i + 3 < len(body):
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            out.append(simple.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return out.decode("utf-8", "replace")


def _raw_path(text: str) -> str:
    """The path of a ``---``/``+++`` line (``a/x``, ``"b/x"``; a space in it adds a tab)."""
    text = text.rstrip("\n").rstrip("\t")
    text = _unquote(text)
    return text[2:] if text[:2] in ("a/", "b/") else text


# --------------------------------------------------------------------------- reading commits


@dataclass(slots=True)
class _Change:
    path: str
    old_path: str | None
    status: str
    added: int | None = None
    removed: int | None = None


@dataclass(slots=True)
class _Commit:
    sha: str
    parents: int
    author_time: int
    commit_time: int
    subject: str
    body: str
    changes: list[_Change]
    defs: set[tuple[str, str, str, str]]  # (path, name, parent, how)
    patched: bool = False


def _read_messages(git: _Git, shas: list[str]) -> dict[str, _Commit]:
    out = git.run("log", "--no-walk=unsorted", "--stdin", "-z", "--no-color",
                  "--format=%H%x00%P%x00%at%x00%ct%x00%s%x00%b",
                  stdin="\n".join(shas).encode() + b"\n").stdout.decode("utf-8", "replace")
    fields = out.split("\0")
    commits: dict[str, _Commit] = {}
    for i in range(0, len(fields) - 5, 6):
        sha, parents, at, ct, subject, body = fields[i : i + 6]
        sha = sha.strip()
        commits[sha] = _Commit(sha, len(parents.split()), int(at or 0), int(ct or 0), subject,
                               body.strip(), [], set())
    return commits


def _read_raw(git: _Git, shas: list[str], commits: dict[str, _Commit]) -> None:
    out = git.run("log", "--no-walk=unsorted", "--stdin", "--relative", "--raw", "-M",
                  "--no-color", "--no-ext-diff", "--no-textconv", "--format=%x01%H",
                  stdin="\n".join(shas).encode() + b"\n").stdout.decode("utf-8", "replace")
    cur: _Commit | None = None
    for line in out.split("\n"):
        if line.startswith("\x01"):
            cur = commits.get(line[1:].strip())
        elif line.startswith(":") and cur is not None and cur.parents <= 1:
            meta, _, rest = line.partition("\t")
            status = meta.split()[-1]
            paths = [_unquote(p) for p in rest.split("\t")]
            if status[0] in "RC" and len(paths) == 2:
                cur.changes.append(_Change(paths[1], paths[0], status[0]))
            else:
                cur.changes.append(_Change(paths[0], None, status[0]))


def _read_patches(git: _Git, shas: list[str], commits: dict[str, _Commit]) -> None:
    """Lines added/removed per file and the Python definitions each hunk changed.

    A ``-U0`` hunk holds exactly its removed lines, then its added lines (each side possibly
    followed by a ``\\ No newline`` marker), so the header's counts say where it ends: the
    lines of other files are skipped unread, and only Python hunks are looked at line by line."""
    args = ["log", "--no-walk=unsorted", "--stdin", "--relative", "-p", "-U0", "-M", "--no-color",
            "--no-ext-diff", "--no-textconv", "--format=%x01%H"]
    out = git.run(*args, stdin="\n".join(shas).encode() + b"\n").stdout
    lines = out.split(b"\n")
    n = len(lines)
    cur: _Commit | None = None
    by_path: dict[str, _Change] = {}
    change: _Change | None = None
    old_path = ""
    i = 0
    while i < n:
        line = lines[i]
        i += 1
        if line.startswith(b"@@ "):
            m = _HUNK.match(line.decode("utf-8", "replace"))
            if m is None:
                continue
            n_old = 1 if m.group(1) is None else int(m.group(1))
            n_new = 1 if m.group(2) is None else int(m.group(2))
            if change is not None:
                change.removed = (change.removed or 0) + n_old
                change.added = (change.added or 0) + n_new
            hunk = _Hunk(m.group(3)) if change is not None and change.path.endswith(PY_SUFFIXES) else None
            for side, count in (("removed", n_old), ("added", n_new)):
                if hunk is not None:
                    for body in lines[i : i + count]:
                        hunk.line(body[1:].decode("utf-8", "replace"), side)
                i += count
                while i < n and lines[i].startswith(b"\\"):
                    i += 1
            if hunk is not None and cur is not None and change is not None:
                cur.defs.update(hunk.defs(change.path))
        elif line.startswith(b"\x01"):
            cur = commits.get(line[1:].decode().strip())
            if cur is not None:
                cur.patched = True
                by_path = {ch.path: ch for ch in cur.changes}
            change = None
        elif line.startswith(b"diff --git "):
            change, old_path = None, ""
        elif line.startswith(b"--- "):
            old_path = _raw_path(line[4:].decode("utf-8", "replace"))
        elif line.startswith(b"+++ "):
            new = _raw_path(line[4:].decode("utf-8", "replace"))
            change = by_path.get(old_path if new == "/dev/null" else new)
            if change is not None:
                change.added = change.added or 0
                change.removed = change.removed or 0


class _Hunk:
    """The definitions one ``-U0`` hunk of a Python file changed.

    The header names the nearest ``def``/``class`` line above the hunk (git's python driver
    shows it without its indentation). Changed lines before the first ``def``/``class`` line of
    their side belong to it — unless all of them sit at column 0 (a module-level change after
    a function). ``def``/``class`` lines added or removed name definitions themselves; their
    enclosing class is known when the header or an earlier line of the hunk shows it."""

    __slots__ = ("kind", "name", "found", "header_used", "open_class")

    def __init__(self, header: str) -> None:
        m = _DEF.match(header)
        self.kind = m.group(2) if m else ""
        self.name = m.group(3) if m else ""
        self.found: set[tuple[str, str, str]] = set()
        self.header_used = False
        # per side: (indent, class name) of the innermost class line seen, or the header's class
        self.open_class: dict[str, tuple[int, str] | None] = {
            "added": (-1, self.name) if self.kind == "class" else None,
            "removed": (-1, self.name) if self.kind == "class" else None,
        }

    def line(self, text: str, side: str) -> None:
        m = _DEF.match(text)
        if m is None:
            stripped = text.strip()
            if not stripped or stripped.startswith(("@", "#")):
                return
            if self.name and text[:1] in (" ", "\t") and not self._seen_def(side):
                self.header_used = True
            return
        indent = len(m.group(1).expandtabs())
        kind, name = m.group(2), m.group(3)
        oc = self.open_class[side]
        parent = oc[1] if oc is not None and indent > 0 and indent > oc[0] else ""
        self.found.add((name, parent, side))
        if kind == "class":
            self.open_class[side] = (indent, name)

    def _seen_def(self, side: str) -> bool:
        return any(s == side for _, _, s in self.found)

    def defs(self, path: str) -> list[tuple[str, str, str, str]]:
        out = [(path, name, parent, how) for name, parent, how in self.found]
        if self.header_used:
            out.append((path, self.name, "", "changed"))
        return out


# --------------------------------------------------------------------------- the store


def history_path(index_dir: Path) -> Path:
    return Path(index_dir) / DB_NAME


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def open_history(index_dir: Path) -> sqlite3.Connection:
    """Open (creating it as needed) the history store for writing. A damaged file, or one of
    another schema version, is replaced: history is derived from git and is read again."""
    path = history_path(index_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _attempt in range(2):
        conn = None
        try:
            conn = _connect(path)
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = None
            if "meta" in tables:
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = row[0] if row else None
            if version == str(SCHEMA_VERSION):
                conn.execute("SELECT count(*) FROM commits").fetchone()
                with conn:  # indexes added within a schema version (all IF NOT EXISTS)
                    conn.executescript(_SCHEMA)
                return conn
            if tables:  # another schema version: read again
                conn.close()
                _remove(path)
                conn = _connect(path)
            with conn:
                conn.executescript(_SCHEMA)
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            return conn
        except sqlite3.DatabaseError:  # not a database, malformed: rebuilt from git
            if conn is not None:
                conn.close()
            _remove(path)
    raise HistoryError(f"Cannot create {path} — check that the index directory is writable.")


def _meta(conn: sqlite3.Connection, key: str, default: str = "") -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else default


def _set_meta(conn: sqlite3.Connection, **values: object) -> None:
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in values.items()])


def _says(conn: sqlite3.Connection, **values: str) -> bool:
    """Whether an empty store (no commits, no vocabulary) already holds these meta values: a
    tree outside git then costs no write (and no checkpoint) on every build."""
    marks = ",".join("?" * len(values))
    meta = dict(conn.execute(f"SELECT key, value FROM meta WHERE key IN ({marks})", list(values)))
    return (
        all(meta.get(k) == v for k, v in values.items())
        and conn.execute("SELECT NOT EXISTS(SELECT 1 FROM commits) AND NOT EXISTS(SELECT 1 FROM vocab)")
        .fetchone()[0] == 1
    )


def _fts_text(c: _Commit) -> tuple[str, str, str]:
    def terms(text: str) -> str:
        refs = " ".join(f"issue{n}" for n in _ISSUE_REF.findall(text))
        return index_terms(text) + (" " + refs if refs else "")

    small = len(c.changes) <= PATCH_MAX_FILES
    paths = " ".join(dict.fromkeys(ch.path for ch in c.changes)) if small else ""
    return terms(c.subject), terms(c.body), index_terms(paths.replace("/", " ").replace(".", " "))


def _insert(conn: sqlite3.Connection, commits: Iterable[_Commit]) -> int:
    n = 0
    for c in commits:
        cid = conn.execute(
            "INSERT INTO commits(sha, parents, author_time, commit_time, subject, body, files, patched) "
            "VALUES (?,?,?,?,?,?,?,?) RETURNING id",
            [c.sha, c.parents, c.author_time, c.commit_time, c.subject, c.body, len(c.changes),
             int(c.patched)],
        ).fetchone()[0]
        conn.executemany(
            "INSERT INTO changes VALUES (?,?,?,?,?,?)",
            [(cid, ch.path, ch.old_path, ch.status, ch.added, ch.removed) for ch in c.changes],
        )
        conn.executemany("INSERT INTO defs VALUES (?,?,?,?,?)", [(cid, *d) for d in sorted(c.defs)])
        conn.execute("INSERT INTO commits_fts(rowid, subject, body, paths) VALUES (?,?,?,?)",
                     [cid, *_fts_text(c)])
        n += 1
    return n


def _delete(conn: sqlite3.Connection, shas: list[str]) -> int:
    n = 0
    for i in range(0, len(shas), 500):
        part = shas[i : i + 500]
        marks = ",".join("?" * len(part))
        ids = [(r[0],) for r in conn.execute(f"SELECT id FROM commits WHERE sha IN ({marks})", part)]
        conn.executemany("DELETE FROM changes WHERE commit_id = ?", ids)
        conn.executemany("DELETE FROM defs WHERE commit_id = ?", ids)
        conn.executemany("DELETE FROM commits_fts WHERE rowid = ?", ids)
        conn.executemany("DELETE FROM commits WHERE id = ?", ids)
        n += len(ids)
    return n


def _stored(conn: sqlite3.Connection, shas: list[str]) -> set[str]:
    have: set[str] = set()
    for i in range(0, len(shas), 500):
        part = shas[i : i + 500]
        marks = ",".join("?" * len(part))
        have.update(r[0] for r in conn.execute(f"SELECT sha FROM commits WHERE sha IN ({marks})", part))
    return have


# --------------------------------------------------------------------------- update


def _plan(git: _Git, conn: sqlite3.Connection, head: str, old: str, cap: int) -> tuple[str, list[str], list[str]]:
    """(mode, commits to add, commits to remove) to go from the stored state to ``head``."""
    if old and cap <= 0 and git.has_commit(old):
        if git.is_ancestor(old, head):
            return "forward", git.lines("rev-list", head, f"^{old}"), []
        if git.merge_base(old, head):
            add = git.lines("rev-list", head, f"^{old}")
            gone = git.lines("rev-list", old, f"^{head}")
            return "moved", add, gone
    # Capped, interrupted (no recorded head), or nothing shared: compare the commit lists.
    wanted = git.lines("rev-list", *([f"--max-count={cap}"] if cap > 0 else []), head)
    have = {r[0] for r in conn.execute("SELECT sha FROM commits")}
    keep = set(wanted)
    mode = "sync" if have & keep else "full"
    return mode, [s for s in wanted if s not in have], [s for s in have if s not in keep]


def update_history(
    root: Path,
    index_dir: Path,
    *,
    max_commits: int = 0,
    progress: Callable[[Progress], None] | None = None,
) -> HistoryStats:
    """Bring ``<index_dir>/history.db`` to the history reachable from HEAD of ``root``.

    Outside a git work tree, without git or without commits the store is emptied and the
    state says why; that is not an error. The caller holds the index's write lock."""
    t0 = time.perf_counter()
    git = _Git(root)
    work_tree, head = git.head()
    conn = open_history(index_dir)
    try:
        if head is None:
            state = "no_commits" if work_tree else "no_git"
            note = ("no commits yet" if state == "no_commits"
                    else f"{root} is not in a git work tree (or git is not installed): no history")
            removed = 0
            if not _says(conn, head="", state=state, note=note):  # else nothing to write
                with conn:
                    removed = _delete(conn, [r[0] for r in conn.execute("SELECT sha FROM commits")])
                    conn.execute("DELETE FROM vocab")
                    _set_meta(conn, head="", state=state, note=note)
            return HistoryStats(state, "full", "", 0, removed, 0, time.perf_counter() - t0, note)
        old = _meta(conn, "head")
        old_cap = int(_meta(conn, "max_commits", "0") or 0)
        count = conn.execute("SELECT count(*) FROM commits").fetchone()[0]
        if old == head and old_cap == max_commits and _meta(conn, "state") == "ok":
            return HistoryStats("ok", "unchanged", head, 0, 0, count, time.perf_counter() - t0)
        if old_cap != max_commits:
            old = ""  # the window changed: compare the lists
        mode, add, gone = _plan(git, conn, head, old, max_commits)
        with conn:  # an interrupted update leaves no head: the next one compares lists
            _set_meta(conn, head="", state="updating")
            removed = _delete(conn, gone)
        have = _stored(conn, add)  # rows of an interrupted update
        add = [s for s in add if s not in have]
        added = 0
        import tempfile  # only to read new commits: ~5 ms of imports a no-op build skips

        with tempfile.TemporaryDirectory(prefix="repoctx-history-") as tmp:
            attrs = Path(tmp) / "attributes"
            attrs.write_text("".join(f"*{s} diff=python\n" for s in PY_SUFFIXES))
            git = _Git(root, str(attrs))
            for batch in _read_batches(git, [add[i : i + BATCH] for i in range(0, len(add), BATCH)]):
                with conn:
                    added += _insert(conn, batch)
                if progress:
                    progress(Progress("history", added, len(add)))
        with conn:
            _refresh_vocab(conn)
        count = conn.execute("SELECT count(*) FROM commits").fetchone()[0]
        stats = HistoryStats("ok", mode, head, added, removed, count, time.perf_counter() - t0)
        with conn:
            _set_meta(conn, head=head, max_commits=max_commits, state="ok", note="",
                      head_time=_head_time(conn, head), last_update=json.dumps(asdict(stats)))
        return stats
    finally:
        conn.close()


def _refresh_vocab(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.commits_vocab USING fts5vocab(main, commits_fts, 'row')")
    conn.execute("DELETE FROM vocab")
    conn.execute("INSERT INTO vocab SELECT term, doc FROM temp.commits_vocab")


def _head_time(conn: sqlite3.Connection, head: str) -> int:
    row = conn.execute("SELECT commit_time FROM commits WHERE sha = ?", [head]).fetchone()
    return row[0] if row else 0


def _read_batches(git: _Git, batches: list[list[str]]) -> Iterator[list[_Commit]]:
    """Batches read in order; with several, git computes the diffs of the next ones on other
    cores while this process parses and stores one (a few batches in flight, memory bounded)."""
    if len(batches) <= 1:
        yield from (_read_batch(git, b) for b in batches)
        return
    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, min(READERS, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = [pool.submit(_read_batch, git, b) for b in batches[:workers]]
        for nxt in batches[workers:]:
            done = pending.pop(0).result()
            pending.append(pool.submit(_read_batch, git, nxt))
            yield done
        for fut in pending:
            yield fut.result()


def _read_batch(git: _Git, shas: list[str]) -> list[_Commit]:
    commits = _read_messages(git, shas)
    _read_raw(git, shas, commits)
    small = [s for s in shas if s in commits and 0 < len(commits[s].changes) <= PATCH_MAX_FILES]
    if small:
        _read_patches(git, small, commits)
    missing = [s for s in shas if s not in commits]
    if missing:
        raise HistoryError(f"git log did not describe {len(missing)} commits (first {missing[0]}) — "
                           "run `repoctx index build` again; set `history = false` to skip history.")
    return [commits[s] for s in shas]


def disable_history(index_dir: Path) -> None:
    """``history = false``: remove the store so no stale history votes."""
    _remove(history_path(index_dir))


def record_error(index_dir: Path, message: str) -> None:
    """Say in the store's meta that the last update failed, and why (``index status`` shows it)."""
    conn = open_history(index_dir)
    try:
        with conn:
            _set_meta(conn, state="error", note=message)
    finally:
        conn.close()


def history_status(index_dir: Path) -> dict:
    """What ``index status`` says about history: state, head, commits, and a note."""
    path = history_path(index_dir)
    if not path.exists():
        return {"state": "none", "commits": 0, "head": "",
                "note": "no history index (history = false, or not built yet)"}
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        commits = conn.execute("SELECT count(*) FROM commits").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        return {"state": "damaged", "commits": 0, "head": "",
                "note": f"{exc} — the next `repoctx index build` rebuilds it"}
    finally:
        conn.close()
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        return {"state": "outdated", "commits": commits, "head": meta.get("head", ""),
                "note": f"schema {meta.get('schema_version')}, this repoctx reads {SCHEMA_VERSION} — "
                        "the next `repoctx index build` reads the history again"}
    return {"state": meta.get("state", ""), "commits": commits, "head": meta.get("head", ""),
            "note": meta.get("note", ""), "last_update": json.loads(meta.get("last_update", "{}"))}
