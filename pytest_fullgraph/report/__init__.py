"""Reports: the JSON schema and its loading (``schema``), merging shards (``merge``), the baseline gate
(``gate``) and the Markdown / terminal renderings (``render``). Nothing here imports torch at import time, so
``python -m pytest_fullgraph report ...`` stays light."""

from __future__ import annotations

from pytest_fullgraph.report.gate import GateResult, diff, refresh_command
from pytest_fullgraph.report.merge import merge
from pytest_fullgraph.report.render import markdown, terminal_lines
from pytest_fullgraph.report.schema import (
    JSON_NAME,
    MARKDOWN_NAME,
    Report,
    ReportError,
    environment,
    load,
    write,
    write_atomic,
)

__all__ = [
    "JSON_NAME",
    "MARKDOWN_NAME",
    "GateResult",
    "Report",
    "ReportError",
    "diff",
    "environment",
    "load",
    "markdown",
    "merge",
    "refresh_command",
    "terminal_lines",
    "write",
    "write_atomic",
]
