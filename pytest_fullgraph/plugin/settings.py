"""The run's validated settings (``Settings``) and the values options take: what every module that reads the
settings needs, without the option table and its parsing (``options``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_fullgraph.check.scenarios import BASIC

if TYPE_CHECKING:
    from pytest_fullgraph.levels.base import Level

BACKENDS = ("eager", "aot_eager", "inductor")
#: Dtypes a model can be checked in; float64 is the reference that judges rounding, not a dtype under test.
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_MODELS = "llama,gemma"
#: Seconds one check may run; generous, since an inductor check of a large selection can take minutes.
DEFAULT_TIMEOUT = 900.0
FAST_BACKEND, SLOW_BACKEND = "aot_eager", "inductor"
FAST_MAX_NEW_TOKENS, SLOW_MAX_NEW_TOKENS = 4, 16
#: More new tokens than a check can generate (eagerly and compiled, token by token) in any time limit: refused
#: while parsing, before any model's own limit (its positions) is read.
MAX_NEW_TOKENS = 1_000_000
RUN_SLOW_ENV = "RUN_SLOW"
#: "auto" (the default): "all" in the slow tier; in the fast tier "all" for every level but those whose
#: ``Level.every_break_in_fast_tier`` is false (``generate``), which record their first break.
BREAK_MODES = ("auto", "all", "first")
#: ``attn_implementation`` values ``--fullgraph-attn`` takes (None: each model's own default, sdpa for most).
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")
DEFAULT_DEVICE = "cpu"
#: When the shipped conformance suite (``pytest_fullgraph.suite``) is collected: "auto" when models are
#: selected (command line or ini) and no test paths are given; "on" always; "off" never.
SUITE_MODES = ("auto", "on", "off")
#: When progress lines are written (``--fullgraph-progress``): "auto" in a terminal outside CI, in runs with checks
#: (``progress.wanted``); "on" always; "off" never.
PROGRESS_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class Settings:
    """Everything the checks need to know about this run; derived identically on every xdist worker."""

    models: tuple[str, ...]
    backend: str
    max_new_tokens: int
    run_slow: bool
    strict: bool
    report_dir: Path | None = None
    #: where the run's failing checks get their reproducers when it ends (``--fullgraph-repro``), or None
    repro_dir: Path | None = None
    #: "all": a failing check runs a diagnostic pass that records every break; "first": only the first;
    #: "auto": see ``BREAK_MODES``
    breaks: str = "auto"
    #: see ``SUITE_MODES``
    suite: str = "auto"
    #: whether models were chosen explicitly (command line or ini) rather than by default
    models_selected: bool = False
    #: the dtypes every check runs in (the dtype axis of the test ids)
    dtypes: tuple[str, ...] = ("float32",)
    #: seconds a check may run before it is stopped and recorded as an error; 0: no limit
    timeout: float = DEFAULT_TIMEOUT
    #: where passing export checks save their programs (``--fullgraph-artifacts``), or None
    artifacts_dir: Path | None = None
    #: how passing export checks' programs are saved (``artifacts.RUNTIMES``)
    artifact_runtime: str = "pt2"
    #: where inductor keeps its compile caches (``--fullgraph-cache-dir``); None: inductor's default
    cache_dir: Path | None = None
    #: this run's part of the selection (``--fullgraph-shard``), as "I/N"; None when unsharded
    shard: str | None = None
    #: where models and inputs live (``--fullgraph-device``): "cpu", "cuda", "cuda:1", ...
    device: str = DEFAULT_DEVICE
    #: the scenarios every model runs (``--fullgraph-scenarios``), in the scenario table's order
    scenarios: tuple[str, ...] = BASIC
    #: the attention implementation every model is set to (``--fullgraph-attn``); None: the model's default
    attn_implementation: str | None = None
    #: when to write a line after each finished test with the count and the time left (see ``PROGRESS_MODES``)
    progress: str = "auto"
    #: the levels every check runs at (``--fullgraph-levels``), in registration order; empty: the built-in default
    levels: tuple[str, ...] = ()

    def records_every_break(self, level: Level) -> bool:
        """Whether a breaking check of ``level`` gets the diagnostic pass that records every break."""
        if self.breaks == "auto":
            return self.run_slow or level.every_break_in_fast_tier
        return self.breaks == "all"

    def describe(self) -> dict[str, object]:
        """The settings a report records (JSON builtins)."""
        return {"models": list(self.models), "dtypes": list(self.dtypes), "backend": self.backend,
                "max_new_tokens": self.max_new_tokens, "run_slow": self.run_slow, "strict": self.strict,
                "breaks": self.breaks, "timeout": self.timeout, "shard": self.shard, "device": self.device,
                "scenarios_selected": list(self.scenarios), "attn_implementation": self.attn_implementation,
                "levels_selected": list(self.levels)}
