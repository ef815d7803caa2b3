"""Command line, environment and ini turned into one validated, frozen ``Settings``.

Each option is one ``Option`` record in ``OPTIONS``; that table alone declares its flag, its ini key and how its
text becomes a value (a parser from ``parsers``), so a new option is one entry, not three edits that can
disagree. Reading the options (``read_options``) and deciding the settings (``resolve_settings``) have no side
effects; the two steps with effects, registering the ``--fullgraph-pretrained`` checkpoints and reading the
``--fullgraph-shard-costs`` report, are separate functions that ``pytest_configure`` calls in between.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from pytest_fullgraph.check.scenarios import BASIC, longest_prompt
from pytest_fullgraph.levels.artifacts import RUNTIMES
from pytest_fullgraph.levels.base import Levels
from pytest_fullgraph.levels.builtin import builtin_levels
from pytest_fullgraph.models import Registry
from pytest_fullgraph.models.positions import selection_too_long
from pytest_fullgraph.models.pretrained import register_directories
from pytest_fullgraph.plugin.parsers import (
    DEVICE_TYPES,
    Choice,
    ProgressChoice,
    RuntimeChoice,
    parse_absolute_directory,
    parse_bool,
    parse_device,
    parse_directory,
    parse_new_tokens,
    parse_pretrained,
    parse_scenarios,
    parse_seconds,
    parse_shard,
    parse_text,
)
from pytest_fullgraph.plugin.settings import (
    ATTN_IMPLEMENTATIONS,
    BACKENDS,
    BREAK_MODES,
    DEFAULT_DEVICE,
    DEFAULT_MODELS,
    DEFAULT_TIMEOUT,
    DTYPES,
    FAST_BACKEND,
    FAST_MAX_NEW_TOKENS,
    MAX_NEW_TOKENS,
    PROGRESS_MODES,
    RUN_SLOW_ENV,
    SLOW_BACKEND,
    SLOW_MAX_NEW_TOKENS,
    SUITE_MODES,
    Settings,
)
from pytest_fullgraph.report.files import load as load_report
from pytest_fullgraph.report.schema import Report, ReportError
from pytest_fullgraph.report.shard import Shard, model_costs, select_shard

# --- the table --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One fullgraph option: its flag, its ini key (= ``dest``), and how its text becomes a value. ``default``: the
    value when neither the command line, ``env`` nor the ini sets it (``slow_default`` in the slow tier); ``field``:
    the ``Settings`` attribute it fills as is ("" when ``resolve_settings`` combines it with others); ``const``: the
    value of the flag given bare, for an option whose value may be left out."""

    dest: str
    flag: str
    help: str
    parse: Callable[[str, str], Any]
    metavar: str | None = None
    default: Any = None
    slow_default: Any = None
    field: str = ""
    action: str | None = None
    env: str | None = None
    const: str | None = None

    @property
    def ini_type(self) -> Literal["bool"] | None:
        return "bool" if self.action == "store_true" else None

    @property
    def ini_help(self) -> str:
        return f"Default for {self.flag}" + (f", below the {self.env} variable" if self.env else "")


OPTIONS: tuple[Option, ...] = (
    Option("fullgraph_models", "--fullgraph-models", metavar="NAMES", parse=parse_text, default=DEFAULT_MODELS,
           help="Comma list of models to check: registered names, 'all', 'popular', glob patterns (qwen*) and tags "
                "(tag:moe); python -m pytest_fullgraph models lists them "
                f"(default: {DEFAULT_MODELS}; ini: fullgraph_models)"),
    Option("fullgraph_pretrained", "--fullgraph-pretrained", metavar="NAME=DIR", parse=parse_pretrained, default={},
           help="Comma list of NAME=DIR: check the causal LM saved in each local directory (loaded with "
                "from_pretrained, offline) as model NAME, beside the models selected (without --fullgraph-models, "
                "only these; ini: fullgraph_pretrained)"),
    Option("fullgraph_scenarios", "--fullgraph-scenarios", metavar="NAMES", parse=parse_scenarios, field="scenarios",
           default=BASIC,
           help="Comma list of scenarios (generation features) every model runs: names, 'all', 'basic' and glob "
                "patterns (top_*); python -m pytest_fullgraph scenarios lists them "
                "(default: basic, i.e. greedy, sample, eos, padded; ini: fullgraph_scenarios)"),
    Option("fullgraph_levels", "--fullgraph-levels", metavar="NAMES", parse=parse_text, default="default",
           help="Comma list of levels every check runs at: names, 'all', 'default' (the tier's levels, without the "
                "opt-in ones such as hf_*) and glob patterns (default: default; ini: fullgraph_levels)"),
    Option("fullgraph_exclude", "--fullgraph-exclude", metavar="NAMES", parse=parse_text,
           help="Comma list of models to leave out of the selection, in the same forms (ini: fullgraph_exclude)"),
    Option("fullgraph_shard", "--fullgraph-shard", metavar="I/N", parse=parse_shard,
           help="Run only part I of N of the selected models (1 <= I <= N); N jobs with I = 1..N run every model "
                "once, e.g. one CI matrix job each (ini: fullgraph_shard)"),
    Option("fullgraph_shard_costs", "--fullgraph-shard-costs", metavar="REPORT.json", parse=parse_text,
           help="Balance the shards by each model's check time in this earlier report, instead of an even split "
                "by count (ini: fullgraph_shard_costs)"),
    Option("fullgraph_timeout", "--fullgraph-timeout", metavar="SECONDS", parse=parse_seconds, field="timeout",
           default=DEFAULT_TIMEOUT,
           help="A check running longer is stopped and recorded as an error; 0 turns the limit off "
                f"(default: {DEFAULT_TIMEOUT:g}; ini: fullgraph_timeout)"),
    Option("fullgraph_backend", "--fullgraph-backend", metavar="BACKEND", parse=Choice(BACKENDS, "a known backend"),
           field="backend", default=FAST_BACKEND, slow_default=SLOW_BACKEND,
           help=f"torch.compile backend, one of {', '.join(BACKENDS)} (default: {FAST_BACKEND}, {SLOW_BACKEND} with "
                "--run-slow; ini: fullgraph_backend)"),
    Option("fullgraph_max_new_tokens", "--fullgraph-max-new-tokens", metavar="N", parse=parse_new_tokens,
           field="max_new_tokens", default=FAST_MAX_NEW_TOKENS, slow_default=SLOW_MAX_NEW_TOKENS,
           help=f"Tokens to generate per check, up to {MAX_NEW_TOKENS} and to what fits after the scenarios' prompts "
                "in each selected model's positions (max_position_embeddings) (default: "
                f"{FAST_MAX_NEW_TOKENS}, {SLOW_MAX_NEW_TOKENS} with --run-slow; ini: fullgraph_max_new_tokens)"),
    Option("fullgraph_strict", "--fullgraph-strict", action="store_true", parse=parse_bool, field="strict",
           default=False,
           help="Fail checks that hit a graph break instead of marking them xfail (ini: fullgraph_strict)"),
    Option("fullgraph_run_slow", "--run-slow", action="store_true", parse=parse_bool, field="run_slow",
           default=False, env=RUN_SLOW_ENV,
           help=f"Run the slow tier: slow-marked tests, {SLOW_BACKEND} and longer generations (else env "
                f"{RUN_SLOW_ENV}, else ini: fullgraph_run_slow)"),
    Option("fullgraph_report", "--fullgraph-report", metavar="DIR", parse=parse_directory, field="report_dir",
           help="Write fullgraph-report.json, .md and .html into DIR (ini: fullgraph_report)"),
    Option("fullgraph_repro", "--fullgraph-repro", metavar="DIR", parse=parse_absolute_directory, field="repro_dir",
           help="When the run ends, write a script needing only torch and transformers per failing cause into DIR, "
                "shrunk and verified as python -m pytest_fullgraph repro does, 10-60 s each (ini: fullgraph_repro)"),
    Option("fullgraph_artifacts", "--fullgraph-artifacts", metavar="DIR", parse=parse_absolute_directory,
           field="artifacts_dir",
           help="Save each passing export check's program into DIR as <check id>.pt2 with its metadata, loadable "
                "with pytest_fullgraph.load_generate (ini: fullgraph_artifacts)"),
    Option("fullgraph_artifact_runtime", "--fullgraph-artifact-runtime", metavar="RUNTIME",
           parse=RuntimeChoice(RUNTIMES, "an artifact runtime"), field="artifact_runtime", default="pt2",
           help=f"How --fullgraph-artifacts saves programs: {', '.join(RUNTIMES)} (default: pt2; aoti builds an "
                "AOTInductor package, executorch an ExecuTorch program with XNNPACK (extra: executorch), tens of "
                "seconds each; ini: fullgraph_artifact_runtime)"),
    Option("fullgraph_cache_dir", "--fullgraph-cache-dir", metavar="DIR", parse=parse_absolute_directory,
           field="cache_dir",
           help="Keep inductor's compile caches in DIR, for this run's workers too, so a second run reuses them "
                "(default: TORCHINDUCTOR_CACHE_DIR, else inductor's temporary directory; ini: fullgraph_cache_dir)"),
    Option("fullgraph_baseline", "--fullgraph-baseline", metavar="FILE", parse=parse_text,
           help="Judge each check against its verdict in FILE (a report) as it finishes: worse fails naming the "
                "baseline's outcome, a failure FILE has is an xfail (ini: fullgraph_baseline, relative to the ini)"),
    Option("fullgraph_baseline_update", "--fullgraph-baseline-update", action="store_true", parse=parse_bool,
           default=False, help="Rewrite --fullgraph-baseline's FILE with this run's checks, keeping its others "
                               "(ini: fullgraph_baseline_update)"),
    Option("fullgraph_breaks", "--fullgraph-breaks", metavar="MODE", parse=Choice(BREAK_MODES, "a break mode"),
           field="breaks", default="auto",
           help="'all': a check that breaks runs once more without fullgraph to record every break; 'first': "
                "record only the first break, faster; 'auto' (default): 'all', but the fast tier's generate checks "
                "record their first break (ini: fullgraph_breaks)"),
    Option("fullgraph_dtype", "--fullgraph-dtype", metavar="DTYPES", parse=Choice(DTYPES, "a dtype", many=True),
           field="dtypes", default=("float32",),
           help=f"Comma list of dtypes to run every check in, of {', '.join(DTYPES)} (default: float32; "
                "ini: fullgraph_dtype)"),
    Option("fullgraph_device", "--fullgraph-device", metavar="DEVICE", parse=parse_device, field="device",
           default=DEFAULT_DEVICE,
           help=f"Where models and inputs live, a torch device available here: {', '.join(DEVICE_TYPES)}, "
                "optionally with an index (cuda:1); the cudagraphs levels need cuda "
                f"(default: {DEFAULT_DEVICE}; ini: fullgraph_device)"),
    Option("fullgraph_attn", "--fullgraph-attn", metavar="IMPLEMENTATION", field="attn_implementation",
           parse=Choice(ATTN_IMPLEMENTATIONS, "an attention implementation"),
           help=f"Set every model's attn_implementation to one of {', '.join(ATTN_IMPLEMENTATIONS)}; a model that "
                "cannot use it is a skip saying why (default: each model's own; ini: fullgraph_attn)"),
    Option("fullgraph_progress", "--fullgraph-progress", metavar="WHEN", field="progress", default="auto", const="on",
           parse=ProgressChoice(PROGRESS_MODES, "a progress mode"),
           help="After each finished test print how many are done and failed and the time left (checks weighted by "
                "the --fullgraph-shard-costs report if given): 'auto' (default) in a terminal outside CI (the CI "
                "variable) in runs with checks, 'on' (the bare flag) or 'off' (ini: fullgraph_progress)"),
    Option("fullgraph_suite", "--fullgraph-suite", metavar="MODE", parse=Choice(SUITE_MODES, "a suite mode"),
           field="suite", default="auto",
           help="When to collect the built-in conformance suite: 'auto' (default) when models are selected and "
                "no test paths are given, 'on' always, 'off' never, not through testpaths or a directory holding it "
                "either (ini: fullgraph_suite)"),
)
OPTION = {option.dest: option for option in OPTIONS}


def add_options(parser: pytest.Parser) -> None:
    """Declare every option of the table on the command line and in the ini file.

    The command line default is None, so "not given" is told apart from a value and the ini (or the
    environment) can supply it.
    """
    group = parser.getgroup("fullgraph", "fullgraph generate-compile conformance")
    for option in OPTIONS:
        shape: dict[str, Any] = {"action": option.action} if option.action else {"metavar": option.metavar}
        if option.const is not None:
            shape.update(nargs="?", const=option.const)
        group.addoption(option.flag, dest=option.dest, default=None, help=option.help, **shape)
        parser.addini(option.dest, option.ini_help, type=option.ini_type,
                      default=False if option.ini_type == "bool" else None)


# --- reading and resolving ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chosen:
    """An option's parsed value and where it was set; ``source`` is "" when the value is the default."""

    value: Any
    source: str = ""


def _raw(config: pytest.Config, option: Option) -> tuple[str | None, str]:
    """The option's text and its source: command line, then environment, then ini (as pytest-timeout does)."""
    cli = config.getoption(option.dest)
    if cli is not None:
        return str(cli), option.flag
    env_value = os.environ.get(option.env) if option.env else None
    if env_value is not None and env_value.strip():
        return env_value, f"environment variable {option.env}"
    ini_value = config.getini(option.dest)
    if ini_value:  # an empty or absent key, or a bool key left false, sets nothing
        return str(ini_value), f"ini {option.dest}"
    return None, ""


def _read(config: pytest.Config, option: Option, run_slow: bool) -> Chosen:
    """The option's parsed value; unset, its default (the slow tier's, where it has one)."""
    raw, source = _raw(config, option)
    if raw is not None:
        return Chosen(option.parse(raw, source), source)
    return Chosen(option.slow_default if run_slow and option.slow_default is not None else option.default)


def read_options(config: pytest.Config) -> dict[str, Chosen]:
    """Every option parsed, by ``dest``; a bad value is a ``pytest.UsageError`` naming where it was set.

    Reads only the command line, the environment and the ini, so every xdist worker reads the same.
    """
    run_slow = bool(_read(config, OPTION["fullgraph_run_slow"], run_slow=False).value)
    return {option.dest: _read(config, option, run_slow) for option in OPTIONS}


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
