"""The run's validated settings (``Settings``), and the options read (``options.read_options``) turned into them.

Each field an option fills as is takes its default from that option's ``OPTIONS`` row (``OPTION_DEFAULT``): the
default is written once, beside the help that shows it. Deciding the settings (``resolve_settings``) has no side
effects; the two steps with effects, registering the ``--fullgraph-pretrained`` checkpoints and reading the
``--fullgraph-shard-costs`` report, are separate functions that ``pytest_configure`` calls before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fullgraph.check.scenarios import longest_prompt
from pytest_fullgraph.levels.base import Levels
from pytest_fullgraph.levels.builtin import builtin_levels
from pytest_fullgraph.models import Registry
from pytest_fullgraph.models.positions import selection_too_long
from pytest_fullgraph.models.pretrained import register_directories
from pytest_fullgraph.plugin.options import OPTION, OPTIONS, Chosen
from pytest_fullgraph.report.files import load as load_report
from pytest_fullgraph.report.schema import Report, ReportError
from pytest_fullgraph.report.shard import Shard, model_costs, select_shard

if TYPE_CHECKING:
    from pytest_fullgraph.levels.base import Level

#: The fields ``resolve_settings`` derives from several options (the selection), not filled by one option's row.
DERIVED_FIELDS = ("models", "models_selected", "shard", "levels")

#: Each field an option fills as is (its row's ``field``) to that row's default, which is the field's default:
#: written once, in the row, beside the help that shows it. A field no row fills is a KeyError when this loads.
OPTION_DEFAULT: dict[str, Any] = {option.field: option.default for option in OPTIONS if option.field}


@dataclass(frozen=True)
class Settings:
    """Everything the checks need to know about this run; derived identically on every xdist worker."""

    models: tuple[str, ...]
    backend: str = OPTION_DEFAULT["backend"]
    max_new_tokens: int = OPTION_DEFAULT["max_new_tokens"]
    run_slow: bool = OPTION_DEFAULT["run_slow"]
    strict: bool = OPTION_DEFAULT["strict"]
    report_dir: Path | None = OPTION_DEFAULT["report_dir"]
    #: where the run's failing checks get their reproducers when it ends (``--fullgraph-repro``), or None
    repro_dir: Path | None = OPTION_DEFAULT["repro_dir"]
    #: "all": a failing check runs a diagnostic pass that records every break; "first": only the first;
    #: "auto": see ``parsers.BREAK_MODES``
    breaks: str = OPTION_DEFAULT["breaks"]
    #: see ``parsers.SUITE_MODES``
    suite: str = OPTION_DEFAULT["suite"]
    #: "on": a passing check calls its compiled object again with its level's variations (``check.variations``)
    recompiles: str = OPTION_DEFAULT["recompiles"]
    #: whether models were chosen explicitly (command line or ini) rather than by default
    models_selected: bool = False
    #: the dtypes every check runs in (the dtype axis of the test ids)
    dtypes: tuple[str, ...] = OPTION_DEFAULT["dtypes"]
    #: seconds a check may run before it is stopped and recorded as an error; 0: no limit
    timeout: float = OPTION_DEFAULT["timeout"]
    #: where passing export checks save their programs (``--fullgraph-artifacts``), or None
    artifacts_dir: Path | None = OPTION_DEFAULT["artifacts_dir"]
    #: how passing export checks' programs are saved (``artifacts.RUNTIMES``)
    artifact_runtime: str = OPTION_DEFAULT["artifact_runtime"]
    #: where inductor keeps its compile caches (``--fullgraph-cache-dir``); None: inductor's default
    cache_dir: Path | None = OPTION_DEFAULT["cache_dir"]
    #: this run's part of the selection (``--fullgraph-shard``), as "I/N"; None when unsharded
    shard: str | None = None
    #: where models and inputs live (``--fullgraph-device``): "cpu", "cuda", "cuda:1", ...
    device: str = OPTION_DEFAULT["device"]
    #: the scenarios every model runs (``--fullgraph-scenarios``), in the scenario table's order
    scenarios: tuple[str, ...] = OPTION_DEFAULT["scenarios"]
    #: the attention implementation every model is set to (``--fullgraph-attn``); None: the model's default
    attn_implementation: str | None = OPTION_DEFAULT["attn_implementation"]
    #: when to write a line after each finished test with the count and the time left
    #: (``parsers.PROGRESS_MODES``)
    progress: str = OPTION_DEFAULT["progress"]
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
                "levels_selected": list(self.levels), "recompiles": self.recompiles}


def resolve_settings(chosen: Mapping[str, Chosen], registry: Registry, costs: Mapping[str, float] | None = None,
                     levels: Levels | None = None, keyword: str = "") -> Settings:
    """The run's settings from ``read_options``'s values; no side effects.

    ``registry`` already holds the ``--fullgraph-pretrained`` checkpoints and ``costs`` comes from
    ``read_shard_costs``: ``pytest_configure`` does both first, so the selection can name the checkpoints and
    every worker picks the same sorted models and shard.
    """
    models = select_models(chosen, registry)
    shard: Shard | None = chosen["fullgraph_shard"].value
    if shard is not None:
        try:
            models = select_shard(models, shard, costs)
        except ValueError as error:
            raise pytest.UsageError(f"{chosen['fullgraph_shard'].source}: {error}") from None
    given = {option.field: chosen[option.dest].value for option in OPTIONS if option.field}
    tokens = chosen["fullgraph_max_new_tokens"]
    # only a value that was set: the defaults fit every built-in model, and reading configs imports transformers
    too_long = tokens.source and selection_too_long(registry, models, longest_prompt(given["scenarios"]), tokens.value)
    if too_long:
        raise pytest.UsageError(f"{tokens.source}={tokens.value}: {too_long}")
    selected = bool(chosen["fullgraph_models"].source or chosen["fullgraph_pretrained"].value)
    return Settings(models=models, models_selected=selected, shard=shard.label if shard else None,
                    levels=select_levels(chosen, levels or builtin_levels(), keyword), **given)


def select_levels(chosen: Mapping[str, Chosen], levels: Levels, keyword: str = "") -> tuple[str, ...]:
    """The levels ``--fullgraph-levels`` selects among those registered, in registration order; without it, the
    default ones and the opt-in ones that ``-k`` (``keyword``) names."""
    option = chosen["fullgraph_levels"]
    run_slow = bool(chosen["fullgraph_run_slow"].value)
    if not option.source and keyword:
        named = set(levels.default(run_slow)) | set(levels.named_by_keyword(keyword))
        return tuple(name for name in levels if name in named)
    try:
        return levels.select(option.value, run_slow)
    except ValueError as error:
        raise pytest.UsageError(f"{option.source or OPTION['fullgraph_levels'].flag}: {error}") from None


def select_models(chosen: Mapping[str, Chosen], registry: Registry) -> tuple[str, ...]:
    """``--fullgraph-models`` less ``--fullgraph-exclude``, with every checkpoint, sorted; each error names the
    option (or ini key) it comes from. Checkpoints alone replace the default selection: the tiny defaults are not
    what was asked for."""
    models, exclude = chosen["fullgraph_models"], chosen["fullgraph_exclude"]
    pretrained = set(chosen["fullgraph_pretrained"].value)
    excluded = _resolve(registry, exclude) if (exclude.value or "").strip() else set()
    if not models.source and pretrained:
        return tuple(sorted(pretrained))
    selected = _resolve(registry, models)
    if not (selected - excluded) | pretrained:
        selector = models.source or OPTION["fullgraph_models"].flag
        raise pytest.UsageError(f"{exclude.source}={exclude.value!r} leaves none of the {len(selected)} model(s) "
                                f"selected by {selector}={models.value!r}; exclude fewer")
    return tuple(sorted((selected - excluded) | pretrained))


def _resolve(registry: Registry, option: Chosen) -> set[str]:
    try:
        return registry.resolve(option.value)
    except ValueError as error:
        raise pytest.UsageError(f"{option.source or OPTION['fullgraph_models'].flag}: {error}") from None


# --- the two steps with effects, which pytest_configure runs between reading and resolving ----------------------


def register_checkpoints(registry: Registry, chosen: Mapping[str, Chosen]) -> tuple[str, ...]:
    """Register each ``--fullgraph-pretrained`` directory (its config is read now) as a model; the names."""
    pretrained = chosen["fullgraph_pretrained"]
    try:
        return register_directories(registry, pretrained.value, pretrained.source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def read_shard_costs(chosen: Mapping[str, Chosen]) -> dict[str, float] | None:
    """Seconds per model from the ``--fullgraph-shard-costs`` report, used when the run is sharded; the report is
    read whenever it is named, so a file that cannot be read is a usage error, not ignored."""
    found = read_costs_report(chosen)
    return model_costs(found) if found is not None and chosen["fullgraph_shard"].value is not None else None


def read_costs_report(chosen: Mapping[str, Chosen]) -> Report | None:
    """The ``--fullgraph-shard-costs`` report (sharding and progress read it), None when not given."""
    costs = chosen["fullgraph_shard_costs"]
    if costs.value is None:
        return None
    try:
        return load_report(costs.value)
    except ReportError as error:
        raise pytest.UsageError(f"{costs.source}: {error}") from None
