"""The baseline gate inside the run (``--fullgraph-baseline``): each check is judged against its committed verdict as
it finishes, as PyTorch's CI judges graph-break counts against its expected files and syrupy a snapshot.

Worse than the baseline (a more severe outcome, a new break site, more breaks: ``report.gate.compare_checks``)
fails the test, naming the baseline's outcome; a failure the baseline already has is an xfail; a check that got
better is listed when the run ends. ``--fullgraph-baseline-update`` rewrites the file with this run's checks, the
baseline's others kept. A baseline made with other settings gates nothing: a usage error before any check runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_fullgraph.core.results import CheckKey, CheckResult
from pytest_fullgraph.plugin.options import Chosen
from pytest_fullgraph.plugin.settings import Settings
from pytest_fullgraph.report.files import load, save
from pytest_fullgraph.report.gate import GateResult, compare_checks, settings_differences
from pytest_fullgraph.report.schema import Report, ReportError

UPDATE_FLAG = "--fullgraph-baseline-update"


@dataclass(frozen=True)
class Judged:
    """A check against the baseline: the baseline's result (None: a check the baseline lacks) and what got worse."""

    before: CheckResult | None
    worse: list[str] = field(default_factory=list)
    better: list[str] = field(default_factory=list)


@dataclass
class Baseline:
    """The run's baseline: its file (shown as given), its checks by key, and whether this run rewrites it."""

    path: Path
    shown: str
    checks: dict[CheckKey, CheckResult]
    environment: dict[str, Any]
    update: bool = False

    def judge(self, result: CheckResult) -> Judged:
        before = self.checks.get(result.key)
        if before is None:
            return Judged(None)
        gate = GateResult()
        compare_checks(gate, before, result)
        return Judged(before, gate.regressions, gate.improvements)

    def closing_lines(self, results: list[CheckResult]) -> list[str]:
        """The run against the baseline, for the terminal summary: counts, then each check that got better."""
        judged = [(result, self.judge(result)) for result in results]
        fixed = [line for _, verdict in judged if not verdict.worse for line in verdict.better]
        worse = sum(bool(verdict.worse) for _, verdict in judged)
        new = sum(verdict.before is None for _, verdict in judged)
        lines = [f"fullgraph baseline {self.shown}: {len(judged) - new} check(s) compared, {worse} worse, "
                 f"{len({line.split(':')[0] for line in fixed})} better, {new} not in it"]
        if fixed and not self.update:
            lines += [f"fixed since the baseline: {line.removeprefix('IMPROVED ')}" for line in fixed]
            lines.append(f"update it with {UPDATE_FLAG} (rewrites this run's checks in {self.shown}, keeps the rest)")
        return lines

    def write_update(self, run: Report) -> str:
        """Rewrite the file with this run's checks in place of the baseline's (the others kept); the line to show."""
        checks = {**self.checks, **{result.key: result for result in run.checks}}
        environment = {**self.environment, **run.environment}
        for name in ("models", "dtypes"):
            environment[name] = sorted({*self.environment.get(name, []), *run.environment.get(name, [])})
        save(Report(environment, sorted(checks.values(), key=lambda r: r.key), stored_help={**run.stored_help}),
             self.path)
        kept = len(checks) - len(run.checks)
        return f"fullgraph baseline updated: {self.shown} ({len(run.checks)} check(s) of this run, {kept} kept)"


def baseline_of_run(config: pytest.Config, given: Chosen, update: bool, settings: Settings) -> Baseline | None:
    """``--fullgraph-baseline`` of this run: a relative path is read from the ini file's directory when the ini set
    it, else from where pytest was invoked."""
    from_ini = given.source.startswith("ini") and config.inipath is not None
    base = config.inipath.parent if from_ini and config.inipath else config.invocation_params.dir
    return open_baseline(given.value, given.source or "--fullgraph-baseline", update, settings, Path(base))


def open_baseline(value: str | None, source: str, update: bool, settings: Settings, base: Path) -> Baseline | None:
    """The baseline ``--fullgraph-baseline`` names (``base``: where a relative path starts), checked against the run's
    settings; a file that cannot be read or was made with other settings is a ``pytest.UsageError`` in one line."""
    if not value:
        if update:
            raise pytest.UsageError(f"{UPDATE_FLAG} needs --fullgraph-baseline=FILE: the baseline to rewrite")
        return None
    path = (base / Path(value).expanduser()).resolve()
    if not path.exists() and update:  # the first baseline of a project
        return Baseline(path, value, {}, {}, update=True)
    try:
        found = load(path)
    except ReportError as error:
        start = f"; to start one, add {UPDATE_FLAG}" if not path.exists() else ""
        raise pytest.UsageError(f"{source}={value}: {error}{start}") from None
    differences = settings_differences(found.environment, run_settings(settings))
    dtypes = sorted(set(settings.dtypes) - set(found.environment.get("dtypes") or ["float32"]))
    if dtypes:
        differences.append(f"dtypes: {found.environment.get('dtypes')!r} in the baseline, {', '.join(dtypes)} not")
    if differences:
        raise pytest.UsageError(f"{source}={value} was made with other settings ({'; '.join(differences)}): run with "
                                "its settings, or keep one baseline file per configuration")
    return Baseline(path, value, {result.key: result for result in found.checks}, found.environment, update)


def run_settings(settings: Settings) -> dict[str, Any]:
    """The settings of this run that a baseline must share, spelt as a report records them."""
    import torch
    import transformers

    return {"backend": settings.backend, "max_new_tokens": settings.max_new_tokens, "torch": torch.__version__,
            "transformers": transformers.__version__, "device": settings.device,
            "attn_implementation": settings.attn_implementation, "recompiles": settings.recompiles}

