"""Where an xdist worker died. pytest's faulthandler writes a dying worker's traceback to the worker's stderr, which
xdist does not hand back: the controller heard only "Not properly terminated". Each worker here points faulthandler
at a file of its own, and the controller reads the dead worker's file, so a check that killed its process is
recorded with the fatal error and the innermost frame of the thread that died (measured: ExecuTorch's runtime
segfaulting in ``executorch/runtime/__init__.py`` ``execute`` on transformers' programs of mixture-of-experts
models), which the report's "whose fault" reads like any other place. What ExecuTorch's runtime logged before it
killed the worker is kept in a second file of the worker's (``executorch_runtime.LOG_FILE``) and said too."""

from __future__ import annotations

import faulthandler
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

import pytest

from pytest_fullgraph.core.breaks import display_path
from pytest_fullgraph.levels import executorch_runtime

#: The ``workerinput`` key that hands each worker the directory for its file.
WORKER_INPUT_KEY = "fullgraph_crash_dir"
#: A worker's file of what ExecuTorch's runtime logs while a call runs, beside its faulthandler file.
RUNTIME_LOG_SUFFIX = ".runtime.log"
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.MULTILINE)
_CURRENT_THREAD = re.compile(r"^Current thread [^\n]*\n((?:  File [^\n]*\n?)+)", re.MULTILINE)
_FRAME = re.compile(r'  File "(.+)", line (\d+) in (\S+)')


class CrashSites:
    """Controller side: a directory the workers write their tracebacks to, and the site of a dead worker's crash."""

    def __init__(self) -> None:
        self.directory: Path | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="fullgraph-crashes-"))
        node.workerinput[WORKER_INPUT_KEY] = str(self.directory)

    def site(self, worker: str) -> str:
        """"Segmentation fault at executorch/runtime/__init__.py:147 in execute" for a worker that died that way;
        "" when it left nothing (``os._exit``, no xdist)."""
        if self.directory is None:
            return ""
        site = crash_site(_read(self.directory / f"{worker}.txt"))
        reasons = executorch_runtime.runtime_reasons(_read(self.directory / f"{worker}{RUNTIME_LOG_SUFFIX}"))
        if site and reasons:
            site += f"; ExecuTorch's runtime logged before: {'; '.join(reasons)}"
        return site

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def crash_site(dump: str) -> str:
    """The fatal error and the innermost frame of the thread that died, from faulthandler's output."""
    fatal = _FATAL.search(dump)
    if fatal is None:
        return ""
    thread = _CURRENT_THREAD.search(dump)
    frame = _FRAME.match(thread.group(1)) if thread else None
    if frame is None:
        return fatal.group(1)
    return f"{fatal.group(1)} at {display_path(frame.group(1))}:{frame.group(2)} in {frame.group(3)}"


class WorkerCrashFile:
    """Worker side: from the session's start, faulthandler writes to this worker's file (after pytest's own
    faulthandler plugin has pointed it at stderr; pytest turns it off when the worker ends)."""

    def __init__(self, config: pytest.Config) -> None:
        given: dict[str, Any] = config.workerinput  # type: ignore[attr-defined]  # xdist sets it on workers
        self.path = Path(given[WORKER_INPUT_KEY]) / f"{given['workerid']}.txt"
        self.handle: IO[str] | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.handle = self.path.open("w")
        faulthandler.enable(file=self.handle, all_threads=True)
        session.config.add_cleanup(self.handle.close)
        executorch_runtime.LOG_FILE = self.path.with_suffix(RUNTIME_LOG_SUFFIX)
        session.config.add_cleanup(lambda: setattr(executorch_runtime, "LOG_FILE", None))


def install(config: pytest.Config, is_worker: bool) -> CrashSites | None:
    """The controller's ``CrashSites`` (registered), or on a worker its file (registered); None on a worker."""
    if is_worker:
        if WORKER_INPUT_KEY in getattr(config, "workerinput", {}):
            config.pluginmanager.register(WorkerCrashFile(config), f"fullgraph-crash-file-{id(config)}")
        return None
    sites = CrashSites()
    config.pluginmanager.register(sites, f"fullgraph-crash-sites-{id(config)}")
    return sites
