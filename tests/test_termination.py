"""A run stopped by SIGTERM (a CI time limit, ``kill``) writes the report of the checks that finished."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from pytest_fullgraph.termination import SigtermListener, Terminated
from tests.conftest import checks_by_id, read_report

#: a test module whose second test stops the run with SIGTERM after the first test's check finished
STOPPED_BY_SIGTERM = (
    "import os, signal, time\n"
    "def test_check(fullgraph_check):\n"
    "    fullgraph_check('toy', 'greedy', 'forward')\n"
    "def test_stop():\n"
    "    time.sleep({wait})  # under xdist: the controller has the first test's result before it is stopped\n"
    "    os.kill({target}, signal.SIGTERM)\n"
    "    time.sleep({wait})\n"
)


def _assert_stopped_report(out: Path) -> None:
    report = read_report(out)
    assert report["run"] == {"exitstatus": int(pytest.ExitCode.INTERRUPTED), "interrupted": True,
                             "signal": "SIGTERM"}
    assert list(checks_by_id(report)) == ["toy-greedy-forward"]
    assert "the run was interrupted (SIGTERM, exit status 2)" in (out / "fullgraph-report.md").read_text()


def test_sigterm_stops_the_run_and_the_report_is_written(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    toy_project.makepyfile(test_stop=STOPPED_BY_SIGTERM.format(wait=0, target="os.getpid()"))
    before = signal.getsignal(signal.SIGTERM)
    result = toy_project.runpytest("test_stop.py", "--fullgraph-models=toy", "--fullgraph-backend=eager",
                                   "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*run interrupted (SIGTERM, exit status 2): the report holds only the checks*"])
    _assert_stopped_report(tmp_path)
    assert signal.getsignal(signal.SIGTERM) == before  # the session put the handler back


def test_sigterm_to_the_xdist_controller_stops_its_workers_and_writes_the_report(
        toy_project: pytest.Pytester, tmp_path: Path) -> None:
    toy_project.makepyfile(test_stop=STOPPED_BY_SIGTERM.format(wait=1, target="os.getppid()"))
    result = toy_project.runpytest_subprocess("test_stop.py", "-n", "1", "--fullgraph-models=toy",
                                              "--fullgraph-backend=eager", "-p", "no:cacheprovider",
                                              f"--fullgraph-report={tmp_path}")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    _assert_stopped_report(tmp_path)


def test_the_first_sigterm_raises_and_a_second_is_left_to_the_default() -> None:
    listener = SigtermListener()
    before = signal.getsignal(signal.SIGTERM)
    assert listener.install()
    try:
        with pytest.raises(Terminated, match="SIGTERM received"):
            signal.raise_signal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert listener.run_status() == {"signal": "SIGTERM"}
    finally:
        listener.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before


def test_no_listener_where_sigterm_is_ignored_or_off_the_main_thread() -> None:
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert not SigtermListener().install()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
    installed: list[bool] = []
    thread = threading.Thread(target=lambda: installed.append(SigtermListener().install()))
    thread.start()
    thread.join()
    assert installed == [False] and SigtermListener().run_status() == {}
