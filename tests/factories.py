"""Builders of the plugin's own test data, one of each: a graph break, a check's result, a report written as a run
writes it, and the command line run in a fresh process. Every argument has a default, so a test names only what it
is about."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_fullgraph import report
from pytest_fullgraph.core.break_help import help_for_ids
from pytest_fullgraph.core.results import BreakRecord, CheckResult

#: The file of transformers' generation loop, where ``generate``'s own breaks are.
GENERATION_UTILS = "transformers/generation/utils.py"


def a_break(file: str = "transformers/models/llama/modeling_llama.py", line: int = 7, origin: str = "model", *,
            gb_type: str = "Data-dependent branching", gb_id: str | None = "GB0170", message: str = "msg",
            function: str = "forward", source: str = "if x:", root_cause: bool = True,
            cause: BreakRecord | None = None, exception: str = "torch._dynamo.exc.Unsupported") -> BreakRecord:
    """A graph break at ``file:line`` whose fault is ``origin``'s: by default a data-dependent branch in a model's
    forward."""
    return BreakRecord(exception, gb_type, gb_id, message, file, line, function, source, origin,
                       root_cause=root_cause, cause=cause)


def a_check(model: str = "llama", outcome: str = "pass", message: str | None = None, *, scenario: str = "greedy",
            level: str = "decode", backend: str = "eager", max_new_tokens: int = 4,
            breaks: Iterable[BreakRecord] = (), **fields: Any) -> CheckResult:
    """One check's result: its message is its outcome unless given, its first break its breaks' first unless
    ``first_break`` is given; ``fields`` are any other fields of ``CheckResult``."""
    records = list(breaks)
    fields.setdefault("first_break", records[0] if records else None)
    return CheckResult(model, scenario, level, backend, max_new_tokens, outcome,
                       outcome if message is None else message, breaks=records, **fields)


#: What a report written by ``saved_report`` says of its run unless a test says otherwise.
REPORT_ENVIRONMENT: dict[str, Any] = {"torch": "2.13.0", "transformers": "5.24.0", "backend": "aot_eager",
                                      "max_new_tokens": 4}


def saved_report(directory: Path, checks: Iterable[CheckResult], **environment: Any) -> Path:
    """A report of ``checks`` written into ``directory`` as a run writes it, PyTorch's help for its breaks stored
    with it, its environment ``REPORT_ENVIRONMENT`` updated by ``environment``; the path of its JSON."""
    written = report.Report({**REPORT_ENVIRONMENT, **environment}, list(checks))
    written.stored_help = help_for_ids(written.gb_ids())
    report.write(written, directory)
    return directory / report.JSON_NAME


def cli(*args: str, timeout: float | None = 300) -> subprocess.CompletedProcess[str]:
    """``python -m pytest_fullgraph ARGS`` in a fresh process, its output captured as text; never raises on a
    failing status (the tests read it)."""
    return subprocess.run([sys.executable, "-m", "pytest_fullgraph", *args], capture_output=True, text=True,
                          check=False, timeout=timeout)
