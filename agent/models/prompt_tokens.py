"""Prompt tokens in the model's own tokenizer, where it can be known.

A budget is only as good as its count: o200k counts Qwen's line-numbered code 12 % short (Qwen
splits digits one by one), so a prompt sized in o200k overflows a Qwen context. The counter is
chosen per model (:func:`model_tokenizer`), best first:

1. a ``tokenizer.json`` the user points to (``--model-tokenizer PATH``, `model_tokenizer` in the
   config, REPOCTX_MODEL_TOKENIZER) — exact, offline;
2. the server's tokenize endpoint, when it answers (llama.cpp's and llama-cpp-python's servers,
   vLLM, TGI; see server_tokens.py) — exact, one local request per new text; when the family's
   exact BPE counts the probe texts as the server does, that BPE instead (the same counts,
   without a request per text: 15 ms instead of 1–2 s for an 8,000-token pack);
3. the model family's tokenizer from :data:`FAMILIES`, measured against the server by
   benchmarks/token_counts.py — exact BPE where quicktok-v1 bundles it (Qwen, Llama 3, GPT-4o),
   else o200k times the measured factor;
4. the retrieval counter (`tokenizer`, o200k by default) for a model of unknown family.

Around the texts, the chat template adds role markers per message, a header for the reply and
the text that introduces tool schemas: :class:`ChatTemplate` counts them (measured for Qwen's
template; the default is as large or larger). A budget keeps a safety margin for what the count
cannot know: :data:`EXACT_MARGIN` when the text counts are the model's own, :data:`EST_MARGIN`
when they are estimates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval.tokens import TokenCounter, TokenizerError, get_tokenizer

from .base import Message, ModelClient, ToolSpec
from .errors import ModelConfigError

#: Share of a budget kept free when the texts are counted in the model's own tokenizer (what is
#: left uncertain: the chat template's exact form and how tool schemas are rendered).
EXACT_MARGIN = 0.03
#: ... and when they are estimates (another tokenizer, or a family factor).
EST_MARGIN = 0.10
#: Texts probed to see whether a server counts tokens, and whether the family's tokenizer counts
#: as it does: line-numbered code (digits split differently by family), prose, non-ASCII.
PROBES = (
    " 9| def probe(x):\n10|     return x + 1  # 2024-12-02\n11| \n",
    "Where is the tax of a checkout computed? Cite path:line, e.g. shop/tax.py:10-12.",
    "naïve café — 東京 😀 \t\r\n",
)
#: Counts kept per server counter (a pack counts each candidate once; steps repeat many).
_CACHE_SIZE = 4096


@dataclass(frozen=True)
class ChatTemplate:
    """Tokens a chat template adds to the texts of a request."""

    name: str
    #: Around each message: role markers and separators.
    per_message: int
    #: The assistant header after the last message (the generation prompt).
    reply: int
    #: The fixed text that introduces the tool schemas, when tools are sent.
    tools: int
    #: Around each tool schema (besides its JSON).
    per_tool: int
    #: Around each tool call of an assistant message (besides its name and arguments).
    per_call: int
    #: Around each tool result (besides its text); replaces ``per_message`` for tool messages.
    per_result: int


#: Qwen 2.5 / 3 (ChatML with <tools>), measured with llama-cpp-python 0.3.36's GGUF Jinja
#: template by benchmarks/token_counts.py: <|im_start|>role\n…<|im_end|>\n is 5, the reply header
#: 3, the tools preamble and epilogue 79, a call's wrapper 14, a tool response's 14.
QWEN_TEMPLATE = ChatTemplate("chatml", 5, 3, 79, 1, 14, 14)
#: Unknown templates: at least as large as Qwen's (OpenAI's hidden template, Llama's headers).
DEFAULT_TEMPLATE = ChatTemplate("default", 8, 4, 100, 4, 16, 16)


@dataclass(frozen=True)
class Family:
    """A model family: how its names look, its tokenizer, and its chat template."""

    name: str
    pattern: str
    #: An exact BPE bundled in quicktok-v1 (retrieval/tokens.py), or None.
    encoding: str | None
    #: Its count over o200k's on line-numbered code (what a context pack is), measured by
    #: benchmarks/token_counts.py; used when ``encoding`` is None or cannot be loaded.
    o200k_factor: float
    template: ChatTemplate = DEFAULT_TEMPLATE


#: Families by name pattern, first match wins. Factors over o200k on line-numbered code (the
#: form of a context pack; the higher of two runs), measured by benchmarks/token_counts.py on
#: this repository's Python (qwen3 equals llama-cpp-python's count of Qwen2.5-Coder on 203 of
#: 210 texts; Mistral with mistral-common 1.13's tekken_240911 and v3 SentencePiece).
FAMILIES: tuple[Family, ...] = (
    Family("qwen", r"qwen|qwq", "qwen3", 1.15, QWEN_TEMPLATE),
    Family("llama", r"llama-?3|llama-?4", "llama3", 1.0),
    Family("openai", r"gpt-4o|gpt-4\.1|gpt-5|gpt-oss|(?:^|[/-])o[134](?:$|-)", "o200k", 1.0),
    Family("gpt-4", r"gpt-4|gpt-3\.5", "cl100k", 1.0),
    # Tekken (Nemo, Small 3, Devstral, Codestral 25): 1.05 on plain code, 1.19 numbered.
    Family(
        "mistral-tekken",
        r"mistral-?(?:nemo|small|medium|large)|devstral|ministral|magistral|codestral-?25",
        None,
        1.19,
    ),
    # SentencePiece v3 (Mistral 7B, Mixtral, Codestral 22B): 1.26 plain, 1.39 in packs.
    Family("mistral", r"mistral|mixtral|codestral", None, 1.39),
)


@dataclass(frozen=True)
class PromptCounter:
    """How one model's prompts are counted: ``counter`` counts text (retrieval packs with it),
    ``template`` adds what the chat template wraps around the texts, ``margin`` is the share of
    a budget kept free. ``source`` says which counter this is (shown in traces and `--json`)."""

    counter: TokenCounter
    source: str
    template: ChatTemplate = DEFAULT_TEMPLATE
    margin: float = EST_MARGIN
    #: Whether ``counter`` is the model's own tokenizer (server, file, exact family BPE).
    exact: bool = False
    #: Texts the server could not count (they were counted by the fallback instead).
    stats: dict[str, int] = field(default_factory=lambda: {"fallbacks": 0}, compare=False)

    def count(self, text: str) -> int:
        return self.counter.count(text)

    def usable(self, budget: int) -> int:
        """Tokens of ``budget`` a prompt may fill by this count: the margin stays free."""
        return max(1, budget * self._keep // 1000)

    def needed(self, tokens: int) -> int:
        """The smallest budget whose usable part holds ``tokens`` (inverse of :meth:`usable`)."""
        return -(-tokens * 1000 // self._keep)

    @property
    def _keep(self) -> int:  # per mille of a budget a prompt may fill (integers: no rounding drift)
        return max(1, round((1 - self.margin) * 1000))

    def tool_json(self, spec: ToolSpec) -> str:
        return json.dumps(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            },
            ensure_ascii=False,
        )

    def tools_tokens(self, specs: Sequence[ToolSpec]) -> int:
        """The tool schemas as a chat template renders them (0 without tools)."""
        if not specs:
            return 0
        counts = self.counter.count_many([self.tool_json(s) for s in specs])
        return sum(counts) + self.template.per_tool * len(specs) + self.template.tools

    def message_tokens(self, message: Message) -> int:
        t = self.template
        texts = [message.content]
        for call in message.tool_calls:
            texts += [call.name, call.raw_arguments]
        wrap = t.per_result if message.role == "tool" else t.per_message
        return sum(self.counter.count_many(texts)) + wrap + t.per_call * len(message.tool_calls)

    def prompt_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """The whole request as the model will count it: messages, tool schemas, reply header."""
        return (
            sum(self.message_tokens(m) for m in messages)
            + self.tools_tokens(tools)
            + self.template.reply
        )

    def describe(self) -> str:
        fell = self.stats.get("fallbacks", 0)
        extra = f"; {fell} texts counted by the fallback" if fell else ""
        return f"{self.source} (template {self.template.name}, margin {self.margin:.0%}{extra})"


def family_of(model_name: str) -> Family | None:
    """The family of ``provider:model`` by its name, or None."""
    name = model_name.partition(":")[2] or model_name
    for family in FAMILIES:
        if re.search(family.pattern, name, re.IGNORECASE):
            return family
    return None


def model_tokenizer(
    model: ModelClient | None,
    spec: str | None = None,
    *,
    fallback: str | TokenCounter | None = None,
    probe: bool = True,
    margin: float | None = None,
) -> PromptCounter:
    """The counter for ``model``'s prompts. ``spec``: ``auto`` (default: the order in the module
    docstring), ``server`` (its tokenize endpoint for every text, or an error), a
    ``tokenizer.json`` path (or ``hf:PATH``), or any retrieval tokenizer name (``qwen3``,
    ``o200k*1.13``). ``fallback`` is the counter of a model of unknown family (the
    `tokenizer` setting). ``probe``: ask the server for its tokenize endpoint (one request)."""
    spec = (spec or "auto").strip()
    mode = spec.lower()
    name = getattr(model, "name", "") or ""
    family = family_of(name)
    template = family.template if family else DEFAULT_TEMPLATE

    def made(counter: TokenCounter, source: str, exact: bool) -> PromptCounter:
        chosen = margin if margin is not None else (EXACT_MARGIN if exact else EST_MARGIN)
        return PromptCounter(counter, source, template, chosen, exact)

    if mode not in ("auto", "server"):
        path = spec[3:] if spec.startswith("hf:") else spec
        if spec.startswith("hf:") or path.endswith(".json") or Path(path).expanduser().is_file():
            try:
                counter = get_tokenizer(f"hf:{Path(path).expanduser()}")
            except TokenizerError as exc:
                raise ModelConfigError(str(exc)) from exc
            return made(counter, f"file {path}", True)
        try:
            counter = get_tokenizer(spec)
        except TokenizerError as exc:
            raise ModelConfigError(
                f"{exc} (from the model tokenizer {spec!r}: use auto, a tokenizer.json path or "
                "a tokenizer name)"
            ) from exc
        return made(counter, f"{counter.name} (configured)", False)
    base = _family_counter(family) if family else None
    if family is None or base is None:
        base = fallback if isinstance(fallback, TokenCounter) else get_tokenizer(fallback)
        where, exact = f"{base.name} (model family unknown)", False
    else:
        where = f"{base.name} ({family.name} family table)"
        exact = family.encoding is not None and base.name == _short(family.encoding)
    count = getattr(model, "count_tokens", None)
    asked = probe or mode == "server"
    if asked and callable(count) and isinstance(first := count(PROBES[0]), int):
        url = getattr(model, "tokenize_url", "") or "the server"
        served = [first, *(count(text) for text in PROBES[1:])]
        if mode == "auto" and exact and served == base.count_many(list(PROBES)):
            # The family's BPE counts as the server does: as exact, and no request per text.
            return made(base, f"{where}, agrees with the server {url}", True)
        stats = {"fallbacks": 0}
        chosen = margin if margin is not None else EXACT_MARGIN
        counter = _server_counter(count, base, stats)
        return PromptCounter(counter, f"server {url}", template, chosen, True, stats)
    if mode == "server":
        raise ModelConfigError(
            f"The server of {name or 'this model'} has no tokenize endpoint that answered — use "
            "--model-tokenizer auto, or the path of the model's tokenizer.json."
        )
    return made(base, where, exact)


def _short(encoding: str) -> str:
    return encoding.removesuffix("_base")


def _family_counter(family: Family) -> TokenCounter | None:
    if family.encoding:
        try:
            return get_tokenizer(family.encoding)
        except TokenizerError:
            pass  # quicktok-v1 missing: the factor over whatever counts instead
    try:
        return get_tokenizer(f"o200k*{family.o200k_factor}")
    except TokenizerError:
        return None


def _server_counter(count: Any, fallback: TokenCounter, stats: dict[str, int]) -> TokenCounter:
    """A TokenCounter asking the server, each distinct text once; a text it cannot count (it
    went away) is counted by ``fallback`` and tallied in ``stats``."""
    cache: dict[str, int] = {}

    def count_many(texts: list[str]) -> list[int]:
        out = []
        for text in texts:
            n = cache.get(text)
            if n is None:
                got = count(text)
                if isinstance(got, int):
                    n = got
                    if len(cache) >= _CACHE_SIZE:
                        cache.clear()
                    cache[text] = n
                else:
                    n = fallback.count(text)
                    stats["fallbacks"] = stats.get("fallbacks", 0) + 1
            out.append(n)
        return out

    return TokenCounter("server", count_many)
