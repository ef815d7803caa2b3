"""``run_check``'s time limit, with fake levels: a check past it is an error naming its stage; a break stays a
break when only its diagnostic pass runs out; the timer re-arms and waits for an import in progress."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from pytest_fullgraph.core.compile_events import CountingBackend
from tests.check.scripted import PLANTED, FakeLevel, ScriptedModel, check
from tests.factories import a_break


class SlowLevel(FakeLevel):
    """Compiles forever (or breaks, then diagnoses forever)."""

    def __init__(self, *, slow_in: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slow_in = slow_in

    def run_compiled(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> torch.Tensor:
        if self.slow_in == "compile":
            time.sleep(30)
        return super().run_compiled(model, inputs, config, backend)

    def diagnose(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> None:
        backend.trace.breaks.append(a_break(*PLANTED))
        time.sleep(30)


def test_a_check_past_its_timeout_is_an_error_naming_the_stage() -> None:
    started = time.monotonic()
    result = check(ScriptedModel(), SlowLevel(slow_in="compile"), timeout=0.3)
    assert (result.outcome, result.message) == ("error", "timeout after 0.3 s, during compiled generation")
    assert time.monotonic() - started < 10


def test_a_break_stays_a_break_when_only_its_diagnostic_pass_times_out() -> None:
    from torch._dynamo.exc import Unsupported

    level = SlowLevel(slow_in="diagnose", raises=Unsupported("planted"))
    result = check(ScriptedModel(), level, timeout=0.3)
    assert result.outcome == "break"
    assert result.message.endswith("(the pass recording every break was stopped by the 0.3 s timeout)")


def test_time_limit_rearms_a_timer_that_was_already_set() -> None:
    import signal

    from pytest_fullgraph.core.timer import CheckTimeout, time_limit

    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        with pytest.raises(CheckTimeout), time_limit(0.1):
            time.sleep(5)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 3.0 < left < 5.0  # the outer timer runs on with what it had left
        with time_limit(0):  # no limit: nothing armed, nothing raised
            time.sleep(0.01)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == []


def test_a_timeout_waits_for_an_import_in_progress(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted half way, an import leaves a broken module (sympy without sympy.core.symbol, seen here)."""
    import importlib
    import sys

    from pytest_fullgraph.core import timer

    (tmp_path / "planted_import.py").write_text(
        "import sys\nfrom pytest_fullgraph.core.timer import importing\nSEEN = importing(sys._getframe())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.import_module("planted_import").SEEN is True
    assert timer.importing(sys._getframe()) is False
