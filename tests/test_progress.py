"""Progress on long runs (#25 item 7): each check's ``duration_s`` in the report, and ``--fullgraph-progress``'s
lines, whose estimate is tested here with fakes and whose lines with a run of two toy checks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.progress import (
    CRASHED_PHASE,
    Expected,
    Progress,
    duration_text,
    expected_costs,
    progress_line,
    seconds_left,
    write_full_line,
)
from pytest_fullgraph.results import CheckResult, check_seconds
from pytest_fullgraph.shard import model_costs
from tests.conftest import read_report


def result(model: str, scenario: str = "greedy", duration: float | None = None, **timings: float) -> CheckResult:
    return CheckResult(model, scenario, "forward", "eager", 4, "pass", timings=timings, duration_s=duration)


# --- duration_s and the costs read from it -------------------------------------------------------------------------


def test_a_checks_seconds_are_its_duration_else_its_phases_sum() -> None:
    assert check_seconds(result("a", duration=5.0, eager_s=1.0, compile_s=2.0)) == 5.0
    assert check_seconds(result("a", eager_s=1.0, compile_s=2.0)) == 3.0  # a report before version 7
    assert check_seconds(result("a")) == 0.0


def test_shard_costs_prefer_durations_and_fall_back_to_timings() -> None:
    checks = [result("a", duration=5.0, compile_s=2.0), result("a", "eos", compile_s=1.5), result("b")]
    assert model_costs(report.Report({}, checks)) == {"a": 6.5, "b": 0.0}


def test_duration_round_trips_and_reports_without_it_still_load() -> None:
    written = report.Report({}, [result("a", duration=2.5)]).to_dict()
    assert written["version"] == 8 and written["checks"][0]["duration_s"] == 2.5
    assert report.Report.from_dict(written, "new").checks[0].duration_s == 2.5
    older = {**written, "version": 6, "checks": [{key: value for key, value in written["checks"][0].items()
                                                   if key != "duration_s"}]}
    assert report.Report.from_dict(older, "old").checks[0].duration_s is None


# --- the estimate ---------------------------------------------------------------------------------------------------


def test_without_a_costs_report_the_time_left_is_the_mean_check_times_the_checks_left_over_the_workers() -> None:
    assert seconds_left([1.0] * 6, workers=2, took=30.0, expected=3.0) == 30.0  # 10 s a check, 6 left, 2 at once
    assert seconds_left([1.0], workers=4, took=30.0, expected=3.0) == 10.0  # one check left uses one worker
    assert seconds_left([1.0] * 6, workers=1) is None  # nothing finished, nothing known
    assert seconds_left([], workers=1, took=30.0, expected=3.0) == 0.0


def test_a_costs_reports_seconds_are_taken_as_they_are_then_scaled_by_this_runs_pace() -> None:
    assert seconds_left([10.0, 30.0], workers=2, in_seconds=True) == 20.0
    # the earlier report said 10 s for the finished check; here it took 20: this machine is twice as slow
    assert seconds_left([10.0, 30.0], workers=1, took=20.0, expected=10.0, in_seconds=True) == 80.0


def test_expected_costs_come_per_check_then_per_model_then_overall_from_the_earlier_report() -> None:
    earlier = report.Report({}, [result("a", duration=10.0), result("a", "eos", duration=30.0),
                                 result("b", duration=100.0), result("b", "eos", duration=0.0)])
    keys = [("a", "greedy", "forward", "float32"), ("a", "sample", "forward", "float32"),
            ("b", "eos", "forward", "float32"), ("new", "greedy", "forward", "float32")]
    expected = expected_costs(keys, earlier)
    assert expected.in_seconds
    # known; a's median; b's skipped (0 s) check counts as unknown, so b's median; the median of all known
    assert list(expected.costs.values()) == [10.0, 20.0, 100.0, 30.0]
    assert expected_costs(keys[:2], None) == Expected(dict.fromkeys(keys[:2], 1.0))
    assert not expected_costs(keys, report.Report({}, [result("a")])).in_seconds  # no cost known: as none


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0s"), (59.4, "59s"), (60, "1m00s"), (190, "3m10s"),
                                               (3600, "1h00m"), (7500, "2h05m"), (-3, "0s")])
def test_durations_read_as_seconds_minutes_hours(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_the_line_says_done_total_failed_and_time_left() -> None:
    assert progress_line(12, 48, 3, 190.0) == "fullgraph: 12/48 checks done, 3 failed, about 3m10s left"
    assert progress_line(1, 48, 0, None) == "fullgraph: 1/48 checks done, 0 failed, time left not known yet"
    assert progress_line(48, 48, 3, 0.0) == "fullgraph: 48/48 checks done, 3 failed"


# --- the count, fed reports as the controller gets them --------------------------------------------------------------


def fake_report(nodeid: str, when: str, duration: float = 1.0, failed: bool = False) -> pytest.TestReport:
    return cast(pytest.TestReport, SimpleNamespace(nodeid=nodeid, when=when, duration=duration, failed=failed))


def counting() -> Progress:
    progress = Progress(lambda nodeid: ("m", nodeid, "forward", "float32") if nodeid.startswith("c") else None)
    progress.collected(["c1", "c2", "c3", "other"])
    progress.collected(["c1"])  # a second worker's collection: the same tests
    return progress


def test_a_check_is_done_at_its_teardown_and_failed_in_any_phase() -> None:
    progress = counting()
    assert [progress.count(fake_report("c1", when)) for when in ("setup", "call")] == [None, None]
    assert progress.count(fake_report("c1", "teardown")) == "fullgraph: 1/3 checks done, 0 failed, about 6s left"
    assert progress.count(fake_report("other", "teardown")) is None  # not a check
    progress.count(fake_report("c2", "call", duration=6.0, failed=True))
    assert progress.count(fake_report("c2", "teardown")) == "fullgraph: 2/3 checks done, 1 failed, about 5s left"
    assert progress.count(fake_report("c2", "teardown")) is None  # counted once


def test_a_test_whose_worker_died_is_done_and_failed() -> None:
    progress = counting()
    line = progress.count(fake_report("c3", CRASHED_PHASE, duration=0.0, failed=True))
    assert line == "fullgraph: 1/3 checks done, 1 failed, time left not known yet"


class _Writer:
    def __init__(self) -> None:
        self.width_of_current_line = 0


class _Terminal:
    """What ``write_full_line`` asks of pytest's terminal reporter, recording the text."""

    def __init__(self) -> None:
        self._tw, self.text = _Writer(), ""

    def ensure_newline(self) -> None:
        pass

    def write(self, text: str) -> None:
        self.text += text
        self._tw.width_of_current_line = len(text.rpartition("\n")[2])

    def write_line(self, line: str) -> None:
        self.write(line + "\n")


def test_a_line_never_joins_xdists_dots() -> None:
    terminal = _Terminal()
    config = cast(pytest.Config, SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: terminal)))
    terminal.write("..")
    write_full_line(config, "fullgraph: 2/3 checks done")
    write_full_line(config, "fullgraph: 3/3 checks done")
    assert terminal.text == "..\nfullgraph: 2/3 checks done\nfullgraph: 3/3 checks done\n"


# --- as users run it --------------------------------------------------------------------------------------------------

TWO_CHECKS = ["--fullgraph-models=toy,toy_drift", "--fullgraph-backend=eager", "-k", "greedy and forward",
              "-p", "no:cacheprovider"]


def test_progress_lines_count_the_checks_and_the_report_has_their_durations(toy_project: pytest.Pytester,
                                                                             tmp_path: Path) -> None:
    result = toy_project.runpytest(*TWO_CHECKS, "-v", "--fullgraph-progress", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, failed=1)  # toy_drift's mismatch
    # each after pytest's own line for the test, whole
    result.stdout.fnmatch_lines(["*toy-greedy-forward-float32*PASSED*",
                                 "fullgraph: 1/2 checks done, 0 failed, about *s left",
                                 "*toy_drift-greedy-forward-float32*FAILED*", "fullgraph: 2/2 checks done, 1 failed"])
    checks: list[dict[str, Any]] = read_report(tmp_path)["checks"]
    assert all(isinstance(check["duration_s"], float) and check["duration_s"] > 0 for check in checks)
    assert all(check["duration_s"] >= sum(check["timings"].values()) for check in checks)


def test_without_the_option_there_is_no_progress_line(toy_project: pytest.Pytester) -> None:
    result = toy_project.runpytest(*TWO_CHECKS, "-v")
    result.assert_outcomes(passed=1, failed=1)
    assert "checks done" not in result.stdout.str()


def test_a_costs_report_that_cannot_be_read_is_a_usage_error_when_progress_reads_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--fullgraph-progress", "--fullgraph-shard-costs=missing.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--fullgraph-shard-costs: " in result.stderr.str() and "missing.json" in result.stderr.str()
