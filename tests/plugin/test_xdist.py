"""The report is the same with no xdist, -n 1 and -n 2 (timings aside); only the controller writes it."""

from __future__ import annotations

import re
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
    """The report of the same four checks (and a test that is no check) run with these xdist options, its timings
    left out."""
    out = tmp_path / (workers[-1] if workers else "serial")
    project.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = project.runpytest_subprocess("--fullgraph-models=toy,toy_break", "--fullgraph-backend=eager",
                                          "-k", "(forward and (greedy or eos)) or plain", "-p", "no:cacheprovider",
                                          f"--fullgraph-report={out}", "--fullgraph-progress", *workers)
    result.assert_outcomes(passed=3, xfailed=2)
    # the controller counts every worker's tests, checks or not, each line whole (not glued to xdist's dots)
    result.stdout.fnmatch_lines(["fullgraph: 1/5 tests done, 0 failed, *",
                                 "fullgraph: 5/5 tests done, 0 failed"])
    assert sorted(p.name for p in out.iterdir()) == ["fullgraph-report.html", "fullgraph-report.json",
                                                     "fullgraph-report.md"]
    report = without_timings(read_report(out))
    assert len(report["checks"]) == 4
    return report


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.breadth
def test_report_is_identical_without_xdist_and_with_workers(toy_project: pytest.Pytester, tmp_path: Path,
                                                            workers: str) -> None:
    assert report_with(toy_project, tmp_path, []) == report_with(toy_project, tmp_path, ["-n", workers])


def test_crashed_worker_is_named_in_the_report(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """A worker that dies outside any check is named in the report (the breadth test below covers one in a check)."""
    pytester.makepyfile(
        "import os\n"
        "def test_ok():\n"
        "    pass\n"
        "def test_crash():\n"
        "    os._exit(3)\n"
    )
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}",
                                           "--max-worker-restart=0")
    crashed = read_report(tmp_path)["crashed_workers"]
    assert [worker["node"] for worker in crashed] == ["gw0"], result.stdout.str()
    result.stdout.fnmatch_lines(["*crashed worker gw0*"])


@pytest.mark.breadth
def test_worker_crash_during_a_check_is_that_checks_error(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    """Model builds that kill their worker (``os._exit``, a segfault): the check each was running is an ``error``
    naming the crash, and for the segfault where the worker died; the crashed workers name the tests, and the
    other checks still run on a replacement worker. One run for both: each is a subprocess of xdist workers."""
    toy_project.makepyfile(conftest=(toy_project.path / "conftest.py").read_text()
                           + "\nimport ctypes\nimport os\n\n\ndef segfault():\n    return ctypes.string_at(0)\n\n\n"
                             "register_model('toy_exit', lambda: os._exit(3))\nregister_model('toy_segv', segfault)\n")
    result = toy_project.runpytest_subprocess("-n", "1", "--fullgraph-models=toy_exit,toy_segv,toy", "-k",
                                              "greedy and forward", "--fullgraph-backend=eager",
                                              "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    report = read_report(tmp_path)
    checks = {f"{c['model']}-{c['scenario']}-{c['level']}": c for c in report["checks"]}
    exited, segfaulted = checks["toy_exit-greedy-forward"], checks["toy_segv-greedy-forward"]
    assert exited["outcome"] == segfaulted["outcome"] == "error", result.stdout.str()
    assert re.fullmatch(r"worker gw\d crashed while running this check \(\S+toy_exit-greedy-forward-float32\]\)",
                        exited["message"]), exited["message"]  # os._exit leaves no traceback
    # the innermost frame of the thread that died: ctypes' own, as ExecuTorch's ``execute`` is in the dump below
    site = re.search(r"\): (Segmentation fault at \S*ctypes/__init__\.py:\d+ in string_at)$", segfaulted["message"])
    assert site is not None, segfaulted["message"]
    assert checks["toy-greedy-forward"]["outcome"] == "pass"
    by_test = {w["test"].rpartition("[")[2]: w for w in report["crashed_workers"]}
    assert sorted(by_test) == ["toy_exit-greedy-forward-float32]", "toy_segv-greedy-forward-float32]"]
    assert by_test["toy_segv-greedy-forward-float32]"]["error"] == f"Not properly terminated; {site.group(1)}"
    result.stdout.fnmatch_lines(["*crashed worker gw* while running *test_conformance.py::*toy_exit-greedy-forward*"])


#: faulthandler's dump of a worker that died in ExecuTorch's runtime (an hf_executorch check of deepseek_v3,
#: shortened): other threads first, then the one that died.
EXECUTORCH_DUMP = """Fatal Python error: Segmentation fault

Thread 0x00007f1ca95ff6c0 (most recent call first):
  File "/venv/lib/python3.11/site-packages/execnet/gateway_base.py", line 534 in read
  File "/venv/lib/python3.11/site-packages/execnet/gateway_base.py", line 411 in _perform_spawn

Current thread 0x00007f1caaa24b80 (most recent call first):
  File "/venv/lib/python3.11/site-packages/executorch/runtime/__init__.py", line 147 in execute
  File "/venv/lib/python3.11/site-packages/transformers/exporters/runners/runner_executorch.py", line 60 in __call__

Extension modules: yaml._yaml, torch._C (total: 2)
"""


def test_the_site_of_a_crash_is_the_fatal_error_and_the_dying_threads_innermost_frame() -> None:
    from pytest_fullgraph.plugin.crash_sites import crash_site

    site = crash_site(EXECUTORCH_DUMP)
    assert site.startswith("Segmentation fault at ") and site.endswith("executorch/runtime/__init__.py:147 in execute")
    assert crash_site("Fatal Python error: Aborted\n\n") == "Aborted"
    assert crash_site("") == ""  # os._exit leaves nothing


@pytest.mark.breadth
def test_what_executorchs_runtime_logged_before_killing_a_worker_is_kept(pytester: pytest.Pytester,
                                                                          tmp_path: Path) -> None:
    """A segfault inside ``runtime_log`` (as ExecuTorch's ``execute`` dies) loses the block's captured stderr with the
    process; the worker keeps it in a file of its own, and the crash record says it after the site."""
    pytester.makepyfile(
        "import ctypes, os\n"
        "from pytest_fullgraph.levels.executorch_runtime import runtime_log\n"
        "def test_crash():\n"
        "    with runtime_log():\n"
        "        os.write(2, b'[tensor_impl.cpp:135] Attempted to resize a static tensor.\\n')\n"
        "        ctypes.string_at(0)\n"
    )
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}",
                                           "--max-worker-restart=0")
    [crashed] = read_report(tmp_path)["crashed_workers"]
    assert re.fullmatch(r"Not properly terminated; Segmentation fault at \S*ctypes/__init__\.py:\d+ in string_at; "
                        r"ExecuTorch's runtime logged before: Attempted to resize a static tensor\. "
                        r"\(tensor_impl\.cpp:135\)",
                        crashed["error"]), result.stdout.str()
