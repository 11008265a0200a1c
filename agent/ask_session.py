"""Follow-up questions in one `ask` session, asked so that a local server reuses its cache.

A session (`repoctx ask --session NAME`) keeps the conversation in
``<index_dir>/ask/NAME.json``: the messages of the last request and the answer to it, the
context items they showed, and one record per question with its token figures. A follow-up's
request *starts with those messages byte for byte* (system prompt, first context, Q1, A1, …)
and appends one user message: only the context items of the new question's pack that were not
shown already, then the question. llama.cpp (and llama-cpp-python's server) keep the last
prompt's tokens and reuse the longest common prefix, so the server processes only the new
message instead of the whole context again (recorded with Qwen2.5-Coder-1.5B: the server
reused all 780 tokens of the first request and its answer, and processed only the follow-up's
456 new tokens; tests/recordings/*-ask-session.json). A block whose lines were partly shown
already (a class after its methods) is cut to the lines still missing.

What the server reused is its own figure where it reports one; else it is estimated as the
tokens the request shares with the session's last request and answer — what a server that
served that request last reuses. A shared server that ran another client's request in between
holds that one instead (llama-cpp-python keeps one prompt), and reuses little.

The prompt of a session grows with each question. When the next one would pass the session's
limit (the context budget plus :data:`PROMPT_ALLOWANCE` for instructions, questions and
answers), the tail starts afresh: the system prompt (still a reused prefix), a new full context
and the question, and the answer says so. In a session the first context takes
:data:`FIRST_SHARE` of the budget, so follow-ups have room for what they need.

The file is written atomically through :class:`agent.safe_fs.Beneath` (no link followed, from
the index directory's parent). The index directory is untrusted on read (a clone can ship one):
the file is read regular-only and size-capped, and every field is checked before it is used;
one that fails is an :class:`AskSessionError` naming the file to delete. A planted session can
at most put text before the question, as a planted repository file can; every citation of the
answer is still checked against the files on disk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from indexer import place, plain_relative
from retrieval.context import FULL, SKELETON, SKELETON_HEADER, ContextItem, ContextPack

from .errors import AgentError, PathNotFoundError
from .models import Message, PromptCounter
from .safe_fs import Beneath

SESSIONS_DIR = "ask"
SESSION_FORMAT = 1
#: Tokens a follow-up's prompt may hold beyond the context budget: the instructions, the
#: questions and the answers so far (the CLI asks the server for a window of budget + answer +
#: this much).
PROMPT_ALLOWANCE = 1024
#: Share of the context budget the first question of a session (or a fresh tail) takes.
FIRST_SHARE = 0.6
#: A follow-up that cannot show this many tokens of new context starts afresh instead.
MIN_NEW_CONTEXT = 200
#: Larger session files are refused (a session of many questions stays far below this).
MAX_SESSION_BYTES = 8 << 20
MAX_MESSAGES = 401
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: The line number a numbered context line starts with (PackPolicy.line_numbers).
_NUMBERED = re.compile(r"^\s*\d+\| ?")
_ROLES = ("system", "user", "assistant")
FOLLOW_UP_HEADER = (
    "More repository context for the next question (blocks shown earlier are not repeated):"
)


class AskSessionError(AgentError):
    """The ask session cannot be used — delete its file or pick another --session name."""


@dataclass(frozen=True, slots=True)
class ShownItem:
    """A context item a session's prompt holds."""

    path: str
    start_line: int
    end_line: int
    kind: str
    symbol: str = ""

    def covers(self, item: ContextItem) -> bool:
        """Whether ``item`` shows nothing this one did not: the same lines, in full, or as the
        same signature."""
        return (
            self.path == item.path
            and self.start_line <= item.start_line
            and item.end_line <= self.end_line
            and (self.kind == FULL or item.kind == self.kind)
        )


@dataclass(frozen=True, slots=True)
class Turn:
    """One question of a session and its figures. ``usage_source``: "reported" by the server
    or "counted" by repoctx (the server sent none); ``cache_source`` as in
    :class:`agent.models.Usage`."""

    question: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_source: str
    usage_source: str
    #: This question's prompt did not extend the previous one (the first, or a fresh tail).
    started_afresh: bool
    new_items: int
    #: New context items that did not fit the session's limit.
    left_out: int = 0


@dataclass(frozen=True)
class AskSession:
    name: str
    model: str = ""
    #: The last request's messages and the answer to it: what the next request starts with.
    messages: tuple[Message, ...] = ()
    shown: tuple[ShownItem, ...] = ()
    #: Past commits already shown (their shas).
    commits: tuple[str, ...] = ()
    turns: tuple[Turn, ...] = ()
    updated: str = ""

    @property
    def is_new(self) -> bool:
        return not self.messages

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SESSION_FORMAT,
            "name": self.name,
            "model": self.model,
            "updated": self.updated,
            "messages": [{"role": m.role, "content": m.content} for m in self.messages],
            "shown": [asdict(s) for s in self.shown],
            "commits": list(self.commits),
            "turns": [asdict(t) for t in self.turns],
        }


@dataclass(frozen=True)
class FollowUp:
    """A follow-up request: ``messages`` start with the session's, byte for byte."""

    messages: list[Message]
    #: Items the request holds, the earlier ones and the new.
    shown: tuple[ShownItem, ...]
    new_items: tuple[ContextItem, ...]
    left_out: int
    #: Tokens of the messages shared with the previous request (and its answer).
    prefix_tokens: int
    commits: tuple[str, ...] = field(default=())


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name or ""):
        raise AskSessionError(
            f"Invalid session name {name!r} — use a letter or digit, then letters, digits, "
            "'_', '.' or '-' (at most 64)."
        )
    return name


def session_path(index_dir: Path, name: str) -> Path:
    return Path(index_dir) / SESSIONS_DIR / f"{check_name(name)}.json"


def _rel(index_dir: Path, name: str) -> tuple[Path, str]:
    index_dir = Path(index_dir)
    return index_dir.parent, f"{index_dir.name}/{SESSIONS_DIR}/{check_name(name)}.json"


def load_session(index_dir: Path, name: str) -> AskSession:
    """The session ``name`` as saved, or a new one. Read with no link followed, regular files
    only, at most MAX_SESSION_BYTES, every field checked (the index directory is untrusted)."""
    base, rel = _rel(index_dir, name)
    where = session_path(index_dir, name)
    try:
        with Beneath(base) as b:
            raw = b.read_bytes(rel, limit=MAX_SESSION_BYTES)
    except (FileNotFoundError, PathNotFoundError):
        return AskSession(name)
    except (AgentError, OSError) as exc:
        raise AskSessionError(
            f"Cannot read the ask session {where} ({exc}) — delete it (`rm {where}`) or pick "
            "another --session name."
        ) from exc
    if len(raw) > MAX_SESSION_BYTES:
        raise AskSessionError(
            f"The ask session {where} is over {MAX_SESSION_BYTES >> 20} MiB — delete it or "
            "pick another --session name."
        )
    try:
        return _parse(json.loads(raw.decode("utf-8")), name)
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise AskSessionError(
            f"{where} is not a valid ask session ({exc}) — delete it (`rm {where}`) or pick "
            "another --session name."
        ) from exc


def save_session(index_dir: Path, session: AskSession) -> Path:
    """Write ``session`` atomically (a temporary file renamed over the old one)."""
    base, rel = _rel(index_dir, session.name)
    data = json.dumps(session.to_dict(), indent=1, ensure_ascii=False).encode("utf-8")
    with Beneath(base) as b:
        b.write(rel, data, mode=0o600)
    return session_path(index_dir, session.name)


def _parse(data: Any, name: str) -> AskSession:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(what)

    need(isinstance(data, dict), "not a JSON object")
    need(data.get("format") == SESSION_FORMAT, f"format {data.get('format')!r}, not 1")
    need(data.get("name") == name, f"it names the session {data.get('name')!r}")
    raw_messages = data.get("messages")
    need(isinstance(raw_messages, list) and len(raw_messages) <= MAX_MESSAGES, "bad messages")
    messages = []
    for i, m in enumerate(raw_messages):
        need(isinstance(m, dict) and isinstance(m.get("content"), str), f"message {i}")
        # system, then questions and answers in turn, ending with an answer
        want = "system" if i == 0 else ("user" if i % 2 else "assistant")
        need(m.get("role") == want, f"message {i} is {m.get('role')!r}, not {want}")
        messages.append(Message(want, m["content"]))
    need(len(messages) != 1 and len(messages) % 2 == 1 or not messages, "no answer at the end")
    shown = []
    for s in _list(data.get("shown"), "shown"):
        need(isinstance(s, dict), "shown item")
        path, start, end, kind = (
            s.get("path"),
            s.get("start_line"),
            s.get("end_line"),
            s.get("kind"),
        )
        need(isinstance(path, str) and plain_relative(path), f"shown path {path!r}")
        need(_count(start) and _count(end) and start <= end, f"shown lines of {path}")
        need(kind in (FULL, SKELETON), f"shown kind {kind!r}")
        symbol = s.get("symbol", "")
        need(isinstance(symbol, str), "shown symbol")
        shown.append(ShownItem(path, start, end, kind, symbol))
    commits = _list(data.get("commits", []), "commits")
    need(all(isinstance(c, str) and re.fullmatch(r"[0-9a-f]{7,64}", c) for c in commits), "commits")
    turns = []
    for t in _list(data.get("turns"), "turns"):
        need(isinstance(t, dict), "turn")
        turn = Turn(**t)  # TypeError on a missing or unknown field
        need(isinstance(turn.question, str), "turn question")
        for f in ("prompt_tokens", "completion_tokens", "cached_tokens", "new_items", "left_out"):
            need(isinstance(getattr(turn, f), int) and getattr(turn, f) >= 0, f"turn {f}")
        need(turn.cache_source in ("server", "estimate", ""), "turn cache_source")
        need(turn.usage_source in ("reported", "counted", ""), "turn usage_source")
        need(isinstance(turn.started_afresh, bool), "turn started_afresh")
        turns.append(turn)
    model, updated = data.get("model", ""), data.get("updated", "")
    need(isinstance(model, str) and isinstance(updated, str), "model or updated")
    return AskSession(
        name, model, tuple(messages), tuple(shown), tuple(commits), tuple(turns), updated
    )


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list) or len(value) > 100_000:
        raise ValueError(f"bad {what}")
    return value


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def shown_already(shown: Sequence[ShownItem], item: ContextItem) -> bool:
    """Whether the prompt already shows all of ``item``: one shown item covers it, or its
    lines were all shown in full, by one item or several (a class after its methods)."""
    if any(s.covers(item) for s in shown):
        return True
    lines: set[int] = set()
    for s in shown:
        if s.kind == FULL and s.path == item.path:
            lines.update(range(s.start_line, s.end_line + 1))
    return all(n in lines for n in range(item.start_line, item.end_line + 1))


def unshown_parts(shown: Sequence[ShownItem], item: ContextItem) -> list[ContextItem]:
    """``item``, or where some of its lines were shown in full already (a class after its
    methods), blocks of the runs of lines still missing, headed like the pack's blocks. Blank
    lines count as shown (a run of them says nothing)."""
    seen = {
        n
        for s in shown
        if s.kind == FULL and s.path == item.path
        for n in range(s.start_line, s.end_line + 1)
    }
    lines = item.text.split("\n")
    body = lines[2:-1]
    head = place(item.path, item.start_line, item.end_line)
    if (
        item.kind != FULL
        or not seen.intersection(range(item.start_line, item.end_line + 1))
        or len(body) != item.end_line - item.start_line + 1
        or not lines[0].startswith(head)
    ):
        return [item]
    missing = [
        n
        for n, text in enumerate(body, item.start_line)
        if n not in seen and _NUMBERED.sub("", text, count=1).strip()
    ]
    parts = []
    for start, end in _runs(missing):
        code = body[start - item.start_line : end - item.start_line + 1]
        text = "\n".join(
            [place(item.path, start, end) + lines[0][len(head) :], lines[1], *code, lines[-1]]
        )
        parts.append(replace(item, start_line=start, end_line=end, text=text, tokens=0))
    return parts


def _runs(numbers: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n - 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def shown_items(items: Sequence[ContextItem]) -> tuple[ShownItem, ...]:
    return tuple(ShownItem(i.path, i.start_line, i.end_line, i.kind, i.symbol) for i in items)


def as_pack(pack: ContextPack, shown: Sequence[ShownItem]) -> ContextPack:
    """``pack`` with the items a session's prompt holds (for checking what the model was
    shown); their texts are in the messages, not needed here."""
    items = tuple(
        ContextItem(s.path, s.start_line, s.end_line, s.symbol, s.kind, "", 0, 0.0, ())
        for s in shown
    )
    return replace(pack, items=items)


def follow_up(
    session: AskSession,
    pack: ContextPack,
    question: str,
    tokens: PromptCounter,
    limit: int,
    commits_text: str = "",
    commits: Sequence[str] = (),
) -> FollowUp | None:
    """The request for ``question`` after ``session``: its messages, then one user message with
    the items of ``pack`` not shown yet and the question; the lowest-ranked new items are left
    out to keep the prompt within ``limit`` tokens. None when it cannot be done (the prompt
    would pass the limit, or the best new item does not fit): the caller starts afresh."""
    prefix = list(session.messages)
    prefix_tokens = sum(tokens.message_tokens(m) for m in prefix)
    new = [
        part
        for i in pack.items
        if not shown_already(session.shown, i)
        for part in unshown_parts(session.shown, i)
    ]
    fixed = tokens.prompt_tokens(
        [*prefix, Message.user(_follow_up_text([], commits_text, question))]
    )
    room = limit - fixed
    if room < 0:
        return None
    header = tokens.count(FOLLOW_UP_HEADER + "\n\n") if new else 0
    kept, used = [], header
    fulls_first = [i for i in new if i.kind == FULL] + [i for i in new if i.kind != FULL]
    for item in fulls_first:
        cost = tokens.count(item.text + "\n\n")
        if used + cost <= room:
            kept.append(item)
            used += cost
    best = fulls_first[0] if fulls_first else None
    if best is not None and best not in kept and (room < MIN_NEW_CONTEXT or best.kind == FULL):
        return None  # the item the question needs most does not fit: a fresh context instead
    kept = [i for i in new if i in kept]  # pack order
    text = _follow_up_text(kept, commits_text, question)
    return FollowUp(
        [*prefix, Message.user(text)],
        (*session.shown, *shown_items(kept)),
        tuple(kept),
        len(new) - len(kept),
        prefix_tokens,
        tuple(commits),
    )


def _follow_up_text(items: Sequence[ContextItem], commits_text: str, question: str) -> str:
    parts = []
    if items:
        fulls = [i.text for i in items if i.kind == FULL]
        skeletons = [i.text for i in items if i.kind != FULL]
        body = "\n\n".join(fulls)
        if skeletons:
            body += ("\n\n" if body else "") + SKELETON_HEADER + "\n" + "\n".join(skeletons)
        parts.append(f"{FOLLOW_UP_HEADER}\n\n{body}")
    if commits_text:
        parts.append(commits_text)
    parts.append(f"Question: {question}")
    return "\n\n".join(parts)


def record_turn(
    session: AskSession,
    model: str,
    messages: Sequence[Message],
    answer: str,
    shown: Sequence[ShownItem],
    commits: Sequence[str],
    turn: Turn,
) -> AskSession:
    """The session after ``turn``: the request's messages and its answer, what they show."""
    return AskSession(
        session.name,
        model,
        (*messages, Message.assistant(answer)),
        tuple(shown),
        tuple(dict.fromkeys(commits)),
        (*session.turns, turn),
        datetime.now(UTC).isoformat(timespec="seconds"),
    )
