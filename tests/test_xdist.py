"""The report is the same with no xdist, -n 1 and -n 2 (timings aside); only the controller writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import read_report


def without_timings(report: dict[str, Any]) -> dict[str, Any]:
    for check in report["checks"]:
        check.pop("timings")
        check.pop("duration_s")
    return report


def report_with(project: pytest.Pytester, tmp_path: Path, workers: list[str]) -> dict[str, Any]:
    """The report of the same four checks run with these xdist options, its timings left out."""
    out = tmp_path / (workers[-1] if workers else "serial")
    result = project.runpytest_subprocess("--fullgraph-models=toy,toy_break", "--fullgraph-backend=eager",
                                          "-k", "forward and (greedy or eos)", "-p", "no:cacheprovider",
                                          f"--fullgraph-report={out}", "--fullgraph-progress", *workers)
    result.assert_outcomes(passed=2, xfailed=2)
    # the controller counts every worker's checks, each line whole (not glued to xdist's dots)
    result.stdout.fnmatch_lines(["fullgraph: 1/4 checks done, 0 failed, about *s left",
                                 "fullgraph: 4/4 checks done, 0 failed"])
    assert sorted(p.name for p in out.iterdir()) == ["fullgraph-report.html", "fullgraph-report.json",
                                                     "fullgraph-report.md"]
    report = without_timings(read_report(out))
    assert len(report["checks"]) == 4
    return report


@pytest.mark.parametrize("workers", [pytest.param("1", marks=pytest.mark.breadth), "2"])
def test_report_is_identical_without_xdist_and_with_workers(toy_project: pytest.Pytester, tmp_path: Path,
                                                            workers: str) -> None:
    assert report_with(toy_project, tmp_path, []) == report_with(toy_project, tmp_path, ["-n", workers])


def test_crashed_worker_is_named_in_the_report(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(
        "import os\n"
        "def test_ok(fullgraph_check):\n"
        "    fullgraph_check('llama', 'greedy', 'forward')\n"
        "def test_crash():\n"
        "    os._exit(3)\n"
    )
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", "--fullgraph-backend=eager",
                                           f"--fullgraph-report={tmp_path}", "--max-worker-restart=0")
    crashed = read_report(tmp_path)["crashed_workers"]
    assert [worker["node"] for worker in crashed] == ["gw0"], result.stdout.str()
    result.stdout.fnmatch_lines(["*crashed worker gw0*"])


def test_worker_crash_during_a_check_is_that_checks_error(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    """A model build that kills its worker: the check it was running is an ``error`` naming the crash, the
    crashed worker names the test, and the other checks still run on a replacement worker."""
    toy_project.makepyfile(conftest=(toy_project.path / "conftest.py").read_text()
                           + "\nimport os\nregister_model('toy_exit', lambda: os._exit(3))\n")
    result = toy_project.runpytest_subprocess("-n", "1", "--fullgraph-models=toy_exit,toy", "-k",
                                              "greedy and forward", "--fullgraph-backend=eager",
                                              "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    report = read_report(tmp_path)
    checks = {f"{c['model']}-{c['scenario']}-{c['level']}": c for c in report["checks"]}
    crashed = checks["toy_exit-greedy-forward"]
    assert crashed["outcome"] == "error", result.stdout.str()
    assert crashed["message"].startswith("worker gw0 crashed while running this check")
    assert checks["toy-greedy-forward"]["outcome"] == "pass"
    assert [w["node"] for w in report["crashed_workers"]] == ["gw0"]
    assert report["crashed_workers"][0]["test"].endswith(
        "test_conformance.py::test_generation_compiles_exactly[toy_exit-greedy-forward-float32]")
    result.stdout.fnmatch_lines(
        ["*crashed worker gw0 while running *test_conformance.py::*toy_exit-greedy-forward-float32*"])
