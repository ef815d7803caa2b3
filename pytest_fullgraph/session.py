"""Per-run state behind the plugin's hooks: settings, built models, and the results seen so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fullgraph import check, report
from pytest_fullgraph.options import Settings
from pytest_fullgraph.registry import Registry

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Where a test's result travels from the fixture to its report (and from workers to the controller).
RESULT_KEY = pytest.StashKey["check.CheckResult"]()
REPORT_ATTRIBUTE = "fullgraph_result"


@dataclass
class FullgraphSession:
    settings: Settings
    registry: Registry
    is_worker: bool = False
    results: list[check.CheckResult] = field(default_factory=list)
    crashed_workers: list[dict[str, str]] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    _built: dict[str, Any] = field(default_factory=dict)

    def build_report(self) -> report.Report:
        return report.Report(report.environment(self.settings.describe()), list(self.results),
                             list(self.crashed_workers))

    def model(self, name: str) -> PreTrainedModel | BaseException:
        """The built model, or the exception its build raised; built once per process and name."""
        if name not in self._built:
            if name not in self.registry:
                raise pytest.UsageError(f"unknown model {name!r}; {self.registry.describe_choices()}")
            try:
                self._built[name] = self.registry[name].build()
            except Exception as error:  # a broken model must not take the others down
                self._built[name] = error
        return self._built[name]

    def run(self, model_name: str, scenario: str, level: str) -> check.CheckResult:
        for value, allowed, what in ((scenario, check.SCENARIOS, "scenario"), (level, check.LEVELS, "level")):
            if value not in allowed:
                raise pytest.UsageError(f"unknown {what} {value!r}; valid: {', '.join(allowed)}")
        return check.run_check(self.model(model_name), model_name, scenario, level, self.settings.backend,
                               self.settings.max_new_tokens, diagnose=self.settings.breaks == "all")

    def apply_verdict(self, result: check.CheckResult) -> None:
        """pass → pass; break → xfail (fail when strict); mismatch, error, nondeterministic → fail."""
        if result.outcome == "pass":
            return
        if result.outcome == "break" and not self.settings.strict:
            pytest.xfail(f"graph break: {result.message}")
        pytest.fail(f"{result.outcome}: {result.message}", pytrace=False)
