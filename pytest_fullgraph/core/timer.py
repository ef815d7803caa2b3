"""A check's time limit: SIGALRM raises ``CheckTimeout`` into the check, after letting an import finish."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType


class CheckTimeout(BaseException):
    """Raised into a check that runs past its time limit; a ``BaseException`` so that no ``except Exception``
    on the way (the model's, transformers', dynamo's) turns it into something else."""


#: When a check's time runs out during an import, the timeout waits this long and looks again.
IMPORT_GRACE_S = 0.2


def importing(frame: FrameType | None) -> bool:
    """Whether the interrupted code is inside an import (importlib's bootstrap frames on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``CheckTimeout`` in this thread after ``seconds`` (0: no limit), by SIGALRM.

    Only the main thread of a POSIX process can take the signal; elsewhere there is no limit. An import in
    progress is let finish first. A timer that was already armed (pytest-timeout's signal method, say) is
    re-armed afterwards with the time it had left.
    """
    if seconds <= 0 or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        if importing(frame):  # an import stopped half way leaves a broken module behind for every later check
            signal.setitimer(signal.ITIMER_REAL, IMPORT_GRACE_S)
            return
        raise CheckTimeout(seconds)

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, expire)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), previous_interval)
