"""`ask`: answer a question about the repository from a budgeted context, with verified
citations — or, without a model, the ranked locations themselves.

The model sees the context with line numbers and must cite ``path:line``; every citation in
its answer is checked against the files on disk (and against the context it was shown), so an
invented location is flagged, never passed on as fact.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from retrieval.context import FULL, ContextPack, PackPolicy, assemble_context
from retrieval.tokens import TokenCounter, get_tokenizer

from .models import ContextTooLongError, Message, ModelClient, PromptCounter, Usage
from .models import model_tokenizer as tokenizer_for
from .redact import redact_pack
from .workspace import Workspace

SYSTEM_PROMPT = """\
You answer questions about a code repository using only the context given with the question.
Every code line in the context starts with its line number. Support each statement about the
code with a citation `path:line` or `path:start-end` (e.g. `src/app/cli.py:42-57`), using the
exact paths and line numbers shown in the context. Never cite a file or line you were not shown.
If past commits are listed, you may also cite one as `commit <sha>` (its first 7+ characters)
when it explains the code. If the context does not answer the question, say so and name the
files or symbols you would look at next. Be concise."""

MODEL_HINT = (
    "No model configured: this is a retrieval-only answer. For a written answer pass "
    "--model openai:gpt-4o-mini (with OPENAI_API_KEY), --model anthropic:claude-sonnet-4-5 "
    "(with ANTHROPIC_API_KEY) or a local --model ollama:qwen2.5-coder, or set REPOCTX_MODEL "
    'or `model = "…"` in .repoctx.toml.'
)

_PATH = r"(?P<path>(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9_+]*)"
# path:12, path:12-30, path:L12-L30, path#L12-L30, path:12–30; paths need a dot or a slash.
_CITATION = re.compile(rf"(?<![\w/.-]){_PATH}(?:#L|:L?)(?P<start>\d+)(?:\s*[-–]\s*L?(?P<end>\d+))?")
# Prose: "`path` line 12", "path lines 12-30", "`pyjson/decoder.py` file at line 20-43",
# "`path` (lines 3 to 9)": a path, then within the same clause (no full stop, semicolon, new
# line or other backtick) the word line(s) and a number or range.
_PROSE_CITATION = re.compile(
    rf"(?<![\w/.-])(?P<tick>`?){_PATH}(?P=tick)(?P<gap>[^`\n.;]{{0,40}}?)"
    r"\b[Ll]ines?\s+L?(?P<start>\d+)(?:\s*(?:[-–]|to|through)\s*L?(?P<end>\d+))?\b"
)
# Bare words such as "e.g" or "v1.x" look like paths; in prose a path must be quoted, have a
# directory, or end in a common source or text extension.
_PROSE_EXTENSION = re.compile(
    r"pyi?|[cm]?[jt]sx?|go|rs|java|kts?|[ch]|cc|cpp|cxx|hpp|hh|cs|rb|php|swift|scala|mm?|"
    r"sh|bash|zsh|sql|md|rst|txt|toml|ya?ml|json|ini|cfg|html|s?css|vue|lua|pl|r|jl|exs?|erl|"
    r"hs|ml|clj|dart",
    re.I,
)
SNIPPET_LINES = 6
#: A retry after a context overflow needs at least this much code to be worth asking.
MIN_RETRY_CONTEXT = 200
#: Past commits shown with the context (similar to the question, from the history index).
MAX_COMMITS = 3
_COMMIT_REF = re.compile(r"\bcommit\s+`?([0-9a-f]{7,40})\b", re.I)


@dataclass(frozen=True, slots=True)
class Citation:
    """A location the answer cites. ``valid``: the file exists in the repository and has those
    lines; ``in_context``: the model was shown them. ``problem`` says what is wrong."""

    text: str
    path: str
    start_line: int
    end_line: int
    valid: bool
    in_context: bool
    problem: str = ""


@dataclass(frozen=True, slots=True)
class Location:
    """One ranked place of a retrieval-only answer."""

    path: str
    start_line: int
    end_line: int
    symbol: str
    kind: str
    score: float
    reasons: tuple[str, ...]
    snippet: str


@dataclass(frozen=True, slots=True)
class PastCommit:
    """A past commit similar to the question, shown with the context."""

    sha: str
    date: str
    subject: str
    files: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CommitCitation:
    """A ``commit <sha>`` the answer cites: ``valid`` when HEAD's history has it, ``shown``
    when it was one of the past commits given with the context."""

    text: str
    sha: str
    valid: bool
    shown: bool
    subject: str = ""


@dataclass(frozen=True)
class Answer:
    question: str
    answer: str  # the model's text; '' when no model was configured
    model: str  # '' when retrieval-only
    citations: tuple[Citation, ...]
    locations: tuple[Location, ...]
    pack: ContextPack
    hint: str = ""
    usage: Usage | None = None
    latency_s: float = 0.0
    #: Past commits similar to the question (empty without a history index).
    commits: tuple[PastCommit, ...] = ()
    commit_citations: tuple[CommitCitation, ...] = ()
    #: How the prompt was counted (PromptCounter.describe) and its estimated size.
    tokenizer: str = ""
    prompt_tokens_est: int = 0
    #: What happened on the way: a retry with a smaller context after an overflow.
    notes: tuple[str, ...] = ()

    @property
    def invalid_citations(self) -> tuple[Citation, ...]:
        return tuple(c for c in self.citations if not c.valid)

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "answer": self.answer,
            "model": self.model,
            "citations": [asdict(c) for c in self.citations],
            "invalid_citations": len(self.invalid_citations),
            "locations": [asdict(loc) for loc in self.locations],
            "hint": self.hint,
            "usage": asdict(self.usage) if self.usage else None,
            "commits": [asdict(c) for c in self.commits],
            "commit_citations": [asdict(c) for c in self.commit_citations],
            "latency_s": round(self.latency_s, 3),
            "prompt_tokens_est": self.prompt_tokens_est,
            "notes": list(self.notes),
            "context": {
                "budget": self.pack.budget,
                "used_tokens": self.pack.used_tokens,
                "tokenizer": self.tokenizer or self.pack.tokenizer,
                "items": len(self.pack.items),
                "timings": self.pack.timings,
            },
        }


def model_spec(
    flag: str | None, config_extra: Mapping[str, object], env: Mapping[str, str] | None = None
) -> str | None:
    """The model to use: the flag, then `model` in the project config, then REPOCTX_MODEL."""
    env = os.environ if env is None else env
    for value in (flag, config_extra.get("model"), env.get("REPOCTX_MODEL")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def ask(
    conn: sqlite3.Connection,
    root: str | Path,
    question: str,
    *,
    model: ModelClient | None = None,
    budget_tokens: int = 8000,
    focus: Sequence[str] = (),
    searcher=None,
    tokenizer=None,
    index_dir: str | Path | None = None,
    max_tokens: int = 1024,
    is_secret: Callable[[str], bool] | None = None,
    model_tokenizer: PromptCounter | None = None,
) -> Answer:
    """Answer ``question``: with ``model``, from the assembled context with checked
    citations; without, the ranked locations of that context and a hint to configure one.

    With a model the context is counted in the model's tokens (``model_tokenizer``, default:
    its family's tokenizer, else ``tokenizer``) and keeps that counter's safety margin free;
    when the server still says the prompt is too long, the context is assembled once more to
    fit the window it reported, and asked again.

    Files ``is_secret`` names (default: the agent's built-in deny list; pass
    ``Workspace.from_config(config).is_hidden`` to add `agent.deny`) are left out of the
    context, and tokens and keys in the rest are redacted, as in every tool result."""
    root = Path(root)
    policy = replace(PackPolicy(), line_numbers=model is not None)
    commits = past_commits(conn, root, question, index_dir)
    history_text = render_commits(commits)
    tokens = None
    if model is not None:
        tokens = model_tokenizer or tokenizer_for(model, fallback=tokenizer, probe=False)
        counter = tokens.counter
        budget_tokens = tokens.usable(budget_tokens)
    else:
        counter = tokenizer if isinstance(tokenizer, TokenCounter) else get_tokenizer(tokenizer)

    def build(budget: int) -> tuple[ContextPack, list[Message]]:
        if history_text:  # the commits come out of the same budget
            budget = max(1, budget - counter.count(history_text + "\n\n"))
        pack = assemble_context(
            conn,
            root,
            question,
            budget,
            focus=focus,
            searcher=searcher,
            tokenizer=counter,
            index_dir=index_dir,
            policy=policy,
        )
        # The pack goes into the model's prompt directly, not through the tools.
        pack = redact_pack(pack, is_secret or Workspace(root).is_hidden)
        context = pack.render() + (f"\n\n{history_text}" if history_text else "")
        messages = [
            Message.system(SYSTEM_PROMPT),
            Message.user(f"{context}\n\nQuestion: {question}"),
        ]
        return pack, messages

    pack, messages = build(budget_tokens)
    locations = tuple(_location(item) for item in pack.items)
    if model is None or tokens is None:
        return Answer(question, "", "", (), locations, pack, hint=MODEL_HINT, commits=commits)
    estimate = tokens.prompt_tokens(messages)
    notes: list[str] = []
    try:
        completion = model.complete(messages, max_tokens=max_tokens, temperature=0.0)
    except ContextTooLongError as exc:
        smaller = overflow_budget(
            exc, tokens, budget_tokens, estimate, pack.used_tokens, max_tokens
        )
        if smaller is None:
            raise
        notes.append(
            f"The prompt (~{estimate:,} tokens) was too long for the model"
            + (f" ({exc.context_window:,}-token context)" if exc.context_window else "")
            + f"; asked again with a {smaller:,}-token context instead of {budget_tokens:,}."
        )
        pack, messages = build(smaller)
        locations = tuple(_location(item) for item in pack.items)
        estimate = tokens.prompt_tokens(messages)
        completion = model.complete(messages, max_tokens=max_tokens, temperature=0.0)
    text = completion.message.content
    citations = verify_citations(text, root, pack)
    return Answer(
        question,
        text,
        model.name,
        citations,
        locations,
        pack,
        usage=completion.usage,
        latency_s=completion.latency_s,
        commits=commits,
        commit_citations=verify_commit_citations(text, root, index_dir, commits),
        tokenizer=tokens.describe(),
        prompt_tokens_est=estimate,
        notes=tuple(notes),
    )


def overflow_budget(
    exc: ContextTooLongError,
    tokens: PromptCounter,
    budget: int,
    estimate: int,
    code_tokens: int,
    max_tokens: int,
) -> int | None:
    """The context budget to ask again with after an overflow: what fits the window the server
    reported beside the rest of the prompt and the answer (scaled by how far the server's count
    was above ours), else 60 % of ``budget``; None when too little would be left."""
    smaller = int(budget * 0.6)
    if exc.context_window:
        over = exc.prompt_tokens / estimate if exc.prompt_tokens and estimate else 1.0
        room = int((exc.context_window - max_tokens) / max(1.0, over))
        rest = estimate - code_tokens  # system prompt, question, commits, template
        smaller = min(tokens.usable(room) - rest, int(budget * 0.9))
    return smaller if smaller >= MIN_RETRY_CONTEXT else None


def past_commits(
    conn: sqlite3.Connection, root: Path, question: str, index_dir: str | Path | None
) -> tuple[PastCommit, ...]:
    """Past commits whose messages resemble the question (the history signal's own search);
    none without a history index."""
    if index_dir is None:
        return ()
    from indexer.lexical import split_identifier
    from retrieval.history import similar_commits
    from retrieval.query import parse_query
    from retrieval.signals import SignalContext

    words = set(parse_query(question).terms)
    hits = similar_commits(SignalContext(conn, root, Path(index_dir)), question, MAX_COMMITS * 3)
    out = []
    for h in hits:
        subject = {p for w in re.findall(r"\w+", h.subject) for p in split_identifier(w)}
        # shown only when its message says something the question says (not just its paths)
        if h.votes and subject & words:
            out.append(PastCommit(h.sha, h.date[:10], h.subject, h.files[:5]))
    return tuple(out[:MAX_COMMITS])


def render_commits(commits: Sequence[PastCommit]) -> str:
    if not commits:
        return ""
    lines = ["Past commits similar to the question (cite as `commit <sha>`):"]
    for c in commits:
        files = ", ".join(c.files)
        lines.append(
            f"- commit {c.sha[:10]} ({c.date}) {c.subject}" + (f" — {files}" if files else "")
        )
    return "\n".join(lines)


def verify_commit_citations(
    text: str, root: Path, index_dir: str | Path | None, shown: Sequence[PastCommit]
) -> tuple[CommitCitation, ...]:
    """Every ``commit <sha>`` in ``text``, checked against the history of HEAD."""
    from retrieval.history import lookup_commit

    out: list[CommitCitation] = []
    seen: set[str] = set()
    for m in _COMMIT_REF.finditer(text):
        prefix = m.group(1).lower()
        if prefix in seen:
            continue
        seen.add(prefix)
        found = lookup_commit(Path(index_dir), prefix) if index_dir is not None else None
        was_shown = any(c.sha.startswith(prefix) for c in shown)
        out.append(
            CommitCitation(
                m.group(0),
                found[0] if found else prefix,
                found is not None,
                was_shown,
                found[1] if found else "",
            )
        )
    return tuple(out)


def verify_citations(
    text: str, root: Path, pack: ContextPack | None = None
) -> tuple[Citation, ...]:
    """Every ``path:line`` in ``text``, checked against the repository (and the pack)."""
    out: list[Citation] = []
    seen: set[tuple[str, int, int]] = set()
    lines_of: dict[str, int | None] = {}
    shown_paths = {i.path for i in pack.items} if pack is not None else set()
    for m in _citation_matches(text):
        path = _resolve(m.group("path").removeprefix("./"), shown_paths)
        start = int(m.group("start"))
        end = int(m.group("end") or start)
        if (path, start, end) in seen:
            continue
        seen.add((path, start, end))
        if path not in lines_of:
            lines_of[path] = _line_count(root, path)
        n = lines_of[path]
        problem = ""
        if n is None:
            problem = "no such file in the repository"
        elif start < 1 or end < start:
            problem = f"bad line range {start}-{end}"
        elif end > n:
            problem = f"line {end} is past the end of the file ({n} lines)"
        in_context = pack is not None and not problem and _shown(pack, path, start, end)
        out.append(Citation(m.group(0), path, start, end, not problem, in_context, problem))
    return tuple(out)


def _citation_matches(text: str) -> list[re.Match[str]]:
    """``path:line`` forms, then prose forms ("`path` ... line N-M") that do not overlap them,
    in the order they appear."""
    found = list(_CITATION.finditer(text))
    taken = [m.span() for m in found]
    for m in _PROSE_CITATION.finditer(text):
        if any(m.start() < end and start < m.end() for start, end in taken):
            continue
        path = m.group("path")
        quoted = bool(m.group("tick"))
        if quoted or "/" in path or _PROSE_EXTENSION.fullmatch(path.rpartition(".")[2]):
            found.append(m)
    return sorted(found, key=lambda m: m.start())


def _resolve(path: str, shown: set[str]) -> str:
    """A shortened path (``cart.py``) means the one file of the context it ends, if unique."""
    if path in shown:
        return path
    tails = [p for p in shown if p.endswith("/" + path)]
    return tails[0] if len(tails) == 1 else path


def _line_count(root: Path, path: str) -> int | None:
    full = (root / path).resolve()
    try:
        full.relative_to(root.resolve())
    except ValueError:
        return None  # outside the repository is no location in it
    if not full.is_file():
        return None
    with open(full, "rb") as fh:
        data = fh.read()
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _shown(pack: ContextPack, path: str, start: int, end: int) -> bool:
    return any(i.path == path and i.start_line <= start and end <= i.end_line for i in pack.items)


def _location(item) -> Location:
    snippet = ""
    if item.kind == FULL:
        body = item.text.split("\n")[2:-1]  # between the header and its code fence
        snippet = "\n".join(body[:SNIPPET_LINES])
    return Location(
        item.path,
        item.start_line,
        item.end_line,
        item.symbol,
        item.kind,
        item.score,
        tuple(str(r) for r in item.reasons),
        snippet,
    )
