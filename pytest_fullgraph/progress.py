"""Progress on long runs (``--fullgraph-progress``): after each finished check one line, such as
``fullgraph: 12/48 checks done, 3 failed, about 3m10s left``.

Only the controller counts: under xdist it receives every worker's test reports, so the lines are one sequence
and no worker writes. The time left is this run's pace times the expected cost of the checks left, shared among
the workers (``seconds_left``); each check's expected cost comes from the ``--fullgraph-shard-costs`` report when
one is given, else every check costs the same (``expected_costs``). The estimate is pure functions of counts and
seconds, so it is tested without running a check. No torch import.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fullgraph.results import CheckKey, check_seconds

if TYPE_CHECKING:  # annotations only: the options read the report
    from pytest_fullgraph.report.schema import Report

#: The phase xdist gives the failure report of a test whose worker died: that test is over too.
CRASHED_PHASE = "???"


@dataclass(frozen=True)
class Expected:
    """Each collected check's expected cost: an earlier report's seconds (``in_seconds``), or 1.0 each without
    one, when only their ratio means anything and this run's pace gives the seconds."""

    costs: dict[CheckKey, float]
    in_seconds: bool = False


def expected_costs(keys: Iterable[CheckKey], earlier: Report | None) -> Expected:
    """The checks' costs in ``earlier`` (``check_seconds``). A check it lacks costs the median of its model's checks
    there, else the median of all; costs of 0 (a skip, an older report's crash) count as unknown, as
    ``shard.partition`` counts them. An earlier report without any cost is as none."""
    known = {result.key: seconds for result in (earlier.checks if earlier else ())
             if (seconds := check_seconds(result)) > 0}
    if not known:
        return Expected({key: 1.0 for key in keys})
    by_model: dict[str, list[float]] = {}
    for key, seconds in known.items():
        by_model.setdefault(key[0], []).append(seconds)
    overall = statistics.median(known.values())
    return Expected({key: known[key] if key in known else statistics.median(by_model.get(key[0], [overall]))
                     for key in keys}, in_seconds=True)


def seconds_left(left: Sequence[float], workers: int, took: float = 0.0, expected: float = 0.0, *,
                 in_seconds: bool = False) -> float | None:
    """Seconds until the checks left are done; ``left`` holds each one's expected cost.

    ``took`` is the seconds the finished checks took (their tests' setup, call and teardown, model builds
    included) and ``expected`` their expected cost, so ``took / expected`` is this run's pace: it carries an
    earlier report's seconds over to this machine, and without a report it is the mean check's seconds. Before a
    check finished an earlier report's seconds are taken as they are; without one there is no estimate (None). The
    checks left run ``workers`` at a time, never more at once than there are checks.
    """
    if not left:
        return 0.0
    if took > 0 and expected > 0:
        pace = took / expected
    elif in_seconds:
        pace = 1.0
    else:
        return None
    return pace * sum(left) / max(1, min(workers, len(left)))


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
    """``fullgraph: 12/48 checks done, 3 failed, about 3m10s left``; the last line has no time left."""
    line = f"fullgraph: {done}/{total} checks done, {failed} failed"
    if done < total:
        line += f", about {duration_text(left)} left" if left is not None else ", time left not known yet"
    return line


@dataclass
class Progress:
    """The controller's count of the run's checks; ``check_of`` tells which test ids are checks (and which)."""

    check_of: Callable[[str], CheckKey | None]
    earlier: Report | None = None
    #: the collected checks by test id, with their expected costs
    checks: dict[str, CheckKey] = field(default_factory=dict)
    expected: Expected = field(default_factory=lambda: Expected({}))
    workers: set[str] = field(default_factory=set)
    #: the seconds each check's test has taken so far, over its phases
    took: dict[str, float] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)

    def collected(self, nodeids: Iterable[str]) -> None:
        """The run's tests; the first collection counts (every xdist worker collects the same)."""
        if self.checks:
            return
        self.checks = {nodeid: key for nodeid in nodeids if (key := self.check_of(nodeid)) is not None}
        self.expected = expected_costs(self.checks.values(), self.earlier)

    def count(self, report: pytest.TestReport) -> str | None:
        """Count one phase's report of a check's test; the progress line when it ended the test."""
        nodeid = report.nodeid
        if nodeid not in self.checks or nodeid in self.finished:
            return None
        self.took[nodeid] = self.took.get(nodeid, 0.0) + float(report.duration or 0.0)
        if report.failed:
            self.failed.add(nodeid)
        if report.when not in ("teardown", CRASHED_PHASE):
            return None
        self.finished.add(nodeid)
        return progress_line(len(self.finished), len(self.checks), len(self.failed), self.seconds_left())

    def seconds_left(self) -> float | None:
        costs = self.expected.costs
        left = [costs[key] for nodeid, key in self.checks.items() if nodeid not in self.finished]
        return seconds_left(left, max(1, len(self.workers)), sum(self.took[nodeid] for nodeid in self.finished),
                            sum(costs[self.checks[nodeid]] for nodeid in self.finished),
                            in_seconds=self.expected.in_seconds)


def worker_id(node: Any) -> str:
    """An xdist worker's id (``gw0``), or the node as text where it has none (a crash report's missing node)."""
    return str(getattr(node, "workerinput", {}).get("workerid", node))


def show(config: pytest.Config, check_of: Callable[[str], CheckKey | None], earlier: Report | None) -> None:
    """Write progress lines in this run (the controller's): ``check_of`` tells which test ids are checks."""
    hooks = ProgressHooks(config, Progress(check_of, earlier))
    config.pluginmanager.register(hooks, f"fullgraph-progress-{id(config)}")


class ProgressHooks:
    """The hooks that feed ``Progress`` on the controller and write its lines; registered only there."""

    def __init__(self, config: pytest.Config, progress: Progress) -> None:
        self.config = config
        self.progress = progress

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.progress.collected(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """Under xdist the controller collects nothing: each worker's collection says what runs, and on how many."""
        self.progress.workers.add(worker_id(node))
        self.progress.collected(ids)

    @pytest.hookimpl(trylast=True)  # after pytest's own line for the test, so ours follows it
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        line = self.progress.count(report)
        if line is not None:
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
