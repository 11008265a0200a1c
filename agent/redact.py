"""Content redaction: tokens, keys and passwords in text that leaves the tools become
``[REDACTED:<kind>]``; everything else, line structure included, stays byte for byte.

    redact("url = https://me:ghp_...@github.com/o/r.git")
    # 'url = https://me:[REDACTED:GitHub Token]@github.com/o/r.git'

Detection is detect-secrets' (1.5): its pattern plugins decide what a secret is, line by line,
as `detect-secrets scan` does. Left out, measured on the CPython 3.11 standard library
(1,786 files, 30 MB, see benchmarks/redaction.py): the entropy plugins (Base64 87 and Hex 307
hits there: alphabets, hashes, test vectors), the keyword plugin (21 hits: test placeholders
such as ``password = 'pass'``; and 2.5 s per MB) and the public-IP plugin (617 hits: version
numbers; an address is not a credential). The plugins used change one line there. What detect-secrets lacks is added in
``SUPPLEMENTS``: URL user-info whose password has characters its basic-auth pattern excludes or
whose user name is a token, ``Authorization:`` / ``Bearer`` values, an unquoted
``aws_secret_access_key`` (the AWS credentials file format), and token formats newer than its
plugins (GitHub fine-grained, Anthropic, Google, Hugging Face, npm). A private key's body is
redacted line by line between its BEGIN and END lines, which stay.

Every value is checked against detect-secrets' own false-positive filters (templated,
``$``-prefixed, sequential) and a few placeholder words, and must stand alone: a token-shaped
run inside a longer alphanumeric run (a DNA string, a hash) is not a token.

Speed: each pattern scans the whole text once (C speed); only the lines where one matched are
analysed by the plugin. detect-secrets itself is imported on first use (~0.2 s).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retrieval.context import ContextPack

#: How a redacted value reads.
MARK = "[REDACTED:{}]"
#: Shorter strings cannot hold any detected secret (the shortest is ``a://b:cd@``).
MIN_CHARS = 8
#: Values that are placeholders in examples and tests, not credentials.
PLACEHOLDERS = frozenset(
    {"password", "passwd", "pass", "secret", "pwd", "pw", "token", "changeme", "example"}
)
_FILLER = re.compile(r"[xX*.#_-]+")
#: detect-secrets pattern plugins used, most specific first (the first kind wins an overlap).
PLUGINS: tuple[tuple[str, str], ...] = (
    ("private_key", "PrivateKeyDetector"),
    ("github_token", "GitHubTokenDetector"),
    ("gitlab_token", "GitLabTokenDetector"),
    ("aws", "AWSKeyDetector"),
    ("azure_storage_key", "AzureStorageKeyDetector"),
    ("openai", "OpenAIDetector"),
    ("slack", "SlackDetector"),
    ("stripe", "StripeDetector"),
    ("pypi_token", "PypiTokenDetector"),
    ("npm", "NpmDetector"),
    ("jwt", "JwtTokenDetector"),
    ("sendgrid", "SendGridDetector"),
    ("twilio", "TwilioKeyDetector"),
    ("mailchimp", "MailchimpDetector"),
    ("discord", "DiscordBotTokenDetector"),
    ("telegram_token", "TelegramBotTokenDetector"),
    ("square_oauth", "SquareOAuthDetector"),
    ("artifactory", "ArtifactoryDetector"),
    ("cloudant", "CloudantDetector"),
    ("ibm_cloud_iam", "IbmCloudIamDetector"),
    ("ibm_cos_hmac", "IbmCosHmacDetector"),
    ("softlayer", "SoftlayerDetector"),
    ("basic_auth", "BasicAuthDetector"),
)
#: (kind, pattern, group holding the secret, gate) for what detect-secrets 1.5 does not find.
SUPPLEMENTS: tuple[tuple[str, str, int, tuple[str, ...] | None], ...] = (
    ("GitHub Token", r"github_pat_[A-Za-z0-9_]{82}", 0, None),
    ("Anthropic API Key", r"sk-ant-[a-z]+\d*-[A-Za-z0-9_-]{80,}", 0, None),
    ("Google API Key", r"AIza[0-9A-Za-z_-]{35}", 0, None),
    ("Hugging Face Token", r"hf_[A-Za-z]{34}", 0, None),
    ("NPM tokens", r"npm_[A-Za-z0-9]{36}", 0, None),
    (
        "AWS Secret Access Key",
        r"(?i)aws_secret_access_key\s*[=:]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
        1,
        ("aws_secret_access_key",),
    ),
    (
        "Authorization Header",
        r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
        r"(?:bearer|basic|token|digest|bot)\s+([A-Za-z0-9._~+/-]{8,}=*)",
        1,
        ("authorization",),
    ),
    ("Bearer Token", r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]*\d[A-Za-z0-9._~+/-]*=*)", 1, ("bearer",)),
    # detect-secrets' basic-auth pattern refuses passwords holding any of !$&'()*+,;=
    ("URL Credentials", r"://[^\s/?#@:\"'<>]+:([^\s/?#@\"'<>]+)@", 1, None),
    # a token as the user name: https://<token>@host
    ("URL Credentials", r"://([A-Za-z0-9_-]{32,})@", 1, None),
)
#: Speed only: a plugin pattern without a literal start is tried only on the lines where its
#: gate matches, a condition every match of it meets (its secret is such a run, or holds it).
_RUN24 = r"[A-Za-z0-9_\-]{24,}"
GATES: dict[str, str] = {
    "CloudantDetector": _RUN24,
    "IbmCloudIamDetector": _RUN24,
    "IbmCosHmacDetector": _RUN24,
    "SoftlayerDetector": _RUN24,
    "MailchimpDetector": _RUN24,
    "TelegramBotTokenDetector": _RUN24,
    "DiscordBotTokenDetector": _RUN24,
    "ArtifactoryDetector": r"AKC|AP[\dA-F]",
}
#: Kinds whose pattern match ends early: the value runs on over these characters.
_RUNS_ON = {"JSON Web Token": re.compile(r"[A-Za-z0-9_.+/=-]*")}
_EDGES = " \t\"'=:`"
_ALNUM = re.compile(r"[A-Za-z0-9]")

# Private key bodies: base64 runs between a BEGIN line and its END line.
_KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|Private-MAC:")
_KEY_RUN = re.compile(r"(?:(?<=\\n)|(?<![A-Za-z0-9+/\\]))[A-Za-z0-9+/]{16,}={0,2}")
_KEY_HEADER = re.compile(r"""^[\s"'(b]*[A-Za-z][A-Za-z-]*: """)
#: A line of a key body, alone or as a string literal of code (quotes, "\n", "+", ",").
_KEY_LINE = re.compile(
    r"""^\s*[bru]*["']?\s*([A-Za-z0-9+/]{16,}={0,2})\s*(?:\\n)?["']?\s*[,+)]*\s*$"""
)
_KEY_NOISE = re.compile(r"[0-9+/]")
#: The last, shorter line of a body (just before the END line).
_KEY_TAIL = re.compile(
    r"""^\s*[bru]*["']?\s*([A-Za-z0-9+/]+={0,2})\s*(?:\\n)?["']?\s*[,+)]*\s*$"""
)
#: Lines of a key body at most (an 8192-bit RSA PEM has about 100).
MAX_KEY_LINES = 400


@dataclass(frozen=True, slots=True)
class Finding:
    """``text[start:end]`` is a secret of ``kind``."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Detector:
    kind: str
    #: Each scans the whole text; only the lines a match touches are analysed further.
    patterns: tuple[re.Pattern[str], ...]
    #: The group holding the secret; None: detect-secrets' (see _secret_span).
    group: int | None = None
    #: detect-secrets' own check of a line's matches (the JWT plugin decodes them); None: all.
    validate: Callable[[str], Iterable[str]] | None = None
    #: Lines to try: where this pattern matches, or (a tuple) where one of these lowercase
    #: words occurs; None: where ``patterns`` match the whole text.
    gate: re.Pattern[str] | tuple[str, ...] | None = None


_lock = threading.Lock()
_loaded: tuple[tuple[_Detector, ...], tuple[re.Pattern[str], ...]] | None = None


def detectors() -> tuple[tuple[_Detector, ...], tuple[re.Pattern[str], ...]]:
    """The detectors, and the private-key BEGIN patterns; detect-secrets loads on first call."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
    return _loaded


def _load() -> tuple[tuple[_Detector, ...], tuple[re.Pattern[str], ...]]:
    import importlib

    from detect_secrets.plugins.base import RegexBasedDetector

    out: list[_Detector] = []
    gates: dict[str, re.Pattern[str]] = {}
    key_begin: tuple[re.Pattern[str], ...] = ()
    for module, name in PLUGINS:
        cls = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
        plugin = cls()
        if name == "PrivateKeyDetector":
            key_begin = tuple(plugin.denylist)
            continue
        own_check = type(plugin).analyze_string is not RegexBasedDetector.analyze_string
        gate = GATES.get(name)
        out.append(
            _Detector(
                cls.secret_type,
                tuple(plugin.denylist),
                validate=plugin.analyze_string if own_check else None,
                gate=gates.setdefault(gate, re.compile(gate)) if gate else None,
            )
        )
    for kind, pattern, group, words in SUPPLEMENTS:
        out.append(_Detector(kind, (re.compile(pattern),), group=group, gate=words))
    return tuple(out), key_begin


def _plausible(value: str) -> bool:
    from detect_secrets.filters.heuristic import (
        is_prefixed_with_dollar_sign,
        is_sequential_string,
        is_templated_secret,
    )

    return not (
        len(value) < 2
        or value.lower() in PLACEHOLDERS
        or _FILLER.fullmatch(value)
        or is_templated_secret(value)
        or is_prefixed_with_dollar_sign(value)
        or is_sequential_string(value)
        or "%(" in value
    )


def find_secrets(text: str) -> list[Finding]:
    """Every secret in ``text``, sorted, overlaps merged (the first detector's kind wins)."""
    if len(text) < MIN_CHARS:
        return []
    dets, key_begin = detectors()
    found = _private_keys(text, key_begin)
    lines = _Lines(text)
    for det in dets:
        for ls in lines.candidates(det):
            le = text.find("\n", ls)
            found += _in_line(det, text, ls, len(text) if le < 0 else le)
    return _merge(found)


class _Lines:
    """Start offsets of the lines of one text worth analysing, per gate (computed once)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._lower: str | None = None
        self._by_gate: dict[object, list[int]] = {}

    def candidates(self, det: _Detector) -> list[int]:
        gate = det.gate
        if gate is None:
            return self._matched(det.patterns)
        if gate not in self._by_gate:
            if isinstance(gate, tuple):
                self._by_gate[gate] = self._words(gate)
            else:
                self._by_gate[gate] = self._matched((gate,))
        return self._by_gate[gate]

    def _matched(self, patterns: Iterable[re.Pattern[str]]) -> list[int]:
        starts: set[int] = set()
        for pattern in patterns:
            for m in pattern.finditer(self.text):
                starts.update(_lines_touched(self.text, m.start(), m.end()))
        return sorted(starts)

    def _words(self, words: tuple[str, ...]) -> list[int]:
        if self._lower is None:
            self._lower = self.text.lower()
        if len(self._lower) != len(self.text):  # lower() moved offsets (e.g. "İ"): use re
            pattern = re.compile("|".join(map(re.escape, words)), re.IGNORECASE)
            return self._matched((pattern,))
        starts: set[int] = set()
        for word in words:
            i = self._lower.find(word)
            while i >= 0:
                starts.add(self.text.rfind("\n", 0, i) + 1)
                i = self._lower.find(word, i + 1)
        return sorted(starts)


def _lines_touched(text: str, start: int, end: int) -> Iterator[int]:
    ls = text.rfind("\n", 0, start) + 1
    yield ls
    while True:
        nl = text.find("\n", ls, end)
        if nl < 0:
            return
        ls = nl + 1
        yield ls


def _in_line(det: _Detector, text: str, ls: int, le: int) -> list[Finding]:
    """Secrets of ``det`` in the line ``text[ls:le]``, matched within the line alone as
    detect-secrets scans."""
    line = text[ls:le]
    valid = set(det.validate(line)) if det.validate is not None else None
    out = []
    for pattern in det.patterns:
        for m in pattern.finditer(line):
            if valid is not None and not (valid & {m.group(0), *filter(None, m.groups())}):
                continue
            start, end = _secret_span(m, det.group)
            while start < end and line[start] in _EDGES:
                start += 1
            while end > start and line[end - 1] in _EDGES:
                end -= 1
            runs_on = _RUNS_ON.get(det.kind)
            if runs_on is not None:
                end = runs_on.match(line, end).end()  # type: ignore[union-attr]
            if start >= end or not _plausible(line[start:end]):
                continue
            if (start > 0 and _ALNUM.match(line, start - 1)) or _ALNUM.match(line, end):
                continue  # part of a longer run: a hash, a DNA string, an identifier
            out.append(Finding(det.kind, ls + start, ls + end))
    return out


def _secret_span(m: re.Match[str], group: int | None) -> tuple[int, int]:
    """Where the secret of match ``m`` is. detect-secrets reports a pattern's groups; a group
    is the secret (a password before ``@``, the value of ``key = "..."``) when it does not
    open the match (``(ghp|gho|...)_...`` names a prefix) and it ends the match or meets its
    ``@``; otherwise the whole match is."""
    if group is not None:
        return m.span(group)
    for g in range(m.re.groups, 0, -1):
        s, e = m.span(g)
        if s < 0:
            continue
        if s > m.start() and (e >= m.end() - 1 or m.string[e : e + 1] == "@"):
            return s, e
        break
    return m.span()


def _private_keys(text: str, begins: Iterable[re.Pattern[str]]) -> list[Finding]:
    out: list[Finding] = []
    for pattern in begins:
        for m in pattern.finditer(text):
            out += _key_body(text, m.end())
    return out


def _key_body(text: str, pos: int) -> list[Finding]:
    """Base64 runs from ``pos`` (just after a BEGIN marker) to the END marker, on this line and
    the following lines while they look like a key body (base64 or `Name: value` headers)."""
    out: list[Finding] = []
    ls = pos
    for n in range(MAX_KEY_LINES):
        le = text.find("\n", ls)
        le = len(text) if le < 0 else le
        end = _KEY_END.search(text, ls, le)
        stop = end.start() if end else le
        runs = [m.span() for m in _KEY_RUN.finditer(text, ls, stop)]
        if n > 0 and not end and not _body_line(text[ls:le]):
            tail = _KEY_TAIL.match(text[ls:le])
            after = text.find("\n", le + 1)
            if tail is None or not _KEY_END.search(text, le, len(text) if after < 0 else after):
                break
            runs = [(ls + tail.start(1), ls + tail.end(1))]
        out += [Finding("Private Key", s, e) for s, e in runs]
        if end is not None or le >= len(text):
            break
        ls = le + 1
    return out


def _body_line(line: str) -> bool:
    """A blank line, a ``Name: value`` header, or one base64 run that is not a word (random
    base64 of 16 characters or more holds a digit, "+" or "/")."""
    if not line.strip() or _KEY_HEADER.match(line):
        return True
    m = _KEY_LINE.match(line)
    return m is not None and _KEY_NOISE.search(m.group(1)) is not None


def _merge(found: list[Finding]) -> list[Finding]:
    if not found:
        return []
    order = sorted(found, key=lambda f: (f.start, -f.end))
    merged = [order[0]]
    for f in order[1:]:
        last = merged[-1]
        if f.start < last.end:
            if f.end > last.end:
                merged[-1] = Finding(last.kind, last.start, f.end)
            continue
        merged.append(f)
    return merged


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``."""
    return redact_counted(text)[0]


def redact_counted(text: str) -> tuple[str, int]:
    """``(redacted text, number of secrets replaced)``."""
    found = find_secrets(text)
    if not found:
        return text, 0
    parts, pos = [], 0
    for f in found:
        parts += [text[pos : f.start], MARK.format(f.kind)]
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts), len(found)


def redact_value(value: Any) -> tuple[Any, int]:
    """``value`` (JSON-like: dicts, lists, tuples, strings) with every string redacted, and the
    number of secrets replaced; unchanged containers are returned as they were."""
    # One scan of all the strings, one per line, answers the usual "nothing here" at the cost
    # of one text (detection is line by line, so joining finds all that each string holds).
    strings = [s for s in _strings(value) if len(s) >= MIN_CHARS]
    if not strings or not find_secrets("\n".join(strings)):
        return value, 0
    return _redact_each(value)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _redact_each(value: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        return redact_counted(value)
    if isinstance(value, dict):
        total, out = 0, {}
        for k, v in value.items():
            out[k], n = _redact_each(v)
            total += n
        return (out, total) if total else (value, 0)
    if isinstance(value, list | tuple):
        total, items = 0, []
        for v in value:
            r, n = _redact_each(v)
            items.append(r)
            total += n
        if not total:
            return value, 0
        return (type(value)(items) if isinstance(value, tuple) else items), total
    return value, 0


def redact_pack(pack: ContextPack, is_secret: Callable[[str], bool] | None = None) -> ContextPack:
    """A context pack fit for a prompt: items from files
    ``is_secret`` names dropped, secrets in the others' text redacted (the agent loop puts
    packs into prompts itself, not through the tools)."""
    items, changed = [], False
    for item in pack.items:
        if is_secret is not None and is_secret(item.path):
            changed = True
            continue
        text, n = redact_counted(item.text)
        if n:
            item, changed = replace(item, text=text), True
        items.append(item)
    return replace(pack, items=tuple(items)) if changed else pack
