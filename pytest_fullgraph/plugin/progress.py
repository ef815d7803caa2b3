"""Progress on long runs (``--fullgraph-progress``): after each finished test one line, such as
``fullgraph: 12/48 tests done, 3 failed, about 3m10s left``.

Every collected test counts, the conformance checks and the others (property tests, a project's own) alike: a run
whose last minute is property tests says so. Only the controller counts: under xdist it receives every worker's test
reports, so the lines are one sequence and no worker writes. The time left is the expected seconds of the tests
left, shared among the workers (``seconds_left``): a check priced by the ``--fullgraph-shard-costs`` report costs its
seconds there times this run's pace (``expected_costs``), any other test the mean seconds of this run's finished
tests. ``wanted`` decides whether the lines are written: by default (``auto``) in a terminal, not in a CI log,
which nobody watches line by line, and only in runs that have checks, so installing the plugin changes no other
project's output. The estimate and the decision are pure functions, tested without running a check. No torch
import.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fullgraph.core.results import CheckKey, check_seconds

if TYPE_CHECKING:  # annotations only: the options read the report
    from pytest_fullgraph.report.schema import Report

#: The phase xdist gives the failure report of a test whose worker died: that test is over too.
CRASHED_PHASE = "???"
#: Values of the ``CI`` variable that do not mean "this is a CI job" (services that set it, set it to true).
_NOT_CI = ("", "0", "false", "no", "off")


def wanted(mode: str, isatty: bool, environ: Mapping[str, str], has_checks: bool) -> bool:
    """Whether to write progress lines: ``on`` and ``off`` say so; ``auto`` when stdout is a terminal, the ``CI``
    variable is not set (a CI log is a file: its reader wants the summary, not a line a test) and the run has
    conformance checks (other projects' runs, where the plugin is merely installed, stay as they were)."""
    if mode != "auto":
        return mode == "on"
    return isatty and environ.get("CI", "").strip().lower() in _NOT_CI and has_checks


def expected_costs(tests: Mapping[str, CheckKey | None], earlier: Report | None) -> dict[str, float]:
    """Each test's seconds in ``earlier`` (``check_seconds``) by test id, for the tests that are checks. A check it
    lacks costs the median of its model's checks there, else the median of all; costs of 0 (a skip, an older
    report's crash) count as unknown, as ``shard.partition`` counts them. Tests that are no checks, and every test
    without a report with costs, are left out: this run's mean prices them."""
    known = {result.key: seconds for result in (earlier.checks if earlier else ())
             if (seconds := check_seconds(result)) > 0}
    if not known:
        return {}
    by_model: dict[str, list[float]] = {}
    for key, seconds in known.items():
        by_model.setdefault(key[0], []).append(seconds)
    overall = statistics.median(known.values())
    return {nodeid: known[key] if key in known else statistics.median(by_model.get(key[0], [overall]))
            for nodeid, key in tests.items() if key is not None}


def seconds_left(left: Sequence[float | None], workers: int, pace: float = 1.0,
                 mean: float | None = None) -> float | None:
    """Seconds until the tests left are done; ``left`` holds each one's seconds in an earlier report, None where it
    has none.

    ``pace`` carries an earlier report's seconds over to this machine: the seconds the finished priced tests took
    here (setup, call and teardown, model builds included) over their seconds there, 1.0 before one finished.
    ``mean`` is the mean seconds of this run's finished tests, which prices every other test; before one finished
    (None) there is no estimate unless every test left is priced. The tests left run ``workers`` at a time, never
    more at once than there are tests.
    """
    if not left:
        return 0.0
    unpriced = sum(1 for cost in left if cost is None)
    if unpriced and mean is None:
        return None
    total = pace * sum(cost for cost in left if cost is not None) + unpriced * (mean or 0.0)
    return total / max(1, min(workers, len(left)))


def duration_text(seconds: float) -> str:
    """``45s``, ``3m10s``, ``2h05m``: to the second below an hour, to the minute above (it is an estimate)."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def progress_line(done: int, total: int, failed: int, left: float | None) -> str:
    """``fullgraph: 12/48 tests done, 3 failed, about 3m10s left``; the last line has no time left."""
    line = f"fullgraph: {done}/{total} tests done, {failed} failed"
    if done < total:
        line += f", about {duration_text(left)} left" if left is not None else ", time left not known yet"
    return line


@dataclass
class Progress:
    """The controller's count of the run's tests; ``check_of`` tells which test ids are checks (and which)."""

    check_of: Callable[[str], CheckKey | None]
    earlier: Report | None = None
    #: the collected tests by test id, with the check each one is (None: not a check)
    tests: dict[str, CheckKey | None] = field(default_factory=dict)
    #: the seconds the earlier report gives the tests it prices
    costs: dict[str, float] = field(default_factory=dict)
    workers: set[str] = field(default_factory=set)
    #: the seconds each test has taken so far, over its phases
    took: dict[str, float] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)

    def collected(self, nodeids: Iterable[str]) -> None:
        """The run's tests; the first collection counts (every xdist worker collects the same)."""
        if self.tests:
            return
        self.tests = {nodeid: self.check_of(nodeid) for nodeid in nodeids}
        self.costs = expected_costs(self.tests, self.earlier)

    @property
    def has_checks(self) -> bool:
        return any(key is not None for key in self.tests.values())

    def count(self, report: pytest.TestReport) -> str | None:
        """Count one phase's report of a test; the progress line when it ended the test."""
        nodeid = report.nodeid
        if nodeid not in self.tests or nodeid in self.finished:
            return None
        self.took[nodeid] = self.took.get(nodeid, 0.0) + float(report.duration or 0.0)
        if report.failed:
            self.failed.add(nodeid)
        if report.when not in ("teardown", CRASHED_PHASE):
            return None
        self.finished.add(nodeid)
        return progress_line(len(self.finished), len(self.tests), len(self.failed), self.seconds_left())

    def seconds_left(self) -> float | None:
        left = [self.costs.get(nodeid) for nodeid in self.tests if nodeid not in self.finished]
        return seconds_left(left, max(1, len(self.workers)), self.pace(), self.mean())

    def pace(self) -> float:
        """This run's seconds per second of the earlier report, over the finished tests it prices; 1.0 before."""
        priced = [nodeid for nodeid in self.finished if nodeid in self.costs]
        took, expected = sum(self.took[nodeid] for nodeid in priced), sum(self.costs[nodeid] for nodeid in priced)
        return took / expected if took > 0 and expected > 0 else 1.0

    def mean(self) -> float | None:
        """The mean seconds of the finished tests the earlier report does not price, else of all finished ones; None
        before a finished test took any time (a test whose worker died has none)."""
        unpriced = [self.took[nodeid] for nodeid in self.finished if nodeid not in self.costs]
        chosen = unpriced or [self.took[nodeid] for nodeid in self.finished]
        return statistics.fmean(chosen) if sum(chosen) > 0 else None


def worker_id(node: Any) -> str:
    """An xdist worker's id (``gw0``), or the node as text where it has none (a crash report's missing node)."""
    return str(getattr(node, "workerinput", {}).get("workerid", node))


def show(config: pytest.Config, check_of: Callable[[str], CheckKey | None], earlier: Report | None,
         mode: str = "on") -> None:
    """Count this run's tests (the controller's) and write progress lines if ``mode`` (``auto``, ``on``) and the run
    call for them (``wanted``); ``check_of`` tells which test ids are checks."""
    hooks = ProgressHooks(config, Progress(check_of, earlier), mode)
    config.pluginmanager.register(hooks, f"fullgraph-progress-{id(config)}")


class ProgressHooks:
    """The hooks that feed ``Progress`` on the controller and write its lines; registered only there."""

    def __init__(self, config: pytest.Config, progress: Progress, mode: str) -> None:
        self.config, self.progress, self.mode = config, progress, mode
        #: whether lines are written: decided once the run's tests are known (``auto`` asks whether any is a check)
        self.writing = False

    def _collected(self, nodeids: Iterable[str]) -> None:
        first = not self.progress.tests
        self.progress.collected(nodeids)
        if first:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            self.writing = wanted(self.mode, bool(terminal is not None and terminal.isatty), os.environ,
                                  self.progress.has_checks)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._collected(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """Under xdist the controller collects nothing: each worker's collection says what runs, and on how many."""
        self.progress.workers.add(worker_id(node))
        self._collected(ids)

    @pytest.hookimpl(trylast=True)  # after pytest's own line for the test, so ours follows it
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        line = self.progress.count(report)
        if line is not None and self.writing:
            write_full_line(self.config, line)


def write_full_line(config: pytest.Config, line: str) -> None:
    """Write ``line`` on a line of its own through pytest's terminal reporter (none with ``-p no:terminal``)."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return
    terminal.ensure_newline()
    if getattr(getattr(terminal, "_tw", None), "width_of_current_line", 0):
        terminal.write("\n")  # xdist's dots leave a line that ensure_newline does not know to end
    terminal.write_line(line)
