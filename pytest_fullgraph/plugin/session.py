"""Per-run state behind the plugin's hooks: settings, levels, the run's models, and the results so far."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.check.run import failed_build, run_check
from pytest_fullgraph.check.scenarios import SCENARIOS
from pytest_fullgraph.core.break_help import help_for_ids
from pytest_fullgraph.core.compute import exactness_settings
from pytest_fullgraph.core.environment import environment
from pytest_fullgraph.core.results import DEFAULT_DTYPE, ERROR, SKIP, CheckKey, CheckResult
from pytest_fullgraph.levels.base import Levels
from pytest_fullgraph.models import Registry
from pytest_fullgraph.models.positions import declared_positions, too_long
from pytest_fullgraph.plugin.baseline import Baseline
from pytest_fullgraph.plugin.built_models import BuildFailed, ModelCache, ModelEntry, Unavailable
from pytest_fullgraph.plugin.parsers import DTYPES
from pytest_fullgraph.plugin.settings import Settings
from pytest_fullgraph.plugin.signals import ReportWarmup
from pytest_fullgraph.report.files import save

#: Where a test's results travel from the fixture to its report (and from workers to the controller).
RESULTS_KEY = pytest.StashKey[list[CheckResult]]()
REPORT_ATTRIBUTE = "fullgraph_result"
#: The user property in which a property test says how many of its draws it checked, and which it left out, why.
DRAWS_PROPERTY = "fullgraph_draws"


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
    #: what ``--fullgraph-repro`` wrote, one line for the terminal summary ("" when not asked)
    repro_line: str = ""
    #: puts torch's structured-trace logger back as it was before this session quietened it
    restore_trace_logger: Callable[[], None] = lambda: None
    #: this run's report, built once when the run ends
    final_report: report.Report | None = None
    #: the verdicts each check is judged against (``--fullgraph-baseline``), None without one
    baseline: Baseline | None = None
    #: what ``--fullgraph-baseline-update`` wrote, one line for the terminal summary ("" when not asked)
    baseline_line: str = ""
    #: property tests' draws by test id: "8 of 8 draws checked", or which were left out and why
    draws: dict[str, str] = field(default_factory=dict)
    #: the shipped suite's directory when ``--fullgraph-suite=off`` keeps it out of collection, else None
    left_out: Path | None = None
    #: loads what building the report imports while an xdist run goes on, so a signal's report needs no imports
    warmup: ReportWarmup = field(default_factory=ReportWarmup)
    models: ModelCache = field(init=False)

    def __post_init__(self) -> None:
        self.models = ModelCache(self.registry, self.settings.device, self.settings.attn_implementation)

    @property
    def results(self) -> list[CheckResult]:
        return list(self.recorded.values())

    def record(self, nodeid: str, result: CheckResult) -> None:
        self.recorded[(nodeid, result.key)] = result

    def leaves_out(self, path: Path) -> bool:
        """Whether collection skips ``path``: the shipped suite or a file in it, under ``--fullgraph-suite=off``."""
        if self.left_out is None:
            return False
        resolved = path.resolve()
        return resolved == self.left_out or self.left_out in resolved.parents

    def closing_lines(self) -> list[str]:
        """The terminal summary's lines after the report: the run against its baseline, and the property tests
        that left draws out."""
        lines = self.baseline.closing_lines(self.results) if self.baseline is not None else []
        lines += [self.baseline_line] if self.baseline_line else []
        return lines + [f"property draws left out: {test}: {line}" for test, line in sorted(self.draws.items())
                        if "left out" in line]

    def finish_report(self) -> report.Report:
        """The run's report, built on the first call (when the run ends) and the same object after, unless the run's
        status changed since. An interrupted run's report is built at once, with the imports it needs only if they
        are loaded (``ReportWarmup.ready``): a signal's grace period has no seconds to spare for them."""
        if self.final_report is None or self.final_report.run != self.run_status:
            imports = not self.run_status.get("interrupted") or self.warmup.ready
            if imports:
                self.warmup.wait()  # the report imports nothing while the warmup's thread does
            self.final_report = self.build_report(imports=imports)
        return self.final_report

    def build_report(self, *, imports: bool = True) -> report.Report:
        """The report of the results so far; ``imports=False`` imports nothing (``environment``), so it stores no
        break help, which comes from torch."""
        descriptions = {"levels": self.levels.descriptions(),
                        "scenarios": {name: scenario.description for name, scenario in SCENARIOS.items()},
                        "scenario_features": {name: scenario.feature for name, scenario in SCENARIOS.items()},
                        "exactness_settings": {dtype: exactness_settings(self.settings.backend, dtype)
                                               for dtype in self.settings.dtypes}}
        built = report.Report(environment(self.settings.describe(), descriptions, imports=imports),
                              list(self.results), list(self.crashed_workers), dict(self.run_status))
        if imports:
            built.stored_help = help_for_ids(built.gb_ids())  # the run's torch's words, stored with the report
        return built

    def write_json_now(self) -> None:
        """An interrupted run's (Ctrl-C, SIGTERM) report JSON, on disk before pytest formats the traceback and xdist
        stops its workers (up to 10 s each), both of which take seconds of a CI runner's grace period.
        ``write_files`` then writes the same report's files, this JSON again included."""
        if self.settings.report_dir is not None:
            with contextlib.suppress(OSError):  # an unwritable directory: write_files meets it too, and says so
                save(self.finish_report(), self.settings.report_dir / report.JSON_NAME)

    def write_files(self, terminal: Any) -> None:
        """What the run writes when it ends: the report's files, the baseline's update, the reproducers."""
        if self.settings.report_dir is not None:
            self.written = report.write(self.finish_report(), self.settings.report_dir)
        if self.baseline is not None and self.baseline.update:
            self.baseline_line = self.baseline.write_update(self.finish_report())
        if self.settings.repro_dir is not None:
            from pytest_fullgraph.repro.command import reproduce_run  # the repro machinery loads only when asked

            self.repro_line = reproduce_run(self.finish_report(), self.settings.repro_dir, terminal)

    def model(self, name: str, dtype: str = DEFAULT_DTYPE, variant: str = "") -> ModelEntry:
        """What became of model ``name`` in ``dtype`` (built, failed, unavailable), with a scenario's config
        ``variant``; a name or dtype this run does not know is a usage error."""
        if name not in self.registry:
            raise pytest.UsageError(self.registry.unknown(name))
        if dtype not in DTYPES:
            raise pytest.UsageError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        return self.models.get(name, dtype, variant)

    def run(self, model_name: str, scenario: str, level: str, dtype: str = DEFAULT_DTYPE) -> CheckResult:
        for value, allowed, what in ((scenario, list(SCENARIOS), "scenario"), (level, list(self.levels), "level")):
            if value not in allowed:
                raise pytest.UsageError(f"unknown {what} {value!r}; valid: {', '.join(allowed)}")
        # built before the clock starts: a build serves all its checks (a scenario's variant, all of that scenario's)
        entry = self.model(model_name, dtype, SCENARIOS[scenario].model_variant)
        started = time.perf_counter()
        backend, tokens = self.settings.backend, self.max_new_tokens(level)
        level_object = self.levels[level]
        if isinstance(entry, Unavailable):
            result = CheckResult(model_name, scenario, level, backend, tokens, SKIP, f"skipped: {entry.reason}",
                                 dtype=dtype)
        elif isinstance(entry, BuildFailed):
            result = failed_build(model_name, scenario, level, backend, tokens, dtype, entry.error)
        elif problem := self.too_long(model_name, entry.model, scenario, tokens):
            result = CheckResult(model_name, scenario, level, backend, tokens, ERROR, problem, dtype=dtype)
        else:
            result = run_check(entry.model, model_name, SCENARIOS[scenario], level_object, backend, tokens,
                               diagnose=self.settings.records_every_break(level_object),
                               timeout=self.settings.timeout,
                               artifacts=self.settings.artifacts_dir, artifact_runtime=self.settings.artifact_runtime,
                               recompiles=self.settings.recompiles == "on")
        result.duration_s = time.perf_counter() - started
        (result.model_class, result.parameters, result.can_compile_fullgraph,
         result.model_file) = self.models.facts(model_name)
        return result

    def run_in_test(self, item: pytest.Item, model_name: str, scenario: str, level: str,
                    dtype: str = DEFAULT_DTYPE) -> CheckResult:
        """One check run by test ``item`` (``fullgraph_check``): kept on the item for its report, and its outcome
        and first break as the item's JUnit properties."""
        result = self.run(model_name, scenario, level, dtype)
        item.stash.setdefault(RESULTS_KEY, []).append(result)
        if not self.is_worker:
            # recorded now, not only from the test's report: a run interrupted inside this test keeps it
            self.record(item.nodeid, result)
        first = result.first_break
        for name, value in (("fullgraph_outcome", result.outcome), ("graph_breaks", len(result.break_records())),
                            ("first_break", first.summary() if first else "")):
            item.user_properties.append((name, value))
        return result

    def too_long(self, name: str, model: Any, scenario: str, tokens: int) -> str:
        """Why the run's ``max_new_tokens`` do not fit in the built model's declared positions, as one line; ""
        when they fit. Start-up refuses a set value already where configs are known without a build; this covers
        models registered with only a build. A level that fixes its own length (``while256``) is not held to it:
        rotary models run past their declared positions."""
        if tokens != self.settings.max_new_tokens:
            return ""
        limit = declared_positions(name, getattr(model, "config", None))
        problem = too_long([limit] if limit else [], max(SCENARIOS[scenario].prompt_lengths), tokens)
        return f"max_new_tokens={tokens}: {problem}" if problem else ""

    def max_new_tokens(self, level: str) -> int:
        """Tokens the checks of ``level`` generate: the run's ``max_new_tokens`` unless the level fixes its own."""
        return self.levels[level].max_new_tokens(self.settings.max_new_tokens)

    def collected_levels(self) -> tuple[str, ...]:
        """The levels of the test ids: ``--fullgraph-levels``' choice (by default the tier's, see
        ``Levels.default``)."""
        return self.settings.levels or self.collected_default()

    def collected_default(self) -> tuple[str, ...]:
        """The levels a run of this tier collects when ``--fullgraph-levels`` is not given."""
        return self.levels.default(self.settings.run_slow)

    def axes(self) -> dict[str, tuple[str, ...]]:
        """The parametrized fixtures and their values, in test-id order; the same on every xdist worker."""
        return {"fullgraph_model_name": self.settings.models, "fullgraph_scenario": self.settings.scenarios,
                "fullgraph_level": self.collected_levels(), "fullgraph_dtype": self.settings.dtypes}

    def checks_by_parameters(self) -> dict[str, CheckKey]:
        """Every check of the axes by its test id's parameters; where "-" in names spells one id two ways, the first
        in the axes' order."""
        found: dict[str, CheckKey] = {}
        for model, scenario, level, dtype in itertools.product(*self.axes().values()):
            found.setdefault("-".join((model, scenario, level, dtype)), (model, scenario, level, dtype))
        return found

    def check_of_test_id(self, nodeid: str) -> CheckKey | None:
        """The check (model, scenario, level, dtype) a test id names, or None: the controller does not collect items
        under xdist, so a crashed test's check is read back from its id (matched, not split: names may hold "-")."""
        return self.checks_by_parameters().get(parameters_of_test_id(nodeid))

    def record_crash(self, nodeid: str, worker: str, check: tuple[str, str, str, str] | None, site: str = "") -> None:
        """A worker died while running ``nodeid``: name the test, and record its check (model, scenario, level,
        dtype), when it is one, as an error; ``site``: where it died ("Segmentation fault at FILE:LINE in f")."""
        for worker_entry in self.crashed_workers:
            if worker_entry.get("node") == worker and not worker_entry.get("test"):
                worker_entry["test"] = nodeid
                break
        else:
            worker_entry = {"node": worker, "error": "worker crashed", "test": nodeid}
            self.crashed_workers.append(worker_entry)
        if site:
            worker_entry["error"] += f"; {site}"
        if check is not None:
            model, scenario, level, dtype = check
            self.record(nodeid, CheckResult(
                model, scenario, level, self.settings.backend, self.max_new_tokens(level), ERROR,
                f"worker {worker} crashed while running this check ({nodeid})" + (f": {site}" if site else ""),
                dtype=dtype))


#: Where the run's session lives on its ``pytest.Config``: one per config, so pytester's nested runs stay apart.
SESSION_KEY = pytest.StashKey[FullgraphSession]()


def parameters_of_test_id(nodeid: str) -> str:
    """The parametrization part of a test id, ``llama-greedy-forward-float32``; "" when it has none."""
    return nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
