"""`ask`: answer a question about the repository from a budgeted context, with verified
citations — or, without a model, the ranked locations themselves.

The model sees the context with line numbers and must cite ``path:line``; every citation in
its answer — in that form or in the prose small models write (agent/ask_citations.py) — is
checked against the files on disk (and against the context it was shown), so an invented
location is flagged, never passed on as fact.

Token figures are the server's when it reports them; a server that streams without usage
(llama-cpp-python) gets the request's own count, marked as counted. In a session
(agent/ask_session.py) a follow-up's prompt extends the previous one, and what the server
reused of it is reported (by the server, or estimated from the shared prefix).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

from indexer import Index
from retrieval.context import FULL, ContextPack, PackPolicy, assemble_context
from retrieval.settings import DEFAULT_BUDGET
from retrieval.tokens import TokenCounter, get_tokenizer

from .ask_citations import Citation, verify_citations
from .ask_session import (
    FIRST_SHARE,
    PROMPT_ALLOWANCE,
    AskSession,
    FollowUp,
    Turn,
    as_pack,
    follow_up,
    record_turn,
    shown_items,
)
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

SNIPPET_LINES = 6
#: A retry after a context overflow needs at least this much code to be worth asking.
MIN_RETRY_CONTEXT = 200
#: Past commits shown with the context (similar to the question, from the history index).
MAX_COMMITS = 3
_COMMIT_REF = re.compile(r"\bcommit\s+`?([0-9a-f]{7,40})\b", re.I)


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
    #: What happened on the way: a retry with a smaller context after an overflow, a session
    #: that started afresh.
    notes: tuple[str, ...] = ()
    #: Where ``usage``'s token counts come from: "reported" by the server, or "counted" by
    #: repoctx (the request's prompt in the model's tokenizer, and the answer) when it sent none.
    usage_source: str = ""
    #: The session after this question (to save), when one was given.
    session: AskSession | None = None

    @property
    def invalid_citations(self) -> tuple[Citation, ...]:
        return tuple(c for c in self.citations if not c.valid)

    def to_dict(self) -> dict:
        usage = None
        if self.usage:
            usage = {
                **asdict(self.usage),
                "processed_tokens": self.usage.processed_tokens,
                "source": self.usage_source,
            }
        return {
            "question": self.question,
            "answer": self.answer,
            "model": self.model,
            "citations": [asdict(c) for c in self.citations],
            "invalid_citations": len(self.invalid_citations),
            "locations": [asdict(loc) for loc in self.locations],
            "hint": self.hint,
            "usage": usage,
            "commits": [asdict(c) for c in self.commits],
            "commit_citations": [asdict(c) for c in self.commit_citations],
            "latency_s": round(self.latency_s, 3),
            "prompt_tokens_est": self.prompt_tokens_est,
            "notes": list(self.notes),
            "session": _session_dict(self.session),
            "context": {
                "budget": self.pack.budget,
                "used_tokens": self.pack.used_tokens,
                "tokenizer": self.tokenizer or self.pack.tokenizer,
                "items": len(self.pack.items),
                "timings": self.pack.timings,
            },
        }


def _session_dict(session: AskSession | None) -> dict | None:
    if session is None or not session.turns:
        return None
    last = session.turns[-1]
    return {
        "name": session.name,
        "question": len(session.turns),
        "started_afresh": last.started_afresh,
        "new_context_items": last.new_items,
        "left_out_items": last.left_out,
        "turns": [asdict(t) for t in session.turns],
    }


def ask(
    index: Index,
    question: str,
    *,
    model: ModelClient | None = None,
    budget_tokens: int = DEFAULT_BUDGET,
    focus: Sequence[str] = (),
    searcher=None,
    tokenizer=None,
    history: bool = False,
    max_tokens: int = 1024,
    is_secret: Callable[[str], bool] | None = None,
    model_tokenizer: PromptCounter | None = None,
    session: AskSession | None = None,
    session_tokens: int | None = None,
) -> Answer:
    """Answer ``question``: with ``model``, from the assembled context with checked
    citations; without, the ranked locations of that context and a hint to configure one.
    With ``history`` the past commits whose messages resemble the question are shown beside
    the code, and ``commit <sha>`` citations are checked against the history index.

    With a model the context is counted in the model's tokens (``model_tokenizer``, default:
    its family's tokenizer, else ``tokenizer``) and keeps that counter's safety margin free;
    when the server still says the prompt is too long, the context is assembled once more to
    fit the window it reported, and asked again.

    With ``session`` (agent/ask_session.py) the question follows the earlier ones: the request
    starts with the previous request's messages and its answer, and adds the context items not
    shown yet; past ``session_tokens`` prompt tokens (default: the budget plus
    PROMPT_ALLOWANCE) the tail starts afresh. ``Answer.session`` is the session to save.

    Files ``is_secret`` names (default: the agent's built-in deny list; pass
    ``Workspace.from_config(config).is_hidden`` to add `agent.deny`) are left out of the
    context, and tokens and keys in the rest are redacted, as in every tool result."""
    root = index.root
    policy = replace(PackPolicy(), line_numbers=model is not None)
    commits = past_commits(index if history else None, question)
    hidden = is_secret or Workspace(root).is_hidden
    limit = budget_tokens + PROMPT_ALLOWANCE if session_tokens is None else session_tokens
    tokens = None
    if model is not None:
        tokens = model_tokenizer or tokenizer_for(model, fallback=tokenizer, probe=False)
        counter = tokens.counter
        budget_tokens = tokens.usable(budget_tokens)
        limit = tokens.usable(limit)
    else:
        counter = tokenizer if isinstance(tokenizer, TokenCounter) else get_tokenizer(tokenizer)
    # In a session the first context leaves room for the follow-ups' (ask_session.FIRST_SHARE).
    first_budget = int(budget_tokens * FIRST_SHARE) if session is not None else budget_tokens

    def build_pack(budget: int, skip: Sequence[str] = ()) -> tuple[ContextPack, str, list[str]]:
        shas = [c.sha for c in commits if c.sha not in skip]
        history_text = render_commits([c for c in commits if c.sha in shas])
        if history_text:  # the commits come out of the same budget
            budget = max(1, budget - counter.count(history_text + "\n\n"))
        pack = assemble_context(
            index,
            question,
            budget,
            focus=focus,
            searcher=searcher,
            tokenizer=counter,
            policy=policy,
            history=history or None,  # None: when a searcher is given, as without ``history``
        )
        # The pack goes into the model's prompt directly, not through the tools.
        return redact_pack(pack, hidden), history_text, shas

    def first(budget: int) -> tuple[ContextPack, list[Message], list[str]]:
        pack, history_text, shas = build_pack(budget)
        context = pack.render() + (f"\n\n{history_text}" if history_text else "")
        messages = [
            Message.system(SYSTEM_PROMPT),
            Message.user(f"{context}\n\nQuestion: {question}"),
        ]
        return pack, messages, shas

    if model is None or tokens is None:
        pack, _, _ = first(budget_tokens)
        locations = tuple(_location(item) for item in pack.items)
        return Answer(question, "", "", (), locations, pack, hint=MODEL_HINT, commits=commits)
    notes: list[str] = []
    plan: FollowUp | None = None
    if session is not None and not session.is_new:
        if session.messages[0].content != SYSTEM_PROMPT:
            notes.append(
                f"Session {session.name} was asked with other instructions (another repoctx "
                "version): started afresh."
            )
        else:
            pack, history_text, shas = build_pack(budget_tokens, session.commits)
            plan = follow_up(session, pack, question, tokens, limit, history_text, shas)
            if plan is None:
                notes.append(
                    f"Session {session.name} outgrew its {limit:,}-token prompt limit: started "
                    "afresh after the system prompt (the earlier questions and answers are not "
                    "in this prompt)."
                )
    if plan is not None:
        messages, shown, shas = plan.messages, plan.shown, [*session.commits, *plan.commits]
        checked = as_pack(pack, shown)
    else:
        pack, messages, shas = first(first_budget)
        shown, checked = shown_items(pack.items), pack
    estimate = tokens.prompt_tokens(messages)
    # The prompt the server saw last in this session: its prefix is what the server can reuse.
    prefix: int | None = None
    if plan is not None:
        prefix = plan.prefix_tokens
    elif session is not None and not session.is_new:
        prefix = tokens.message_tokens(messages[0])  # a fresh tail keeps the system prompt
    try:
        completion = model.complete(messages, max_tokens=max_tokens, temperature=0.0)
    except ContextTooLongError as exc:
        if plan is not None:  # the follow-up is too long for the server: a fresh tail instead
            notes.append(
                f"The follow-up's prompt (~{estimate:,} tokens) was too long for the model: "
                f"started session {session.name} afresh after the system prompt."
            )
            plan, smaller = None, first_budget
        else:
            smaller = overflow_budget(
                exc, tokens, first_budget, estimate, pack.used_tokens, max_tokens
            )
            if smaller is None:
                raise
            notes.append(
                f"The prompt (~{estimate:,} tokens) was too long for the model"
                + (f" ({exc.context_window:,}-token context)" if exc.context_window else "")
                + f"; asked again with a {smaller:,}-token context instead of {first_budget:,}."
            )
        pack, messages, shas = first(smaller)
        shown, checked = shown_items(pack.items), pack
        estimate = tokens.prompt_tokens(messages)
        prefix = None
        completion = model.complete(messages, max_tokens=max_tokens, temperature=0.0)
    text = completion.message.content
    usage, usage_source = request_usage(completion.usage, estimate, tokens.count(text), prefix)
    after = None
    if session is not None:
        turn = Turn(
            question,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            usage.cache_source,
            usage_source,
            plan is None,
            len(plan.new_items) if plan is not None else len(pack.items),
            plan.left_out if plan is not None else 0,
        )
        if plan is not None and plan.left_out:
            notes.append(
                f"{plan.left_out} new context item(s) did not fit session {session.name}'s "
                f"{limit:,}-token prompt limit and were left out."
            )
        after = record_turn(session, model.name, messages, text, shown, shas, turn)
    return Answer(
        question,
        text,
        model.name,
        verify_citations(text, root, checked, index),
        tuple(_location(item) for item in pack.items),
        pack,
        usage=usage,
        latency_s=completion.latency_s,
        commits=commits,
        commit_citations=verify_commit_citations(text, index if history else None, commits),
        tokenizer=tokens.describe(),
        prompt_tokens_est=estimate,
        notes=tuple(notes),
        usage_source=usage_source,
        session=after,
    )


def request_usage(
    reported: Usage, prompt_tokens: int, completion_tokens: int, prefix: int | None
) -> tuple[Usage, str]:
    """The token figures of a request and where they come from: the server's when it sent
    any ("reported"), else the request's own count ("counted": ``prompt_tokens`` in the
    model's tokenizer, the answer's ``completion_tokens``). Prompt tokens reused from the
    server's cache: as reported, else estimated as ``prefix`` (the tokens this prompt shares
    with the one before it), else unknown."""
    if reported.prompt_tokens or reported.completion_tokens:
        usage, source = reported, "reported"
    else:
        usage = Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)
        source = "counted"
    if not usage.cache_source and prefix is not None:
        usage = replace(
            usage, cached_tokens=min(prefix, usage.prompt_tokens), cache_source="estimate"
        )
    return usage, source


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


def past_commits(index: Index | None, question: str) -> tuple[PastCommit, ...]:
    """Past commits whose messages resemble the question (the history signal's own search);
    none without an index to read or a history index."""
    if index is None:
        return ()
    from indexer import split_identifier
    from retrieval.history import similar_commits
    from retrieval.query import parse_query
    from retrieval.signals import SignalContext

    words = set(parse_query(question).terms)
    hits = similar_commits(SignalContext(index), question, MAX_COMMITS * 3)
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
    text: str, index: Index | None, shown: Sequence[PastCommit]
) -> tuple[CommitCitation, ...]:
    """Every ``commit <sha>`` in ``text``, checked against the history of HEAD (none is
    found without ``index``)."""
    from retrieval.history import lookup_commit

    out: list[CommitCitation] = []
    seen: set[str] = set()
    for m in _COMMIT_REF.finditer(text):
        prefix = m.group(1).lower()
        if prefix in seen:
            continue
        seen.add(prefix)
        found = lookup_commit(index, prefix) if index is not None else None
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
