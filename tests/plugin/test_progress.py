"""Progress on long runs (#25 item 7, #43 item 2): each check's ``duration_s`` in the report, and
``--fullgraph-progress``'s lines, which count every test of the run: their estimate and whether they are written
are tested here with fakes, the lines with runs of two toy checks and a test that is no check."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.results import SCHEMA_VERSION, CheckResult, check_seconds
from pytest_fullgraph.plugin.parsers import PROGRESS_MODES, ProgressChoice
from pytest_fullgraph.plugin.progress import (
    CRASHED_PHASE,
    Progress,
    duration_text,
    expected_costs,
    progress_line,
    seconds_left,
    wanted,
    write_full_line,
)
from pytest_fullgraph.report.shard import model_costs
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
    assert written["version"] == SCHEMA_VERSION and written["checks"][0]["duration_s"] == 2.5
    assert report.Report.from_dict(written, "new").checks[0].duration_s == 2.5
    older = {**written, "version": 6, "checks": [{key: value for key, value in written["checks"][0].items()
                                                   if key != "duration_s"}]}
    assert report.Report.from_dict(older, "old").checks[0].duration_s is None


# --- the estimate ---------------------------------------------------------------------------------------------------


def test_without_a_costs_report_the_time_left_is_the_mean_test_times_the_tests_left_over_the_workers() -> None:
    assert seconds_left([None] * 6, workers=2, mean=10.0) == 30.0  # 10 s a test, 6 left, 2 at once
    assert seconds_left([None], workers=4, mean=10.0) == 10.0  # one test left uses one worker
    assert seconds_left([None] * 6, workers=1) is None  # nothing finished, nothing known
    assert seconds_left([], workers=1, mean=10.0) == 0.0


def test_a_costs_reports_seconds_are_taken_as_they_are_then_scaled_by_this_runs_pace() -> None:
    assert seconds_left([10.0, 30.0], workers=2) == 20.0
    # the earlier report said 10 s for a finished check; here it took 20: this machine is twice as slow
    assert seconds_left([10.0, 30.0], workers=1, pace=2.0) == 80.0


def test_tests_the_report_does_not_price_cost_this_runs_mean_beside_the_priced_ones() -> None:
    assert seconds_left([10.0, None, None], workers=1, pace=2.0, mean=5.0) == 30.0
    assert seconds_left([10.0, None], workers=1, pace=2.0) is None  # no test finished to give the mean


def test_expected_costs_come_per_check_then_per_model_then_overall_from_the_earlier_report() -> None:
    earlier = report.Report({}, [result("a", duration=10.0), result("a", "eos", duration=30.0),
                                 result("b", duration=100.0), result("b", "eos", duration=0.0)])
    tests = {"t1": ("a", "greedy", "forward", "float32"), "t2": ("a", "sample", "forward", "float32"),
             "t3": ("b", "eos", "forward", "float32"), "t4": ("new", "greedy", "forward", "float32"),
             "property": None}
    # known; a's median; b's skipped (0 s) check counts as unknown, so b's median; the median of all known; a test
    # that is no check has no price there
    assert expected_costs(tests, earlier) == {"t1": 10.0, "t2": 20.0, "t3": 100.0, "t4": 30.0}
    assert expected_costs(tests, None) == {}
    assert expected_costs(tests, report.Report({}, [result("a")])) == {}  # no cost known: as none


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0s"), (59.4, "59s"), (60, "1m00s"), (190, "3m10s"),
                                               (3600, "1h00m"), (7500, "2h05m"), (-3, "0s")])
def test_durations_read_as_seconds_minutes_hours(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_the_line_says_done_total_failed_and_time_left() -> None:
    assert progress_line(12, 48, 3, 190.0) == "fullgraph: 12/48 tests done, 3 failed, about 3m10s left"
    assert progress_line(1, 48, 0, None) == "fullgraph: 1/48 tests done, 0 failed, time left not known yet"
    assert progress_line(48, 48, 3, 0.0) == "fullgraph: 48/48 tests done, 3 failed"


# --- the count, fed reports as the controller gets them --------------------------------------------------------------


def fake_report(nodeid: str, when: str, duration: float = 1.0, failed: bool = False) -> pytest.TestReport:
    return cast(pytest.TestReport, SimpleNamespace(nodeid=nodeid, when=when, duration=duration, failed=failed))


def counting(earlier: report.Report | None = None) -> Progress:
    progress = Progress(lambda nodeid: ("m", nodeid, "forward", "float32") if nodeid.startswith("c") else None,
                        earlier)
    progress.collected(["c1", "c2", "c3", "other"])
    progress.collected(["c1"])  # a second worker's collection: the same tests
    return progress


def test_every_test_is_done_at_its_teardown_and_failed_in_any_phase() -> None:
    progress = counting()
    assert [progress.count(fake_report("c1", when)) for when in ("setup", "call")] == [None, None]
    # 3 s for c1 (three phases of 1 s), 3 tests left at that mean
    assert progress.count(fake_report("c1", "teardown")) == "fullgraph: 1/4 tests done, 0 failed, about 9s left"
    # a test that is no check counts the same: 1 s, so the mean is 2 s
    assert progress.count(fake_report("other", "teardown")) == "fullgraph: 2/4 tests done, 0 failed, about 4s left"
    progress.count(fake_report("c2", "call", duration=5.0, failed=True))
    assert progress.count(fake_report("c2", "teardown")) == "fullgraph: 3/4 tests done, 1 failed, about 3s left"
    assert progress.count(fake_report("c2", "teardown")) is None  # counted once
    assert progress.count(fake_report("c3", "teardown")) == "fullgraph: 4/4 tests done, 1 failed"


def test_checks_the_costs_report_prices_are_scaled_by_the_pace_and_other_tests_cost_the_mean() -> None:
    earlier = report.Report({}, [result("m", "c1", duration=2.0), result("m", "c2", duration=4.0)])
    progress = counting(earlier)
    assert progress.seconds_left() is None  # "other" has no price and no test finished yet
    progress.count(fake_report("c1", "call", duration=4.0))  # twice the report's 2 s: the pace is 2
    # c2 (4 s) and c3 (m's median, 3 s) at pace 2, "other" at the mean of the finished tests (c1's 4 s)
    line = progress.count(fake_report("c1", "teardown", duration=0.0))
    assert line == "fullgraph: 1/4 tests done, 0 failed, about 18s left"


def test_a_test_whose_worker_died_is_done_and_failed() -> None:
    progress = counting()
    line = progress.count(fake_report("c3", CRASHED_PHASE, duration=0.0, failed=True))
    assert line == "fullgraph: 1/4 tests done, 1 failed, time left not known yet"


# --- whether the lines are written ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "isatty", "environ", "has_checks", "written"), [
    ("auto", True, {}, True, True),  # a terminal, not CI, a run with checks
    ("auto", False, {}, True, False),  # stdout a pipe or a file: a log
    ("auto", True, {"CI": "true"}, True, False),  # a CI job, even one with a terminal
    ("auto", True, {"CI": "1"}, True, False),
    ("auto", True, {"CI": "false"}, True, True),  # a variable that says it is no CI job
    ("auto", True, {"CI": ""}, True, True),
    ("auto", True, {}, False, False),  # another project's tests, where the plugin is merely installed
    ("on", False, {"CI": "true"}, False, True),
    ("off", True, {}, True, False),
])
def test_auto_writes_in_a_terminal_outside_ci_in_runs_with_checks_and_on_and_off_say_so(
        mode: str, isatty: bool, environ: dict[str, str], has_checks: bool, written: bool) -> None:
    assert wanted(mode, isatty, environ, has_checks) is written


@pytest.mark.parametrize(("text", "mode"), [("auto", "auto"), ("ON", "on"), (" off ", "off"), ("true", "on"),
                                            ("1", "on"), ("no", "off"), ("False", "off")])
def test_a_progress_mode_or_a_boolean_from_when_the_option_was_a_flag(text: str, mode: str) -> None:
    assert ProgressChoice(PROGRESS_MODES, "a progress mode")(text, "ini fullgraph_progress") == mode


def test_a_path_taken_for_the_bare_flags_value_is_an_error_that_says_so() -> None:
    with pytest.raises(pytest.UsageError, match=r"--fullgraph-progress='tests/' is not a progress mode.*"
                                                r"write --fullgraph-progress=on before a path"):
        ProgressChoice(PROGRESS_MODES, "a progress mode")("tests/", "--fullgraph-progress")


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
    write_full_line(config, "fullgraph: 2/3 tests done")
    write_full_line(config, "fullgraph: 3/3 tests done")
    assert terminal.text == "..\nfullgraph: 2/3 tests done\nfullgraph: 3/3 tests done\n"


# --- as users run it --------------------------------------------------------------------------------------------------

#: Two checks and a test that is no check, the plain test first (its module is collected before the suite).
TWO_CHECKS_AND_A_TEST = ["--fullgraph-models=toy,toy_drift", "--fullgraph-backend=eager", "-k",
                         "(greedy and forward) or plain", "-p", "no:cacheprovider"]


def with_a_plain_test(project: pytest.Pytester) -> pytest.Pytester:
    project.makepyfile(test_plain="def test_plain():\n    pass\n")
    return project


def test_progress_lines_count_every_test_and_the_report_has_the_checks_durations(toy_project: pytest.Pytester,
                                                                                 tmp_path: Path) -> None:
    result = with_a_plain_test(toy_project).runpytest(*TWO_CHECKS_AND_A_TEST, "-v", "--fullgraph-progress",
                                                      f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=2, failed=1)  # toy_drift's mismatch
    # each after pytest's own line for the test, whole
    result.stdout.fnmatch_lines(["*test_plain.py::test_plain PASSED*",
                                 "fullgraph: 1/3 tests done, 0 failed, about *s left",
                                 "*toy-greedy-forward-float32*PASSED*",
                                 "fullgraph: 2/3 tests done, 0 failed, about *s left",
                                 "*toy_drift-greedy-forward-float32*FAILED*", "fullgraph: 3/3 tests done, 1 failed"])
    checks: list[dict[str, Any]] = read_report(tmp_path)["checks"]
    assert len(checks) == 2
    assert all(isinstance(check["duration_s"], float) and check["duration_s"] > 0 for check in checks)
    assert all(check["duration_s"] >= sum(check["timings"].values()) for check in checks)


@pytest.mark.breadth  # two runs; the unit test of the old boolean values above decides the same
def test_an_ini_from_when_the_option_was_a_flag_still_turns_it_on_and_off_turns_it_off(
        toy_project: pytest.Pytester) -> None:
    with_a_plain_test(toy_project).makeini("[pytest]\nfullgraph_progress = true\n")
    result = toy_project.runpytest(*TWO_CHECKS_AND_A_TEST)
    result.stdout.fnmatch_lines(["fullgraph: 3/3 tests done, 1 failed"])
    assert "tests done" not in toy_project.runpytest(*TWO_CHECKS_AND_A_TEST, "--fullgraph-progress=off").stdout.str()


def test_by_default_there_is_no_progress_line_where_stdout_is_no_terminal(toy_project: pytest.Pytester) -> None:
    result = with_a_plain_test(toy_project).runpytest(*TWO_CHECKS_AND_A_TEST, "-v")
    result.assert_outcomes(passed=2, failed=1)
    assert "tests done" not in result.stdout.str()


@pytest.mark.breadth  # the unit test of the auto mode above decides the same; this one runs pytest in a pseudo-terminal
def test_by_default_a_run_in_a_terminal_writes_the_lines(toy_project: pytest.Pytester) -> None:
    """In a pseudo-terminal, as a user's shell runs pytest; without the ``CI`` variable of a CI job."""
    with_a_plain_test(toy_project)
    controller, terminal = pty.openpty()
    environ = {name: value for name, value in os.environ.items() if name != "CI"}
    process = subprocess.Popen([sys.executable, "-m", "pytest", *TWO_CHECKS_AND_A_TEST, "--color=no"],
                               cwd=toy_project.path, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal,
                               env=environ)
    os.close(terminal)
    stuck = threading.Timer(300, process.kill)  # a hung run fails the test instead of hanging the suite
    stuck.start()
    output = b""
    try:
        while chunk := os.read(controller, 65536):
            output += chunk
    except OSError:  # the terminal's other end closed: the run is over
        pass
    finally:
        os.close(controller)
        stuck.cancel()
    assert process.wait() == pytest.ExitCode.TESTS_FAILED, output.decode(errors="replace")
    assert "fullgraph: 3/3 tests done, 1 failed" in output.decode(errors="replace")


def test_a_costs_report_that_cannot_be_read_is_a_usage_error_when_progress_reads_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--fullgraph-progress", "--fullgraph-shard-costs=missing.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--fullgraph-shard-costs: " in result.stderr.str() and "missing.json" in result.stderr.str()
