"""A run stopped by SIGTERM (a CI job's time limit, a cancelled job, ``kill``) still writes its report.

SIGTERM's default action ends the process at once, before pytest reaches the hook that writes the report, so
every finished check would be lost. Raised as ``KeyboardInterrupt`` instead, it stops the run the way Ctrl-C
does: the check in progress is dropped, pytest finishes the session as interrupted, and the report of the
checks that finished is written, saying which signal stopped it. A second SIGTERM ends the process at once.
Only the controller listens: under xdist it stops and tears down its workers itself.
"""

from __future__ import annotations

import signal
import threading
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
