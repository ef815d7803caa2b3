"""The fullgraph options: one ``Option`` row each in ``OPTIONS``, and reading them from the command line, the
environment and the ini file.

A row alone declares an option: its flag, its ini key, how its text becomes a value (a parser from ``parsers``),
its default and, for those that fill one as is, the ``Settings`` field it fills (``settings.Settings`` takes that
field's default from the row). Its help names its ini key and environment variable from the row, so a new option
is one entry, not edits that can disagree. Reading (``read_options``) has no side effects; ``settings`` turns what
was read into the run's ``Settings``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from pytest_fullgraph.check.scenarios import BASIC
from pytest_fullgraph.levels.artifacts import RUNTIMES
from pytest_fullgraph.plugin.parsers import (
    ATTN_IMPLEMENTATIONS,
    BACKENDS,
    BREAK_MODES,
    DEVICE_TYPES,
    DTYPES,
    MAX_NEW_TOKENS,
    PROGRESS_MODES,
    RECOMPILE_MODES,
    SUITE_MODES,
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

DEFAULT_MODELS = "llama,gemma"
#: Seconds one check may run; generous, since an inductor check of a large selection can take minutes.
DEFAULT_TIMEOUT = 900.0
FAST_BACKEND, SLOW_BACKEND = "aot_eager", "inductor"
FAST_MAX_NEW_TOKENS, SLOW_MAX_NEW_TOKENS = 4, 16
DEFAULT_DEVICE = "cpu"
RUN_SLOW_ENV = "RUN_SLOW"

# --- the table --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One fullgraph option: its flag, its ini key (= ``dest``), and how its text becomes a value. ``default``: the
    value when neither the command line, ``env`` nor the ini sets it (``slow_default`` in the slow tier); ``field``:
    the ``Settings`` attribute it fills as is, and whose default ``default`` is ("" when ``resolve_settings``
    combines it with others); ``const``: the value of the flag given bare, for an option whose value may be left
    out. ``help`` is the lead of the help text; ``note`` opens the parenthesis that ends it (the default, a
    condition), before the ini key, and ``ini_note`` follows the key."""

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
    note: str = ""
    ini_note: str = ""

    @property
    def ini_type(self) -> Literal["bool"] | None:
        return "bool" if self.action == "store_true" else None

    @property
    def ini_help(self) -> str:
        return f"Default for {self.flag}" + (f", below the {self.env} variable" if self.env else "")

    @property
    def help_text(self) -> str:
        """The help ``--help`` shows: where else the option is set comes from the row (its environment variable,
        then its ini key), so no help text can name a key the option does not read."""
        where = f"else env {self.env}, else ini: {self.dest}" if self.env else f"ini: {self.dest}"
        where += f", {self.ini_note}" if self.ini_note else ""
        return f"{self.help} ({self.note}; {where})" if self.note else f"{self.help} ({where})"


OPTIONS: tuple[Option, ...] = (
    Option("fullgraph_models", "--fullgraph-models", metavar="NAMES", parse=parse_text, default=DEFAULT_MODELS,
           help="Comma list of models to check: registered names, 'all', 'popular', glob patterns (qwen*) and tags "
                "(tag:moe); python -m pytest_fullgraph models lists them", note=f"default: {DEFAULT_MODELS}"),
    Option("fullgraph_pretrained", "--fullgraph-pretrained", metavar="NAME=DIR", parse=parse_pretrained, default={},
           help="Comma list of NAME=DIR: check the causal LM saved in each local directory (loaded with "
                "from_pretrained, offline) as model NAME, beside the models selected",
           note="without --fullgraph-models, only these"),
    Option("fullgraph_scenarios", "--fullgraph-scenarios", metavar="NAMES", parse=parse_scenarios, field="scenarios",
           default=BASIC,
           help="Comma list of scenarios (generation features) every model runs: names, 'all', 'basic' and glob "
                "patterns (top_*); python -m pytest_fullgraph scenarios lists them",
           note="default: basic, i.e. greedy, sample, eos, padded"),
    Option("fullgraph_levels", "--fullgraph-levels", metavar="NAMES", parse=parse_text, default="default",
           help="Comma list of levels every check runs at: names, 'all', 'default' (the tier's levels, without the "
                "opt-in ones such as hf_*) and glob patterns", note="default: default"),
    Option("fullgraph_exclude", "--fullgraph-exclude", metavar="NAMES", parse=parse_text,
           help="Comma list of models to leave out of the selection, in the same forms"),
    Option("fullgraph_shard", "--fullgraph-shard", metavar="I/N", parse=parse_shard,
           help="Run only part I of N of the selected models (1 <= I <= N); N jobs with I = 1..N run every model "
                "once, e.g. one CI matrix job each"),
    Option("fullgraph_shard_costs", "--fullgraph-shard-costs", metavar="REPORT.json", parse=parse_text,
           help="Balance the shards by each model's check time in this earlier report, instead of an even split "
                "by count"),
    Option("fullgraph_timeout", "--fullgraph-timeout", metavar="SECONDS", parse=parse_seconds, field="timeout",
           default=DEFAULT_TIMEOUT, note=f"default: {DEFAULT_TIMEOUT:g}",
           help="A check running longer is stopped and recorded as an error; 0 turns the limit off"),
    Option("fullgraph_backend", "--fullgraph-backend", metavar="BACKEND", parse=Choice(BACKENDS, "a known backend"),
           field="backend", default=FAST_BACKEND, slow_default=SLOW_BACKEND,
           help=f"torch.compile backend, one of {', '.join(BACKENDS)}",
           note=f"default: {FAST_BACKEND}, {SLOW_BACKEND} with --run-slow"),
    Option("fullgraph_max_new_tokens", "--fullgraph-max-new-tokens", metavar="N", parse=parse_new_tokens,
           field="max_new_tokens", default=FAST_MAX_NEW_TOKENS, slow_default=SLOW_MAX_NEW_TOKENS,
           help=f"Tokens to generate per check, up to {MAX_NEW_TOKENS} and to what fits after the scenarios' prompts "
                "in each selected model's positions (max_position_embeddings)",
           note=f"default: {FAST_MAX_NEW_TOKENS}, {SLOW_MAX_NEW_TOKENS} with --run-slow"),
    Option("fullgraph_strict", "--fullgraph-strict", action="store_true", parse=parse_bool, field="strict",
           default=False, help="Fail checks that hit a graph break instead of marking them xfail"),
    Option("fullgraph_run_slow", "--run-slow", action="store_true", parse=parse_bool, field="run_slow",
           default=False, env=RUN_SLOW_ENV,
           help=f"Run the slow tier: slow-marked tests, {SLOW_BACKEND} and longer generations"),
    Option("fullgraph_report", "--fullgraph-report", metavar="DIR", parse=parse_directory, field="report_dir",
           help="Write fullgraph-report.json, .md and .html into DIR"),
    Option("fullgraph_repro", "--fullgraph-repro", metavar="DIR", parse=parse_absolute_directory, field="repro_dir",
           help="When the run ends, write a script needing only torch and transformers per failing cause into DIR, "
                "shrunk and verified as python -m pytest_fullgraph repro does, 10-60 s each"),
    Option("fullgraph_artifacts", "--fullgraph-artifacts", metavar="DIR", parse=parse_absolute_directory,
           field="artifacts_dir",
           help="Save each passing export check's program into DIR as <check id>.pt2 with its metadata, loadable "
                "with pytest_fullgraph.load_generate"),
    Option("fullgraph_artifact_runtime", "--fullgraph-artifact-runtime", metavar="RUNTIME",
           parse=RuntimeChoice(RUNTIMES, "an artifact runtime"), field="artifact_runtime", default="pt2",
           help=f"How --fullgraph-artifacts saves programs: {', '.join(RUNTIMES)}",
           note="default: pt2; aoti builds an AOTInductor package, executorch an ExecuTorch program with XNNPACK "
                "(extra: executorch), tens of seconds each"),
    Option("fullgraph_cache_dir", "--fullgraph-cache-dir", metavar="DIR", parse=parse_absolute_directory,
           field="cache_dir",
           help="Keep inductor's compile caches in DIR, for this run's workers too, so a second run reuses them",
           note="default: TORCHINDUCTOR_CACHE_DIR, else inductor's temporary directory"),
    Option("fullgraph_baseline", "--fullgraph-baseline", metavar="FILE", parse=parse_text,
           help="Judge each check against its verdict in FILE (a report) as it finishes: worse fails naming the "
                "baseline's outcome, a failure FILE has is an xfail", ini_note="relative to the ini"),
    Option("fullgraph_baseline_update", "--fullgraph-baseline-update", action="store_true", parse=parse_bool,
           default=False, help="Rewrite --fullgraph-baseline's FILE with this run's checks, keeping its others"),
    Option("fullgraph_breaks", "--fullgraph-breaks", metavar="MODE", parse=Choice(BREAK_MODES, "a break mode"),
           field="breaks", default="auto",
           help="'all': a check that breaks runs once more without fullgraph to record every break; 'first': "
                "record only the first break, faster; 'auto' (default): 'all', but the fast tier's generate checks "
                "record their first break"),
    Option("fullgraph_recompiles", "--fullgraph-recompiles", metavar="MODE",
           parse=Choice(RECOMPILE_MODES, "a recompiles mode"), field="recompiles", default="on",
           help="'on' (default): a passing check calls its compiled object again (other prompt tokens, prompt length, "
                "batch size, settings) and records whether each call recompiled and which guard failed; a recompile "
                "its level promises not to make fails the check; 'off' makes one call"),
    Option("fullgraph_dtype", "--fullgraph-dtype", metavar="DTYPES", parse=Choice(DTYPES, "a dtype", many=True),
           field="dtypes", default=("float32",), note="default: float32",
           help=f"Comma list of dtypes to run every check in, of {', '.join(DTYPES)}"),
    Option("fullgraph_device", "--fullgraph-device", metavar="DEVICE", parse=parse_device, field="device",
           default=DEFAULT_DEVICE, note=f"default: {DEFAULT_DEVICE}",
           help=f"Where models and inputs live, a torch device available here: {', '.join(DEVICE_TYPES)}, "
                "optionally with an index (cuda:1); the cudagraphs levels need cuda"),
    Option("fullgraph_attn", "--fullgraph-attn", metavar="IMPLEMENTATION", field="attn_implementation",
           parse=Choice(ATTN_IMPLEMENTATIONS, "an attention implementation"), note="default: each model's own",
           help=f"Set every model's attn_implementation to one of {', '.join(ATTN_IMPLEMENTATIONS)}; a model that "
                "cannot use it is a skip saying why"),
    Option("fullgraph_progress", "--fullgraph-progress", metavar="WHEN", field="progress", default="auto", const="on",
           parse=ProgressChoice(PROGRESS_MODES, "a progress mode"),
           help="After each finished test print how many are done and failed and the time left (checks weighted by "
                "the --fullgraph-shard-costs report if given): 'auto' (default) in a terminal outside CI (the CI "
                "variable) in runs with checks, 'on' (the bare flag) or 'off'"),
    Option("fullgraph_suite", "--fullgraph-suite", metavar="MODE", parse=Choice(SUITE_MODES, "a suite mode"),
           field="suite", default="auto",
           help="When to collect the built-in conformance suite: 'auto' (default) when models are selected and "
                "no test paths are given, 'on' always, 'off' never, not through testpaths or a directory holding it "
                "either"),
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
        group.addoption(option.flag, dest=option.dest, default=None, help=option.help_text, **shape)
        parser.addini(option.dest, option.ini_help, type=option.ini_type,
                      default=False if option.ini_type == "bool" else None)


# --- reading ----------------------------------------------------------------------------------------------------


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
