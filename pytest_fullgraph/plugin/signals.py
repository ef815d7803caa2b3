"""A run stopped by SIGTERM (a CI job's time limit, a cancelled job, ``kill``) still writes its report.

SIGTERM's default action ends the process at once, before pytest reaches the hook that writes the report, so
every finished check would be lost. Raised as ``KeyboardInterrupt`` instead, it stops the run the way Ctrl-C
does: the check in progress is dropped, pytest finishes the session as interrupted, and the report of the
checks that finished is written, saying which signal stopped it. A second SIGTERM ends the process at once.
Only the controller listens: under xdist it stops and tears down its workers itself.

A CI runner or ``docker stop`` allows about 10 s between SIGTERM and SIGKILL, and the report should be on disk within
a second or two. Three things stood in between (14 s measured with ``-n 2`` on a loaded 2-core machine): pytest
formatting the interrupt's traceback, xdist's teardown, which waits up to 10 s for a worker busy in a check, and the
report's imports (torch, transformers, dynamo's break registry), which an xdist controller, running no check, did
only then. Now the JSON is written in a ``tryfirst`` ``pytest_keyboard_interrupt``, the other files in a
``tryfirst`` ``pytest_sessionfinish`` (before xdist's teardown), and ``ReportWarmup`` loads the imports in a thread
while the run goes on; a signal that comes before they are loaded gets a report built without them.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where the run was; pytest treats it as the Ctrl-C it stands for."""


class SigtermListener:
    """Turns this process's first SIGTERM into ``Terminated`` while installed; remembers that it came."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: Any = None

    def install(self) -> bool:
        """Listen, unless this is not the main thread (where Python takes signals) or SIGTERM is ignored."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:  # nohup-like parents mean "do not stop me"
            return False
        self._previous = signal.signal(signal.SIGTERM, self._stop)
        return True

    def uninstall(self) -> None:
        """Put the earlier handler back (pytester runs several sessions in one process)."""
        current = signal.getsignal(signal.SIGTERM)
        if self._previous is not None and (current == self._stop or (self.received and current == signal.SIG_DFL)):
            signal.signal(signal.SIGTERM, self._previous)
        self._previous = None

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM: the caller means it now
        raise Terminated(f"{self.received} received: stopping, writing the report of the checks that finished")

    def run_status(self) -> dict[str, str]:
        """What the report's ``run`` adds: the signal that stopped the run, when one did."""
        return {"signal": self.received} if self.received else {}


def listen(config: pytest.Config) -> SigtermListener:
    """A listener installed for this pytest session and removed when it ends."""
    listener = SigtermListener()
    if listener.install():
        config.add_cleanup(listener.uninstall)
    return listener


def load_report_needs() -> None:
    """Import what building the report imports (``environment``, ``break_help``); a failure is left to the report's
    own imports, which raise it in the main thread."""
    try:
        import torch
        import transformers  # noqa: F401

        from pytest_fullgraph.core import break_help

        torch.cuda.is_available()
        break_help.preload()
    except Exception:  # the report's own imports say what is wrong
        pass


class ReportWarmup:
    """Loads the report's needs in a thread of the xdist controller, once, while the workers run the checks.

    Only there: an xdist controller's main thread imports nothing of torch (it runs no test), so the thread cannot
    deadlock against it, and without xdist the checks have imported it all by the end. A thread, once the workers
    have collected: imported in the main thread, the modules would delay the workers' start, and a SIGTERM would
    interrupt them half imported.
    """

    def __init__(self, load: Callable[[], None] = load_report_needs) -> None:
        self._load = load
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start loading, unless it started already or this process has loaded the report's needs."""
        if self._thread is not None or "torch._dynamo" in sys.modules:
            return
        self._thread = threading.Thread(target=self._load, name="fullgraph-report-warmup", daemon=True)
        self._thread.start()

    @property
    def ready(self) -> bool:
        """Whether building the report imports nothing: loaded by this thread, or by the checks of this process."""
        return "torch._dynamo" in sys.modules and not (self._thread is not None and self._thread.is_alive())

    def wait(self) -> None:
        """Until the loading (if it started) is over: the report imports nothing while the thread does."""
        if self._thread is not None:
            self._thread.join()
