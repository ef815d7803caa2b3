"""Reports: the data model and its JSON form (``schema``), report files (``files``), merging shards (``merge``),
the baseline gate (``gate``), and the Markdown and terminal renderings (``render``, ``terminal``) over the tables
both read (``tables``). Nothing here imports torch, so ``python -m pytest_fullgraph report ...`` and CI's collate
job run where torch is absent; what needs torch (the run's environment, PyTorch's break help) is captured by the
run (``core.environment``, ``core.break_help``) and stored in the report.

May import ``core`` (its torch-free parts) only."""

from __future__ import annotations

from pytest_fullgraph.report.files import distinct, load, write, write_atomic
from pytest_fullgraph.report.gate import GateResult, diff, refresh_advice, refresh_command
from pytest_fullgraph.report.html import DIFF_HTML_NAME
from pytest_fullgraph.report.merge import merge
from pytest_fullgraph.report.render import markdown
from pytest_fullgraph.report.schema import JSON_NAME, MARKDOWN_NAME, Report, ReportError
from pytest_fullgraph.report.terminal import terminal_lines

__all__ = [
    "DIFF_HTML_NAME",
    "JSON_NAME",
    "MARKDOWN_NAME",
    "GateResult",
    "Report",
    "ReportError",
    "diff",
    "distinct",
    "load",
    "markdown",
    "merge",
    "refresh_advice",
    "refresh_command",
    "terminal_lines",
    "write",
    "write_atomic",
]
