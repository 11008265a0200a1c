"""Which strategy drives a run: the `loop` (plan, then tool calls step by step — for models
that call tools well) or the `pipeline` (localize with the index, one small prompt, edits as
SEARCH/REPLACE text, tests, bounded retries — for small models; agent/pipeline.py).

`auto` picks by what is known of the model: a per-model default measured on the benchmark's
tasks (MEASURED), else its size in the name, else its context window; the choice and why go
into the trace (a `notice` of kind `strategy`) and the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import replace as dc_replace

from indexer import Config

from .errors import AgentError
from .models.base import ModelClient
from .run_result import RunOptions, RunReport
from .settings import AgentSettings
from .tools import ToolRegistry
from .trace import read_trace, resolve_run, trace_path

STRATEGIES = ("auto", "loop", "pipeline")

#: Per-model defaults, measured with benchmarks/agent_e2e.py on its bug-fix and add-a-parameter
#: tasks (llama.cpp, 2 cores; see docs/agent.md "The pipeline"): (name pattern, strategy, why).
MEASURED: tuple[tuple[str, str, str], ...] = (
    (
        r"qwen2\.5-coder[-:_]?1\.5b",
        "pipeline",
        "measured: Qwen2.5-Coder-1.5B changed no file in 6 loop runs (issue 39); the pipeline "
        "solved the bug-fix task in 3 of 4 live runs",
    ),
    (
        r"qwen2\.5-coder[-:_]?0\.5b",
        "pipeline",
        "a smaller model of the same family as Qwen2.5-Coder-1.5B (measured for the pipeline)",
    ),
)
#: Models up to this many billion parameters (read from the name: `-1.5b`, `:3b`) get the
#: pipeline: the issue's runs saw small models plan and call tools without editing.
SMALL_B = 4.0
#: Context windows below this get the pipeline: the loop's fixed prompt (system prompt and
#: 14 tool schemas) alone is ~3.7k tokens, and a step needs room for code and history.
SMALL_WINDOW = 8192
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*b(?![a-z])", re.I)


@dataclass(frozen=True)
class Choice:
    strategy: str  # loop | pipeline
    setting: str  # what was asked: auto | loop | pipeline
    why: str


def model_size_b(name: str) -> float | None:
    """Billions of parameters as the model's name says (`qwen2.5-coder:1.5b` -> 1.5)."""
    sizes = [float(m) for m in _SIZE.findall(name.partition(":")[2] or name)]
    sizes += [float(m) for m in _SIZE.findall(name)] if not sizes else []
    return min(sizes) if sizes else None


def choose(setting: str, model_name: str, context_window: int | None = None) -> Choice:
    """The strategy for ``setting`` (auto | loop | pipeline) and a model called ``model_name``
    with ``context_window`` tokens (None: unknown)."""
    if setting not in STRATEGIES:
        raise AgentError(f"Unknown strategy {setting!r} — use one of {', '.join(STRATEGIES)}.")
    if setting != "auto":
        return Choice(setting, setting, f"{setting} asked for")
    for pattern, strategy, why in MEASURED:
        if re.search(pattern, model_name, re.I):
            return Choice(strategy, setting, why)
    if context_window is not None and context_window < SMALL_WINDOW:
        return Choice(
            "pipeline", setting, f"a {context_window:,}-token context window (< {SMALL_WINDOW:,})"
        )
    size = model_size_b(model_name)
    if size is not None and size <= SMALL_B:
        return Choice("pipeline", setting, f"a small model ({size:g}B parameters by its name)")
    known = f"a {context_window:,}-token window" if context_window else "no small-model sign"
    return Choice("loop", setting, f"{known}: the tool-calling loop")


def configured(config: Config, flag: str | None) -> str:
    """The strategy setting: the flag, else `agent.strategy` in .repoctx.toml, else auto."""
    value = flag or AgentSettings.from_config(config).strategy
    return str(value)


def context_window(config: Config) -> int | None:
    """The model's context window when the configuration states it (`agent.context_window`)."""
    return AgentSettings.from_config(config).context_window or None  # an int the table checked


def resumed(config: Config, run_ref: str) -> str:
    """The strategy a run was started with (its trace's `strategy` notice; loop before it)."""
    run_id = resolve_run(config.index_path, run_ref)
    for e in read_trace(trace_path(config.index_path, run_id)):
        if e["type"] == "notice" and e.get("kind") == "strategy":
            return str(e.get("strategy") or "loop")
    return "loop"


def run_task(
    config: Config,
    task: str,
    model: ModelClient,
    options: RunOptions | None = None,
    registry: ToolRegistry | None = None,
    *,
    setting: str | None = None,
) -> RunReport:
    """Run ``task`` with the strategy ``setting`` names (else ``options.strategy``, else the
    configuration's `agent.strategy`, else auto); a resumed run keeps the strategy it began
    with. The report says which ran and why."""
    from .loop import run_agent
    from .pipeline import run_pipeline

    options = options or RunOptions()
    if options.resume:
        which = resumed(config, options.resume)
        choice = Choice(which, which, f"{which}: the strategy the run began with")
    else:
        asked = setting or options.strategy or configured(config, None)
        choice = choose(asked, model.name, context_window(config))
    options = dc_replace(options, strategy=choice.strategy, strategy_why=choice.why)
    run = run_pipeline if choice.strategy == "pipeline" else run_agent
    report = run(config, task, model, options, registry)
    return dc_replace(report, strategy=choice.strategy, strategy_why=choice.why)
