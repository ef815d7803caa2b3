"""Command line, environment and ini turned into one validated, frozen ``Settings``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_fullgraph.artifacts import RUNTIMES
from pytest_fullgraph.models import Registry
from pytest_fullgraph.models.pretrained import register_pretrained
from pytest_fullgraph.report.schema import ReportError
from pytest_fullgraph.report.schema import load as load_report
from pytest_fullgraph.scenarios import BASIC, select_scenarios
from pytest_fullgraph.shard import Shard, model_costs, parse_shard, select_shard

BACKENDS = ("eager", "aot_eager", "inductor")
#: Dtypes a model can be checked in; float64 is the reference that judges rounding, not a dtype under test.
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_MODELS = "llama,gemma"
#: Seconds one check may run; generous, since an inductor check of a large selection can take minutes.
DEFAULT_TIMEOUT = 900.0
FAST_BACKEND, SLOW_BACKEND = "aot_eager", "inductor"
FAST_MAX_NEW_TOKENS, SLOW_MAX_NEW_TOKENS = 4, 16
RUN_SLOW_ENV = "RUN_SLOW"
BREAK_MODES = ("all", "first")
#: ``attn_implementation`` values ``--fullgraph-attn`` takes (None: each model's own default, sdpa for most).
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")
#: Device types ``--fullgraph-device`` takes; others (mps, xpu) are untested here and refused by name.
DEVICE_TYPES = ("cpu", "cuda")
DEFAULT_DEVICE = "cpu"
#: When the shipped conformance suite (``pytest_fullgraph.suite``) is collected: "auto" when models are
#: selected (command line or ini) and no test paths are given; "on" always; "off" never.
SUITE_MODES = ("auto", "on", "off")

_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


@dataclass(frozen=True)
class Settings:
    """Everything the checks need to know about this run; derived identically on every xdist worker."""

    models: tuple[str, ...]
    backend: str
    max_new_tokens: int
    run_slow: bool
    strict: bool
    report_dir: Path | None = None
    #: "all": a failing check runs a diagnostic pass that records every break; "first": only the first
    breaks: str = "all"
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

    def describe(self) -> dict[str, object]:
        """The settings a report records (JSON builtins)."""
        return {"models": list(self.models), "dtypes": list(self.dtypes), "backend": self.backend,
                "max_new_tokens": self.max_new_tokens, "run_slow": self.run_slow, "strict": self.strict,
                "breaks": self.breaks, "timeout": self.timeout, "shard": self.shard, "device": self.device,
                "scenarios_selected": list(self.scenarios), "attn_implementation": self.attn_implementation}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("fullgraph", "fullgraph generate-compile conformance")
    group.addoption("--fullgraph-models", dest="fullgraph_models", metavar="NAMES", default=None,
                    help="Comma list of models to check: registered names, 'all', 'popular', glob patterns "
                         "(qwen*) and tags (tag:moe); python -m pytest_fullgraph models lists them "
                         f"(default: {DEFAULT_MODELS}; ini: fullgraph_models)")
    group.addoption("--fullgraph-pretrained", dest="fullgraph_pretrained", metavar="NAME=DIR", default=None,
                    help="Comma list of NAME=DIR: check the causal LM saved in each local directory (loaded with "
                         "from_pretrained, offline) as model NAME, beside the models selected (without "
                         "--fullgraph-models, only these; ini: fullgraph_pretrained)")
    group.addoption("--fullgraph-scenarios", dest="fullgraph_scenarios", metavar="NAMES", default=None,
                    help="Comma list of scenarios (generation features) every model runs: names, 'all', 'basic' "
                         "and glob patterns (top_*); python -m pytest_fullgraph scenarios lists them "
                         "(default: basic, i.e. greedy, sample, eos, padded; ini: fullgraph_scenarios)")
    group.addoption("--fullgraph-exclude", dest="fullgraph_exclude", metavar="NAMES", default=None,
                    help="Comma list of models to leave out of the selection, in the same forms "
                         "(ini: fullgraph_exclude)")
    group.addoption("--fullgraph-shard", dest="fullgraph_shard", metavar="I/N", default=None,
                    help="Run only part I of N of the selected models (1 <= I <= N); N jobs with I = 1..N run "
                         "every model once, e.g. one CI matrix job each (ini: fullgraph_shard)")
    group.addoption("--fullgraph-shard-costs", dest="fullgraph_shard_costs", metavar="REPORT.json", default=None,
                    help="Balance the shards by each model's check time in this earlier report, instead of "
                         "an even split by count (ini: fullgraph_shard_costs)")
    group.addoption("--fullgraph-timeout", dest="fullgraph_timeout", metavar="SECONDS", default=None,
                    help="A check running longer is stopped and recorded as an error; 0 turns the limit off "
                         f"(default: {DEFAULT_TIMEOUT:g}; ini: fullgraph_timeout)")
    group.addoption("--fullgraph-backend", dest="fullgraph_backend", metavar="BACKEND", default=None,
                    help=f"torch.compile backend, one of {', '.join(BACKENDS)} (default: {FAST_BACKEND}, "
                         f"{SLOW_BACKEND} with --run-slow; ini: fullgraph_backend)")
    group.addoption("--fullgraph-max-new-tokens", dest="fullgraph_max_new_tokens", metavar="N", default=None,
                    help=f"Tokens to generate per check, a positive integer (default: {FAST_MAX_NEW_TOKENS}, "
                         f"{SLOW_MAX_NEW_TOKENS} with --run-slow; ini: fullgraph_max_new_tokens)")
    group.addoption("--fullgraph-strict", dest="fullgraph_strict", action="store_true", default=None,
                    help="Fail checks that hit a graph break instead of marking them xfail "
                         "(ini: fullgraph_strict)")
    group.addoption("--run-slow", dest="fullgraph_run_slow", action="store_true", default=None,
                    help=f"Run the slow tier: slow-marked tests, {SLOW_BACKEND} and longer generations "
                         f"(else env {RUN_SLOW_ENV}, else ini: fullgraph_run_slow)")
    group.addoption("--fullgraph-report", dest="fullgraph_report", metavar="DIR", default=None,
                    help="Write fullgraph-report.json and fullgraph-report.md into DIR (ini: fullgraph_report)")
    group.addoption("--fullgraph-artifacts", dest="fullgraph_artifacts", metavar="DIR", default=None,
                    help="Save each passing export check's program into DIR as <check id>.pt2 with its metadata, "
                         "loadable with pytest_fullgraph.load_generate (ini: fullgraph_artifacts)")
    group.addoption("--fullgraph-artifact-runtime", dest="fullgraph_artifact_runtime", metavar="RUNTIME",
                    default=None,
                    help=f"How --fullgraph-artifacts saves programs: {', '.join(RUNTIMES)} (default: pt2; aoti builds "
                         "an AOTInductor package per program, tens of seconds each; ini: fullgraph_artifact_runtime)")
    group.addoption("--fullgraph-cache-dir", dest="fullgraph_cache_dir", metavar="DIR", default=None,
                    help="Keep inductor's compile caches (FX graphs, kernels) in DIR, for this run's workers too, so "
                         "a second run reuses them (default: TORCHINDUCTOR_CACHE_DIR, else inductor's own temporary "
                         "directory; ini: fullgraph_cache_dir)")
    group.addoption("--fullgraph-breaks", dest="fullgraph_breaks", metavar="MODE", default=None,
                    help="'all': a check that breaks runs once more without fullgraph to record every break "
                         "(default); 'first': record only the first break, faster (ini: fullgraph_breaks)")
    group.addoption("--fullgraph-dtype", dest="fullgraph_dtype", metavar="DTYPES", default=None,
                    help=f"Comma list of dtypes to run every check in, of {', '.join(DTYPES)} (default: float32; "
                         "ini: fullgraph_dtype)")
    group.addoption("--fullgraph-device", dest="fullgraph_device", metavar="DEVICE", default=None,
                    help=f"Where models and inputs live, a torch device available here: {', '.join(DEVICE_TYPES)}, "
                         "optionally with an index (cuda:1); the cudagraphs levels need cuda "
                         f"(default: {DEFAULT_DEVICE}; ini: fullgraph_device)")
    group.addoption("--fullgraph-attn", dest="fullgraph_attn", metavar="IMPLEMENTATION", default=None,
                    help=f"Set every model's attn_implementation to one of {', '.join(ATTN_IMPLEMENTATIONS)}; a model "
                         "that cannot use it is a skip saying why (default: each model's own; ini: fullgraph_attn)")
    group.addoption("--fullgraph-suite", dest="fullgraph_suite", metavar="MODE", default=None,
                    help="When to collect the built-in conformance suite: 'auto' (default) when models are "
                         "selected and no test paths are given, 'on' always, 'off' never (ini: fullgraph_suite)")
    parser.addini("fullgraph_models", "Default for --fullgraph-models", default=None)
    parser.addini("fullgraph_pretrained", "Default for --fullgraph-pretrained", default=None)
    parser.addini("fullgraph_exclude", "Default for --fullgraph-exclude", default=None)
    parser.addini("fullgraph_scenarios", "Default for --fullgraph-scenarios", default=None)
    parser.addini("fullgraph_shard", "Default for --fullgraph-shard", default=None)
    parser.addini("fullgraph_shard_costs", "Default for --fullgraph-shard-costs", default=None)
    parser.addini("fullgraph_timeout", "Default for --fullgraph-timeout", default=None)
    parser.addini("fullgraph_suite", "Default for --fullgraph-suite", default=None)
    parser.addini("fullgraph_dtype", "Default for --fullgraph-dtype", default=None)
    parser.addini("fullgraph_device", "Default for --fullgraph-device", default=None)
    parser.addini("fullgraph_attn", "Default for --fullgraph-attn", default=None)
    parser.addini("fullgraph_backend", "Default for --fullgraph-backend", default=None)
    parser.addini("fullgraph_max_new_tokens", "Default for --fullgraph-max-new-tokens", default=None)
    parser.addini("fullgraph_artifact_runtime", "Default for --fullgraph-artifact-runtime", default=None)
    parser.addini("fullgraph_cache_dir", "Default for --fullgraph-cache-dir", default=None)
    parser.addini("fullgraph_breaks", "Default for --fullgraph-breaks", default=None)
    parser.addini("fullgraph_report", "Default for --fullgraph-report", default=None)
    parser.addini("fullgraph_artifacts", "Default for --fullgraph-artifacts", default=None)
    parser.addini("fullgraph_strict", "Default for --fullgraph-strict", type="bool", default=False)
    parser.addini("fullgraph_run_slow", "Default for --run-slow, below the RUN_SLOW variable",
                  type="bool", default=False)


def parse_bool(value: str, source: str) -> bool:
    """Parse like transformers' RUN_SLOW (strtobool): yes/no, true/false, on/off, 1/0, y/n, t/f, any case."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise pytest.UsageError(f"{source}={value!r} is not a boolean; use one of {', '.join(_TRUE + _FALSE)} "
                            "(any case)")


def parse_positive_int(value: str, source: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise pytest.UsageError(f"{source}={value!r} is not a positive integer")
    return number


def parse_seconds(value: str, source: str) -> float:
    """A non-negative number of seconds (0: no limit)."""
    try:
        seconds = float(str(value).strip())
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):  # also rejects nan
        raise pytest.UsageError(f"{source}={value!r} is not a number of seconds; use a number >= 0 (0: no limit)")
    return seconds


def parse_choice(value: str, source: str, choices: tuple[str, ...], what: str) -> str:
    chosen = value.strip()
    if chosen not in choices:
        raise pytest.UsageError(f"{source}={value!r} is not {what}; use one of {', '.join(choices)}")
    return chosen


def parse_choices(value: str, source: str, choices: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A comma list of choices, in the order given, duplicates dropped; every bad entry is named."""
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    bad = [part for part in chosen if part not in choices]
    if bad or not chosen:
        raise pytest.UsageError(f"{source}={value!r}: {', '.join(map(repr, bad)) or 'nothing'} is not {what}; "
                                f"use a comma list of {', '.join(choices)}")
    return tuple(dict.fromkeys(chosen))


def parse_device(value: str, source: str) -> str:
    """A torch device of a type in ``DEVICE_TYPES`` that this machine has, as torch spells it ("cuda:1")."""
    import torch

    text = value.strip()
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in DEVICE_TYPES:
        raise pytest.UsageError(f"{source}={value!r} is not a device; use one of {', '.join(DEVICE_TYPES)}, "
                                "optionally with an index (cuda:1)")
    if device.type != "cpu":
        backend = getattr(torch, device.type)
        if not backend.is_available():
            raise pytest.UsageError(f"{source}={value!r}: torch.{device.type}.is_available() is False on this "
                                    f"machine (torch {torch.__version__}); use cpu")
        if device.index is not None and device.index >= backend.device_count():
            raise pytest.UsageError(f"{source}={value!r}: this machine has {backend.device_count()} "
                                    f"{device.type} device(s), indices 0..{backend.device_count() - 1}")
    return str(device)


def _pick(config: pytest.Config, name: str) -> tuple[str | None, str]:
    """Value and its source, command line first, then ini; ``None`` when neither is set.

    Every option's ``dest`` equals its ini key, so one name finds both.
    """
    cli = config.getoption(name)
    if cli is not None:
        return str(cli), f"--{name.replace('_', '-')}"
    ini_value = config.getini(name)
    if ini_value not in (None, "", []):
        return str(ini_value), f"ini {name}"
    return None, ""


def resolve_run_slow(config: pytest.Config) -> bool:
    """CLI > environment > ini, as pytest-timeout resolves its settings."""
    if config.getoption("fullgraph_run_slow"):
        return True
    env_value = os.environ.get(RUN_SLOW_ENV)
    if env_value is not None and env_value.strip() != "":
        return parse_bool(env_value, f"environment variable {RUN_SLOW_ENV}")
    return bool(config.getini("fullgraph_run_slow"))


def resolve_settings(config: pytest.Config, registry: Registry) -> Settings:
    """Validate every fullgraph option; any bad value is a ``pytest.UsageError`` naming it."""
    run_slow = resolve_run_slow(config)

    pretrained_value, pretrained_source = _pick(config, "fullgraph_pretrained")
    pretrained: tuple[str, ...] = ()
    if pretrained_value is not None:
        try:
            pretrained = register_pretrained(registry, pretrained_value, pretrained_source)
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None
    models_value, models_source = _pick(config, "fullgraph_models")
    exclude_value, exclude_source = _pick(config, "fullgraph_exclude")
    if exclude_value is not None:
        try:
            registry.select(exclude_value)  # its bad entries are named with its own source
        except ValueError as error:
            raise pytest.UsageError(f"{exclude_source}: {error}") from None
    try:
        if models_value is None and pretrained:
            models = pretrained  # checkpoints alone: the tiny defaults are not what was asked for
        else:
            models = registry.select(models_value if models_value is not None else DEFAULT_MODELS,
                                     exclude_value or "")
    except ValueError as error:
        raise pytest.UsageError(f"{models_source or '--fullgraph-models'}: {error}") from None
    models = tuple(sorted(set(models) | set(pretrained)))

    shard, shard_source = resolve_shard(config)
    if shard is not None:
        try:
            models = select_shard(models, shard, resolve_shard_costs(config))
        except ValueError as error:
            raise pytest.UsageError(f"{shard_source}: {error}") from None

    backend_value, backend_source = _pick(config, "fullgraph_backend")
    if backend_value is None:
        backend = SLOW_BACKEND if run_slow else FAST_BACKEND
    else:
        backend = parse_choice(backend_value, backend_source, BACKENDS, "a known backend")

    tokens_value, tokens_source = _pick(config, "fullgraph_max_new_tokens")
    max_new_tokens = parse_positive_int(tokens_value, tokens_source) if tokens_value is not None else (
        SLOW_MAX_NEW_TOKENS if run_slow else FAST_MAX_NEW_TOKENS)

    strict = bool(config.getoption("fullgraph_strict")) or bool(config.getini("fullgraph_strict"))
    report_value, _ = _pick(config, "fullgraph_report")
    report_dir = Path(report_value) if report_value else None
    artifacts_value, _ = _pick(config, "fullgraph_artifacts")
    artifacts_dir = Path(artifacts_value).resolve() if artifacts_value else None
    cache_value, _ = _pick(config, "fullgraph_cache_dir")
    cache_dir = Path(cache_value).expanduser().resolve() if cache_value else None
    runtime_value, runtime_source = _pick(config, "fullgraph_artifact_runtime")
    artifact_runtime = "pt2" if runtime_value is None else parse_choice(runtime_value, runtime_source,
                                                                         tuple(RUNTIMES), "an artifact runtime")
    breaks_value, breaks_source = _pick(config, "fullgraph_breaks")
    breaks = "all" if breaks_value is None else parse_choice(breaks_value, breaks_source, BREAK_MODES,
                                                              "a break mode")
    dtype_value, dtype_source = _pick(config, "fullgraph_dtype")
    dtypes = ("float32",) if dtype_value is None else parse_choices(dtype_value, dtype_source, DTYPES, "a dtype")
    suite_value, suite_source = _pick(config, "fullgraph_suite")
    suite = "auto" if suite_value is None else parse_choice(suite_value, suite_source, SUITE_MODES, "a suite mode")
    timeout_value, timeout_source = _pick(config, "fullgraph_timeout")
    timeout = DEFAULT_TIMEOUT if timeout_value is None else parse_seconds(timeout_value, timeout_source)
    scenarios_value, scenarios_source = _pick(config, "fullgraph_scenarios")
    try:
        scenarios = BASIC if scenarios_value is None else select_scenarios(scenarios_value)
    except ValueError as error:
        raise pytest.UsageError(f"{scenarios_source}: {error}") from None
    attn_value, attn_source = _pick(config, "fullgraph_attn")
    attn = None if attn_value is None else parse_choice(attn_value, attn_source, ATTN_IMPLEMENTATIONS,
                                                        "an attention implementation")
    device_value, device_source = _pick(config, "fullgraph_device")
    device = DEFAULT_DEVICE if device_value is None else parse_device(device_value, device_source)
    return Settings(models=models, backend=backend, max_new_tokens=max_new_tokens, run_slow=run_slow,
                    strict=strict, report_dir=report_dir, breaks=breaks, suite=suite,
                    models_selected=models_value is not None or bool(pretrained), dtypes=dtypes, timeout=timeout,
                    artifacts_dir=artifacts_dir, artifact_runtime=artifact_runtime, cache_dir=cache_dir,
                    shard=shard.label if shard else None, device=device, scenarios=scenarios,
                    attn_implementation=attn)


def resolve_shard(config: pytest.Config) -> tuple[Shard | None, str]:
    """This run's shard and where it was set; (None, "") when unsharded."""
    value, source = _pick(config, "fullgraph_shard")
    if value is None:
        return None, ""
    try:
        return parse_shard(value, source), source
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def resolve_shard_costs(config: pytest.Config) -> dict[str, float] | None:
    """Seconds per model from the report ``--fullgraph-shard-costs`` names; a bad file is a usage error."""
    value, source = _pick(config, "fullgraph_shard_costs")
    if value is None:
        return None
    try:
        return model_costs(load_report(value))
    except ReportError as error:
        raise pytest.UsageError(f"{source}: {error}") from None
