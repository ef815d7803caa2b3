"""A run stopped by SIGTERM (a CI time limit, ``kill``) writes the report of the checks that finished."""

from __future__ import annotations

import importlib.metadata
import signal
import sys
import threading
from pathlib import Path

import pytest

from pytest_fullgraph.core.environment import environment
from pytest_fullgraph.plugin.signals import ReportWarmup, SigtermListener, Terminated
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


#: a test module whose third test stops the xdist controller with SIGTERM and stays busy, as a check compiling would,
#: until the report is on disk: it says so in a file when the report came while its worker was still running
STOPPED_WHILE_BUSY = (
    "import os, signal, time\n"
    "from pathlib import Path\n"
    "def test_check(fullgraph_check):\n"
    "    fullgraph_check('toy', 'greedy', 'forward')\n"
    "def test_second_check(fullgraph_check):\n"
    "    fullgraph_check('toy', 'eos', 'forward')\n"
    "def test_stop():\n"
    "    time.sleep(1)  # the controller has the checks' results before it is stopped\n"
    "    os.kill(os.getppid(), signal.SIGTERM)\n"
    "    report = Path({report!r})\n"
    "    for _ in range(600):  # xdist stops a busy worker within 10 s: the report comes first, or never here\n"
    "        if report.exists():\n"
    "            Path({seen!r}).write_text('the report was written while this worker was busy')\n"
    "            return\n"
    "        time.sleep(0.1)\n"
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


@pytest.mark.breadth
def test_sigterm_to_the_xdist_controller_stops_its_workers_and_writes_the_report(
        toy_project: pytest.Pytester, tmp_path: Path) -> None:
    toy_project.makepyfile(test_stop=STOPPED_BY_SIGTERM.format(wait=1, target="os.getppid()"))
    result = toy_project.runpytest_subprocess("test_stop.py", "-n", "1", "--fullgraph-models=toy",
                                              "--fullgraph-backend=eager", "-p", "no:cacheprovider",
                                              f"--fullgraph-report={tmp_path}")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    _assert_stopped_report(tmp_path)


@pytest.mark.breadth
def test_the_controller_writes_the_report_before_it_waits_for_a_busy_worker(toy_project: pytest.Pytester,
                                                                         tmp_path: Path) -> None:
    """#43 item 3: xdist's teardown waits up to 10 s for a worker in the middle of a test (a compile), past a CI
    runner's or ``docker stop``'s grace; the report comes first, holding the checks that finished."""
    out, seen = tmp_path / "report", tmp_path / "seen"
    toy_project.makepyfile(test_stop=STOPPED_WHILE_BUSY.format(report=str(out / "fullgraph-report.json"),
                                                               seen=str(seen)))
    result = toy_project.runpytest_subprocess("test_stop.py", "-n", "1", "--fullgraph-models=toy",
                                              "--fullgraph-backend=eager", "-p", "no:cacheprovider",
                                              f"--fullgraph-report={out}")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    report = read_report(out)
    assert report["run"]["interrupted"] and report["run"]["signal"] == "SIGTERM"
    assert sorted(checks_by_id(report)) == ["toy-eos-forward", "toy-greedy-forward"]
    assert seen.exists(), "the report was written only after the busy worker was stopped"


def test_the_report_needs_load_once_in_a_thread_and_the_report_waits_for_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch._dynamo", raising=False)  # as in an xdist controller
    started, release, loads = threading.Event(), threading.Event(), []

    def load() -> None:
        loads.append(threading.current_thread() is not threading.main_thread())
        started.set()
        release.wait(5)

    warmup = ReportWarmup(load)
    warmup.start()
    warmup.start()
    assert started.wait(5)
    release.set()
    warmup.wait()
    assert loads == [True]


def test_no_thread_where_the_checks_loaded_the_report_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch._dynamo", object())  # a run without xdist, after its first check
    loads: list[bool] = []
    warmup = ReportWarmup(lambda: loads.append(True))
    warmup.start()
    warmup.wait()
    assert loads == []


def test_a_signals_report_reads_the_versions_without_importing_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an xdist controller builds when a SIGTERM comes before the warmup loaded torch: no import, same text."""
    for name in ("torch", "transformers"):
        monkeypatch.delitem(sys.modules, name)
    facts = environment({}, {}, imports=False)
    assert "torch" not in sys.modules and "transformers" not in sys.modules
    assert facts["torch"] == importlib.metadata.version("torch") and facts["cuda_available"] is None
    assert facts["transformers"] == importlib.metadata.version("transformers")


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
