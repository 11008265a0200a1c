"""The validation table of repoctx's settings: what one setting is, how a value of each kind is
checked, and the messages that name what is wrong.

A :class:`Settings` table maps keys to :class:`Setting` records; a key of a TOML table is dotted
(``agent.max_read_lines``). Each layer declares its own table next to the code that reads it
(indexer/config.py: the index's; retrieval/settings.py: the context's; agent/settings.py: the
model's and the agent's), cli composes them with ``+`` (cli/settings.py) and hands the sum to
:func:`indexer.config.load_config`. A layer reads its values back through its own table
(:meth:`Settings.value`, :meth:`Settings.section`), which checks a Config made in code the way
load_config checks the files. A plain table rather than pydantic: read commands start in
~100 ms, and importing pydantic alone costs ~35 ms.

Every value is checked against its record: a bad one is a :class:`ConfigError` naming the key,
where it came from (file, environment variable or flag), the value and what is allowed; an
unknown key is one too, with the closest known key. TOML values must already have the right
type (``jobs = "4"`` is an error); only environment variables are parsed from text.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.credentials import CREDENTIALS_HINT, redact_uri, uri_credentials
from indexer.errors import ConfigError

__all__ = ["BadValue", "Setting", "Settings", "Weakens", "allowed", "clip", "env_name", "fmt", "parse",
           "show"]

#: ``weakens(value, trusted, root)``: what a repository's ``value`` loosens compared with the
#: ``trusted`` one, or None (indexer/config_trust.py holds the predicates).
Weakens = Callable[[Any, Any, Path], "str | None"]

_ENV_PREFIX = "REPOCTX_"


@dataclass(frozen=True)
class Setting:
    """How one setting is checked. ``kind`` is one of int, float, bool, str, choice, list (of
    strings), path, uri (a path or URI without credentials), options (a table of scalars) or
    env (a table of strings)."""

    kind: str
    #: Shown in error messages; None when the default is computed (or described in ``note``).
    default: Any = None
    #: Inclusive bounds of a number.
    lo: float | None = None
    hi: float | None = None
    #: Exclusive lower bound of a number (timeouts must be > 0).
    above: float | None = None
    choices: tuple[str, ...] = ()
    #: The unit or meaning, shown with the range ("bytes", "0 = one per core").
    note: str = ""
    #: A list given as one TOML string is split on this (None: whitespace); a list from an
    #: environment variable is always comma-separated.
    sep: str | None = None
    #: Whether a value from the repository's config loosens what the trusted sources (flags,
    #: environment, user config, else the default) allow: ``weakens(value, trusted, root)`` is
    #: None, or what it loosens ("gives commands the network"). None here: any value is fine.
    weakens: Weakens | None = None


def env_name(key: str) -> str:
    """The environment variable of a setting: ``REPOCTX_JOBS``, ``REPOCTX_AGENT_NETWORK``."""
    return _ENV_PREFIX + key.replace(".", "_").upper()


class BadValue(Exception):
    """A value of the wrong type or out of range; ``problem`` completes "`key` = v ..."."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


# -- the kinds ----------------------------------------------------------------------------------


def _number(value: Any, text: bool, integer: bool) -> int | float:
    what = "an integer" if integer else "a number"
    if text:
        raw = value.strip().replace("_", "")
        try:
            return int(raw) if integer else float(raw)
        except ValueError:
            if raw.lstrip("+-").isdigit():  # more digits than int() converts
                raise BadValue("is out of range") from None
            raise BadValue(f"is not {what}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue(f"is not {what}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadValue("is not a finite number")
    if integer and not isinstance(value, int):
        raise BadValue(f"is not {what}")
    return value


def _int(s: Setting, value: Any, text: bool) -> int:
    n = _number(value, text, integer=True)
    if (s.lo is not None and n < s.lo) or (s.hi is not None and n > s.hi):
        raise BadValue("is out of range")
    return int(n)


def _float(s: Setting, value: Any, text: bool) -> float:
    n = float(_number(value, text, integer=False))
    if not math.isfinite(n):
        raise BadValue("is not a finite number")
    if (s.above is not None and n <= s.above) or (s.lo is not None and n < s.lo) or (
            s.hi is not None and n > s.hi):
        raise BadValue("is out of range")
    return n


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _bool(s: Setting, value: Any, text: bool) -> bool:
    if text:
        word = value.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
    elif isinstance(value, bool):
        return value
    raise BadValue("is not a boolean")


def _str(s: Setting, value: Any, text: bool) -> str:
    if not isinstance(value, str):
        raise BadValue("is not a string")
    if not value.strip():
        raise BadValue("is empty")
    return value.strip()


def _choice(s: Setting, value: Any, text: bool) -> str:
    word = _str(s, value, text).lower()
    if word not in s.choices:
        raise BadValue("is not a known choice")
    return word


def _list(s: Setting, value: Any, text: bool) -> tuple[str, ...]:
    if isinstance(value, str):  # environment: comma-separated; TOML: as `sep` says
        sep = "," if text else s.sep
        items = value.split(sep) if sep else value.split()
        return tuple(i.strip() for i in items if i.strip())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise BadValue("is not a list of strings")
    return tuple(value)


def _path(s: Setting, value: Any, text: bool) -> Path:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return Path(_str(s, value, text))


def _uri(s: Setting, value: Any, text: bool) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    uri = _str(s, value, text)
    found = uri_credentials(uri)
    if found:
        raise BadValue(f"carries credentials ({', '.join(found)})")
    return uri


def _table(value: Any, text: bool) -> Mapping[str, Any]:
    if text:
        try:
            value = json.loads(value)
        except ValueError:
            raise BadValue("is not a JSON object") from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise BadValue("is not a table")
    return value


def _options(s: Setting, value: Any, text: bool) -> dict[str, Any]:
    table = _table(value, text)
    for k, v in table.items():
        if isinstance(v, float) and not math.isfinite(v) or not isinstance(
                v, str | int | float | bool):
            raise BadValue(f"has a value for `{k}` that is not a string, number or boolean")
        found = uri_credentials(v) if isinstance(v, str) else []
        if found:
            raise BadValue(f"has a URI with credentials ({', '.join(found)}) for `{k}`")
    return dict(table)


def _env(s: Setting, value: Any, text: bool) -> tuple[tuple[str, str], ...]:
    if isinstance(value, tuple):  # already checked: ((name, value), ...)
        value = dict(value) if all(isinstance(p, tuple) and len(p) == 2 for p in value) else None
    table = _table(value, text)
    bad = [k for k, v in table.items() if not isinstance(v, str)]
    if bad:
        raise BadValue(f"has a value for `{bad[0]}` that is not a string")
    return tuple(sorted(table.items()))


_CHECKS: dict[str, Callable[[Setting, Any, bool], Any]] = {
    "int": _int, "float": _float, "bool": _bool, "str": _str, "choice": _choice, "list": _list,
    "path": _path, "uri": _uri, "options": _options, "env": _env,
}


def parse(s: Setting, value: Any, text: bool = False) -> Any:
    """``value`` in ``s``'s canonical type (tuples for lists), or :class:`BadValue`."""
    return _CHECKS[s.kind](s, value, text)


# -- how values are shown -----------------------------------------------------------------------


def fmt(value: Any) -> str:
    """A value as TOML would write it (a table as ``{…}``: it may hold secrets)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else "{…}"
    return str(value)


def clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _range(lo: float | None, hi: float | None, above: float | None) -> str:
    if above is not None:
        return f"greater than {fmt(above)} and at most {fmt(hi)}" if hi is not None else \
            f"greater than {fmt(above)}"
    if lo is not None and hi is not None:
        return f"from {fmt(lo)} to {fmt(hi)}"
    return f"of at least {fmt(lo)}" if lo is not None else f"of at most {fmt(hi)}"


def allowed(s: Setting, text: bool = False) -> str:
    """What ``s`` accepts, as advice: "use an integer from 0 to 256 (0 = one per core;
    default 0)". ``text``: as written in an environment variable."""
    use = {
        "int": lambda: f"an integer {_range(s.lo, s.hi, s.above)}",
        "float": lambda: f"a number {_range(s.lo, s.hi, s.above)}",
        "bool": lambda: "1, true, yes or 0, false, no" if text else "true or false",
        "str": lambda: "a non-empty string",
        "choice": lambda: "one of " + ", ".join(s.choices),
        "list": lambda: "strings separated by commas" if text else "a list of strings",
        "path": lambda: "a directory path",
        "uri": lambda: "a directory or a URI such as s3://bucket/prefix",
        "options": lambda: ("a JSON object" if text else "a table")
        + " of string, number or boolean values",
        "env": lambda: ("a JSON object" if text else "a table") + " of string values",
    }[s.kind]()
    details = [d for d in (s.note, None if s.default is None else
                           f"default {clip(fmt(s.default), 60)}") if d]
    return f"use {use}" + (f" ({'; '.join(details)})" if details else "")


def show(s: Setting, value: Any) -> str:
    """The value as a message shows it: never a credential, never a secret-bearing table."""
    if s.kind in ("options", "env"):
        return "{…}" if isinstance(value, Mapping) else clip(repr(value))
    if s.kind == "uri" and isinstance(value, str):
        return repr(redact_uri(value))
    if isinstance(value, bool):
        return fmt(value)
    return clip(repr(value))


# -- the table ----------------------------------------------------------------------------------


class Settings(Mapping[str, Setting]):
    """A validation table: :class:`Setting` records by key. ``a + b`` is the table of both (a key
    may be declared once: a second, different record for it is a programming error).

    A layer's own table is partial: a configuration file read with it may hold other layers'
    keys, which it leaves to them (they are not read, so nothing unchecked gets through). The
    table of every layer (`whole`, composed in cli/settings.py) knows every key, so there an
    unknown one is an error naming the closest known key."""

    def __init__(self, table: Mapping[str, Setting], *, complete: bool = False) -> None:
        self._table = dict(table)
        #: Every layer's keys: an unknown key is a mistake, not another layer's setting.
        self.complete = complete
        #: Top-level keys that hold a table of settings (``agent``).
        self.sections = tuple(dict.fromkeys(k.partition(".")[0] for k in table if "." in k))

    def __getitem__(self, key: str) -> Setting:
        return self._table[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __add__(self, other: Mapping[str, Setting]) -> Settings:
        twice = [k for k in other if k in self._table and self._table[k] is not other[k]]
        if twice:
            raise ValueError(f"settings declared twice: {', '.join(twice)}")
        return Settings({**self._table, **other})

    def whole(self) -> Settings:
        """This table as every layer's: unknown keys are errors."""
        return Settings(self._table, complete=True)

    def declares(self, key: str) -> bool:
        """Whether ``key`` is read through this table (a partial table skips the others)."""
        return self.complete or key in self._table

    def check(self, key: str, value: Any, where: str, *, text: bool = False) -> Any:
        """``value`` of setting ``key`` in its canonical type (tuples for lists), or a
        ConfigError naming the key, ``where`` it came from ("in .repoctx.toml", "from
        REPOCTX_JOBS"), the value and what is allowed. ``text``: the value is an environment
        variable's string, so numbers, booleans, lists and tables are parsed from it."""
        s = self._table.get(key)
        if s is None:
            raise self.unknown(key, where)
        try:
            return parse(s, value, text)
        except BadValue as bad:
            advice = (f"remove them from the URI and {CREDENTIALS_HINT}" if "credentials" in
                      bad.problem else allowed(s, text))
            raise ConfigError(
                f"`{key}` = {show(s, value)} {where} {bad.problem} — {advice}.") from None

    def unknown(self, key: str, where: str) -> ConfigError:
        """The error of a key this table does not hold, with the closest one it does."""
        import difflib

        section, dot, _ = key.rpartition(".")
        known = sorted(k for k in [*self._table, *self.sections]
                       if (k.rpartition(".")[0] == section if dot else "." not in k))
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f" — did you mean `{close[0]}`?" if close else " —"
        shown = ", ".join(k.rpartition(".")[2] for k in known)
        scope = f"`{section}` settings" if dot else "settings"
        return ConfigError(
            f"Unknown setting `{key}` {where}{hint} Known {scope}: {shown}. "
            "Fix or remove the key."
        )

    def value(self, config: Any, key: str) -> Any:
        """The checked value of ``key`` as ``config.extra`` holds it (a dotted key in its
        section's table), else the default. load_config checked it already, with where it came
        from; this checks a Config made in code the same way."""
        self._read_by(config, (key,))
        holder = config.extra if isinstance(config.extra, Mapping) else {}
        section, dot, name = key.rpartition(".")
        if dot:
            holder = holder.get(section, {})
            if not isinstance(holder, Mapping):
                raise ConfigError(f"`{section}` in Config.extra is not a table — pass a dict.")
        if name not in holder:
            return self._table[key].default
        return self.check(key, holder[name], "in Config.extra")

    def section(self, config: Any, section: str) -> dict[str, Any]:
        """The checked settings of table ``section`` (``agent``) in ``config.extra``, by key
        without the prefix; only the keys that are set, each known to this table."""
        self._read_by(config, [k for k in self._table if k.startswith(section + ".")])
        raw = config.extra.get(section, {}) if isinstance(config.extra, Mapping) else {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"`{section}` in Config.extra is not a table — pass a dict.")
        return {k: self.check(f"{section}.{k}", v, "in Config.extra") for k, v in raw.items()}

    @staticmethod
    def _read_by(config: Any, keys: Iterable[str]) -> None:
        """Refuse to read back keys the configuration was loaded without (the indexer's own
        table leaves other layers' keys unread): their defaults would stand in for what the
        user wrote, a tightening of the sandbox included."""
        read = getattr(config, "read_keys", None)
        unread = [k for k in keys if read is not None and k not in read]
        if unread:
            raise ConfigError(
                f"This configuration was loaded without the `{unread[0]}` setting (the "
                "indexer's load_config reads the indexer's keys only) — load it with "
                "cli.settings.load_config, which reads every layer's.")
