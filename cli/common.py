"""Shared CLI plumbing: configuration from flags, error translation, JSON output, progress."""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import click

from agent.settings import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    ModelSettings,
)
from indexer import Config, DatabaseError, OperationalError, RepoctxError
from retrieval.settings import RetrievalSettings

from .settings import load_config

#: Where --trust-repo-config is remembered for the commands of one invocation: click's
#: ``ctx.meta`` is shared by a context and its children, and is new for every invocation.
_TRUST_KEY = "repoctx.trust_repo_config"


def _remember_trust(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[_TRUST_KEY] = True
    return value


def trust_option(f: Callable) -> Callable:
    """--trust-repo-config: accept the repository's config even where it loosens the sandbox
    (a global option of `repoctx`, and one of every command that loads the configuration)."""
    return click.option(
        "--trust-repo-config",
        is_flag=True,
        expose_value=False,
        callback=_remember_trust,
        help="Honour the repository's config where it loosens the sandbox or writes outside "
        "the repository (env REPOCTX_TRUST_REPO_CONFIG=1).",
    )(f)


def trusts_repo_config() -> bool:
    """Whether this invocation passed --trust-repo-config (REPOCTX_TRUST_REPO_CONFIG is read by
    load_config itself)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_TRUST_KEY))


def index_dir_option(f: Callable) -> Callable:
    """--index-dir, with --trust-repo-config: every command that loads the configuration has
    this option."""
    f = trust_option(f)
    return click.option(
        "--index-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Where the index lives (default <root>/.repoctx; env REPOCTX_INDEX_DIR).",
    )(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")(f)


def model_options(f: Callable) -> Callable:
    """--model-timeout, --connect-timeout, --model-retries and --model-tokenizer (see
    open_model and open_tokenizer)."""
    f = click.option(
        "--model-tokenizer",
        default=None,
        metavar="SPEC",
        help="How prompts are counted in the model's tokens: auto (the server's tokenize "
        "endpoint, else the model family's tokenizer, else --tokenizer's), server (its "
        "endpoint for every text), a tokenizer.json path, or a tokenizer name such as qwen3 or "
        "o200k*1.15 (config `model_tokenizer`, env REPOCTX_MODEL_TOKENIZER).",
    )(f)
    f = click.option(
        "--model-retries",
        type=click.IntRange(min=0, max=20),
        default=None,
        help="Retries of a failed model call (rate limit, server error, timeout), the adapter's "
        f"and the agent's together (default {DEFAULT_RETRIES}; config `model_retries`, env "
        "REPOCTX_MODEL_RETRIES).",
    )(f)
    f = click.option(
        "--connect-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help=f"Seconds to connect to the model server (default {DEFAULT_CONNECT_TIMEOUT_S:g}; config "
        "`model_connect_timeout_s`, env REPOCTX_MODEL_CONNECT_TIMEOUT_S).",
    )(f)
    f = click.option(
        "--model-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help="Seconds the model server may stay silent; a streamed reply is never cut while "
        f"tokens flow (default {DEFAULT_TIMEOUT_S:g}; config `model_timeout_s`, env "
        "REPOCTX_MODEL_TIMEOUT_S).",
    )(f)
    return f


def open_model(spec: str | None, settings: ModelSettings, context_tokens: int | None = None) -> Any:
    """The model client for ``spec``, streaming (a slow local model is timed by its silence,
    not by the length of its answer). ``context_tokens``: the context window to ask for
    where the server takes one per request (Ollama)."""
    from agent.models import create_model

    return create_model(
        spec,
        timeout=settings.timeout_s,
        connect_timeout=settings.connect_timeout_s,
        max_retries=settings.retries,
        stream=True,
        context_tokens=context_tokens,
    )


def open_tokenizer(model: Any, settings: ModelSettings, config: Config) -> Any:
    """How ``model``'s prompts are counted: asks the server for its tokenize endpoint once."""
    from agent.models import model_tokenizer

    return model_tokenizer(
        model,
        settings.tokenizer,
        fallback=RetrievalSettings.from_config(config).tokenizer,
        probe=True,
    )


def root_option(f: Callable) -> Callable:
    """--root/-C of every command that reads an index (see `config_for`)."""
    return click.option(
        "--root",
        "-C",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=".",
        help="Repository root (default: the nearest indexed directory at or above here).",
    )(f)


def find_root(start: Path) -> Path:
    """The nearest directory at or above ``start`` holding an index, else ``start``: read
    commands work from any subdirectory of an indexed repository."""
    here = start.resolve()
    for cand in (here, *here.parents):
        if (cand / ".repoctx" / "graph.db").exists():
            return cand
    return here


def config_for(root: Path, index_dir: Path | None) -> Config:
    """The configuration of the index that serves ``root``: the nearest indexed directory at or
    above it, unless an index directory is named (--index-dir or REPOCTX_INDEX_DIR)."""
    if index_dir is None and not os.environ.get("REPOCTX_INDEX_DIR"):
        root = find_root(root)
    return make_config(root, index_dir=index_dir)


#: Where the index of the configuration this invocation loaded last is remembered (in
#: ``ctx.meta``, like --trust-repo-config): named when SQLite reports a damaged file in the
#: middle of a query, where the error itself does not say which file, and when a disk fills.
_INDEX_DIR_KEY = "repoctx.index_dir"


def _index_dir() -> Path | None:
    """The index this invocation works on (None before it loaded a configuration)."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(_INDEX_DIR_KEY)


def make_config(root: Path | str, *, trust_repo: bool | None = None, **overrides: Any) -> Config:
    """load_config with this invocation's --trust-repo-config (``trust_repo``: decided already,
    for a reload made where the click context is not current)."""
    trust = trusts_repo_config() if trust_repo is None else trust_repo
    config = load_config(root, trust_repo=trust, **overrides)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[_INDEX_DIR_KEY] = config.index_path
    return config


def handle_errors(f: Callable) -> Callable:
    """Library errors become a clean message and exit status 1; so does a damaged index met in
    the middle of a query (one line naming the repair, not a traceback)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except RepoctxError as exc:
            full = _exhausted(exc)  # a disk filled up under a worker or a library's wrapper
            raise click.ClickException(full or str(exc)) from exc
        except DatabaseError as exc:
            from indexer import damaged, is_damage

            if is_damage(exc):
                raise click.ClickException(str(damaged(_index_dir(), exc))) from exc
            full = _exhausted(exc)
            if full is None:
                raise
            raise click.ClickException(full) from exc
        except (OSError, RuntimeError) as exc:  # RuntimeError: what Lance raises for IO
            full = _exhausted(exc)
            if full is None:
                raise
            raise click.ClickException(full) from exc

    return wrapper


#: errno -> what to say: the disk or quota is full, or the file system is read-only.
_EXHAUSTED = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded",
              errno.EROFS: "Read-only file system"}
#: The same, as Lance and SQLite word them (their errors carry no errno).
_EXHAUSTED_TEXT = re.compile(
    r"os error (28|122|30)\b|No space left on device|Disk quota exceeded|Read-only file system|"
    r"database or disk is full", re.IGNORECASE)


def _exhausted(exc: BaseException) -> str | None:
    """The one line for a write that failed because the disk (or quota) is full or the file
    system read-only, wherever in ``exc``'s chain it was met; None for any other error. It
    names the directory and what was kept: SQLite rolled the write back and a full rebuild's
    new generation is discarded, so the index answers as its last completed build left it."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        what = _EXHAUSTED.get(getattr(cause, "errno", None) or 0)
        if what is None and (m := _EXHAUSTED_TEXT.search(str(cause))):
            word = m.group(0).lower()
            what = ("Disk quota exceeded" if "122" in word or "quota" in word
                    else "Read-only file system" if word.endswith("30") or "read-only" in word
                    else "No space left on device")
        if what is not None:
            return f"{what} in {_where(cause)}: {_then()}"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, OperationalError) and _disk_is_full():
        # SQLite says "disk I/O error" (an OperationalError) when a reader cannot size its
        # shared-memory file
        return f"No space left on device in {_index_dir()}: {_then()}"
    return None


#: The commands that write the index: a full disk under them leaves it as its last completed
#: write did, and an index build finishes the work.
_INDEX_WRITERS = ("index build", "index verify", "index watch")


def _then() -> str:
    """What was kept and what to run: a command that writes the index says what it still holds."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and " ".join(ctx.command_path.split()[1:]) in _INDEX_WRITERS:
        return f"{_kept()}; free space and run `repoctx index build`."
    return "free space and run the command again."


def _disk_is_full() -> bool:
    index_dir = _index_dir()
    try:
        return index_dir is not None and os.statvfs(index_dir).f_bavail == 0
    except OSError:
        return False


def _where(exc: BaseException) -> str:
    """The directory a failed write was in: the one the error names, else where the command
    writes (a snapshot's ``--to``), else the index's."""
    name = getattr(exc, "filename", None)
    index_dir = _index_dir()
    if name and (index_dir is None or not str(name).startswith(str(index_dir))):
        return str(Path(name).parent)
    ctx = click.get_current_context(silent=True)
    target = ctx.params.get("to") if ctx is not None and not name else None
    if target:  # pyarrow's file systems name no file
        return str(target)
    return str(index_dir) if index_dir is not None else "the index"


def _kept() -> str:
    from indexer import graph_file, readable_meta

    index_dir = _index_dir()
    if index_dir is None or graph_file(index_dir) is None:
        return "nothing was indexed yet"
    try:
        gen = readable_meta(index_dir).get("generation")
    except (OSError, DatabaseError):
        gen = None
    at = f" (generation {gen})" if gen else ""
    return f"the index keeps what its last completed write left{at}"


def _default(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        # one level: json calls back for nested dataclasses (asdict deep-copies every value:
        # half the time of `refs --json` for 500 references)
        return {f.name: getattr(obj, f.name) for f in fields(obj)}
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def echo_json(data: Any) -> None:
    # json_safe: a name's DEL, C1, U+2028 or bidi control leaves as an escape, not raw
    from indexer import json_safe

    click.echo(json_safe(json.dumps(data, default=_default, indent=2, ensure_ascii=False)))


class ProgressLine:
    """A one-line progress report on stderr: done/total, rate and ETA. Redrawn in place on a
    terminal; written as occasional plain lines otherwise (logs stay readable)."""

    def __init__(self, quiet: bool = False, unit: str = "files") -> None:
        self.quiet = quiet
        self.unit = unit
        self.tty = sys.stderr.isatty()
        self.phase = ""
        self.t_phase = time.monotonic()
        self.t_last = 0.0
        self.dirty = False

    def __call__(self, event: Any) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if event.phase != self.phase:
            self.finish()
            self.phase, self.t_phase = event.phase, now
        interval = 0.1 if self.tty else 2.0
        if now - self.t_last < interval and event.done < event.total:
            return
        self.t_last = now
        elapsed = now - self.t_phase
        rate = event.done / elapsed if elapsed >= 0.2 else 0.0  # too soon for a rate to mean much
        eta = (event.total - event.done) / rate if rate > 0 else 0.0
        unit = {"parse": "files", "resolve": "refs", "embed": "chunks"}.get(event.phase, self.unit)
        line = f"{event.phase:8} {event.done:>8}/{event.total:<8} "
        if rate:
            line += f"{rate:8.0f} {unit}/s  ETA {eta:5.1f}s"
        if self.tty:
            sys.stderr.write("\r" + line)
            self.dirty = True
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.dirty:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.dirty = False
