"""Per-run state behind the plugin's hooks: settings, models, levels, built models and the results so far."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.levels import Levels
from pytest_fullgraph.models import Registry, class_facts
from pytest_fullgraph.options import DTYPES, Settings
from pytest_fullgraph.results import BREAK, DEFAULT_DTYPE, ERROR, PASS, SKIP, CheckResult, first_line
from pytest_fullgraph.scenarios import SCENARIOS

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Where a test's results travel from the fixture to its report (and from workers to the controller).
RESULTS_KEY = pytest.StashKey[list[CheckResult]]()
REPORT_ATTRIBUTE = "fullgraph_result"


def in_dtype(model: Any, dtype: str) -> Any:
    """A copy of ``model`` with its floating-point parameters and buffers in ``dtype``."""
    import copy

    import torch

    return copy.deepcopy(model).to(getattr(torch, dtype))


class KnownLimitation(Exception):
    """A registered model that is known not to run; its checks say why instead of building it."""


def with_attention(model: Any, implementation: str) -> None:
    """Set the model's ``attn_implementation``; one it cannot use is a ``KnownLimitation`` saying why (its checks
    are skips: the combination does not exist, nothing is judged)."""
    try:
        model.set_attn_implementation(implementation)
    except (ValueError, ImportError, NotImplementedError) as error:
        raise KnownLimitation(f"{type(model).__name__} cannot use attn_implementation={implementation!r}: "
                              f"{first_line(error)}") from None
    if model.config._attn_implementation != implementation:
        raise KnownLimitation(f"{type(model).__name__} does not take attn_implementation={implementation!r} after "
                              "it is built (it does not use transformers' AttentionInterface)")


@dataclass
class FullgraphSession:
    settings: Settings
    registry: Registry
    levels: Levels
    is_worker: bool = False
    #: results by (test node id, check key): a test may run several checks; a result seen twice (from the
    #: fixture, then from the test's report) is kept once
    recorded: dict[tuple[str, tuple[str, str, str, str]], CheckResult] = field(default_factory=dict)
    crashed_workers: list[dict[str, str]] = field(default_factory=list)
    run_status: dict[str, Any] = field(default_factory=lambda: {"exitstatus": None, "interrupted": False})
    written: list[Path] = field(default_factory=list)
    #: puts torch's structured-trace logger back as it was before this session quietened it
    restore_trace_logger: Callable[[], None] = lambda: None
    _built: dict[tuple[str, str], Any] = field(default_factory=dict)

    @property
    def results(self) -> list[CheckResult]:
        return list(self.recorded.values())

    def record(self, nodeid: str, result: CheckResult) -> None:
        self.recorded[(nodeid, result.key)] = result

    def build_report(self) -> report.Report:
        from pytest_fullgraph.check import exactness_settings

        descriptions = {"levels": self.levels.descriptions(),
                        "scenarios": {name: scenario.description for name, scenario in SCENARIOS.items()},
                        "exactness_settings": {dtype: exactness_settings(self.settings.backend, dtype)
                                               for dtype in self.settings.dtypes}}
        return report.Report(report.environment(self.settings.describe(), descriptions),
                             list(self.results), list(self.crashed_workers), dict(self.run_status))

    def model(self, name: str, dtype: str = DEFAULT_DTYPE) -> PreTrainedModel | BaseException:
        """The built model in ``dtype``, or the exception its build or conversion raised; built once per
        process and name, converted once per dtype (a copy: the float32 model stays as built)."""
        if (name, dtype) in self._built:
            return self._built[(name, dtype)]
        if name not in self.registry:
            raise pytest.UsageError(f"unknown model {name!r}; {self.registry.describe_choices()}")
        if dtype not in DTYPES:
            raise pytest.UsageError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        spec = self.registry[name]
        built: Any
        try:
            if spec.known_reason:
                raise KnownLimitation(spec.known_reason)
            if dtype == DEFAULT_DTYPE:
                built = spec.build()
                if self.settings.attn_implementation is not None:
                    with_attention(built, self.settings.attn_implementation)
                if self.settings.device != "cpu":  # built on the CPU, seeded; the checks run where asked
                    built = built.to(self.settings.device)
            else:
                built = self.model(name, DEFAULT_DTYPE)
                if isinstance(built, BaseException):
                    raise built
                built = in_dtype(built, dtype)
        except Exception as error:  # a broken model must not take the others down
            built = error
        self._built[(name, dtype)] = built
        return built

    def run(self, model_name: str, scenario: str, level: str, dtype: str = DEFAULT_DTYPE) -> CheckResult:
        from pytest_fullgraph.check import run_check

        for value, allowed, what in ((scenario, list(SCENARIOS), "scenario"), (level, list(self.levels), "level")):
            if value not in allowed:
                raise pytest.UsageError(f"unknown {what} {value!r}; valid: {', '.join(allowed)}")
        model = self.model(model_name, dtype)
        tokens = self.max_new_tokens(level)
        if isinstance(model, KnownLimitation):
            result = CheckResult(model_name, scenario, level, self.settings.backend, tokens, SKIP, f"skipped: {model}",
                                 dtype=dtype)
        else:
            result = run_check(model, model_name, SCENARIOS[scenario], self.levels[level], self.settings.backend,
                               tokens, diagnose=self.settings.breaks == "all",
                               timeout=self.settings.timeout, artifacts=self.settings.artifacts_dir,
                               artifact_runtime=self.settings.artifact_runtime)
        if isinstance(model, BaseException):
            result.dtype = dtype  # a model that failed to build has no dtype of its own to report
        result.model_class, result.parameters, result.can_compile_fullgraph = self.facts(model_name, model)
        return result

    def max_new_tokens(self, level: str) -> int:
        """Tokens the checks of ``level`` generate: the run's ``max_new_tokens`` unless the level fixes its own."""
        return self.levels[level].max_new_tokens(self.settings.max_new_tokens)

    def collected_levels(self) -> tuple[str, ...]:
        """The levels of the test ids: all of them in the slow tier; without it, those not ``slow_only``."""
        return tuple(name for name in self.levels if self.settings.run_slow or not self.levels[name].slow_only)

    def facts(self, name: str, model: Any) -> tuple[str, int | None, bool | None]:
        """Class, parameter count and ``_can_compile_fullgraph`` of a model; from its transformers type's class
        when it was not built (a known limitation, a failed build)."""
        if not isinstance(model, BaseException):
            flag = getattr(model, "_can_compile_fullgraph", None)
            return (type(model).__name__, sum(parameter.numel() for parameter in model.parameters()),
                    flag if isinstance(flag, bool) else None)
        model_type = self.registry[name].model_type
        if not model_type:
            return "", None, None
        try:
            model_class, flag = class_facts(model_type)
        except Exception:  # the facts are a courtesy; the check's outcome already says what went wrong
            return "", None, None
        return model_class, None, flag

    def apply_verdict(self, result: CheckResult) -> None:
        """pass → pass; skip (a known limitation, a dtype without kernels) → skip; break → xfail (fail when
        strict); mismatch, error, nondeterministic → fail."""
        if result.outcome == PASS:
            return
        if result.outcome == SKIP:
            pytest.skip(f"{result.model}: {result.message}")
        if not self.settings.strict and result.outcome == BREAK:
            pytest.xfail(f"graph break: {result.message}")
        pytest.fail(f"{result.outcome}: {result.message}", pytrace=False)

    def record_crash(self, nodeid: str, worker: str, axes: tuple[tuple[str, ...], ...]) -> None:
        """A worker died while running ``nodeid``: name the test, and record the check as an error if it is one.

        The controller does not collect items under xdist, so the check is read back from the test id, whose
        parameters are model-scenario-level-dtype joined by "-" (``pytest_generate_tests``); ``axes`` holds the
        allowed values of each, in that order.
        """
        for worker_entry in self.crashed_workers:
            if worker_entry.get("node") == worker and not worker_entry.get("test"):
                worker_entry["test"] = nodeid
                break
        else:
            self.crashed_workers.append({"node": worker, "error": "worker crashed", "test": nodeid})
        parameters = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
        for model, scenario, level, dtype in itertools.product(*axes):
            if parameters == f"{model}-{scenario}-{level}-{dtype}":
                self.record(nodeid, CheckResult(
                    model, scenario, level, self.settings.backend, self.max_new_tokens(level), ERROR,
                    f"worker {worker} crashed while running this check ({nodeid})", dtype=dtype))
                return
