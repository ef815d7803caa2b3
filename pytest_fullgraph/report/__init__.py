"""Reports: the data model and its JSON form (``schema``), report files (``files``), merging shards (``merge``),
the baseline gate (``gate``), the order levels and scenarios are listed in (``order``), and the Markdown, HTML and
terminal renderings (``render``, ``html``, ``terminal``) over the tables they read (``tables``). Nothing here
imports torch, so ``python -m pytest_fullgraph report ...`` and CI's collate job run where torch is absent; what
needs torch (the run's environment, PyTorch's break help) is captured by the run (``core.environment``,
``core.break_help``) and stored in the report.

The names below load on first use, so that reading a report loads no renderer; submodules load as attributes too
(``report.tables``).

May import ``core`` (its torch-free parts) only."""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

# ``merge`` names both a submodule and its function: the submodule is imported here, first, so that the package's
# attribute is the function (a later first import of the submodule would rebind it to the module)
from pytest_fullgraph.report.merge import merge

#: Public name → the module that defines it (loaded by ``__getattr__`` when the name is first used).
PUBLIC_API = {
    "DIFF_HTML_NAME": "pytest_fullgraph.report.html",
    "JSON_NAME": "pytest_fullgraph.report.schema",
    "MARKDOWN_NAME": "pytest_fullgraph.report.schema",
    "GateResult": "pytest_fullgraph.report.gate",
    "Report": "pytest_fullgraph.report.schema",
    "ReportError": "pytest_fullgraph.report.schema",
    "diff": "pytest_fullgraph.report.gate",
    "distinct": "pytest_fullgraph.report.files",
    "load": "pytest_fullgraph.report.files",
    "markdown": "pytest_fullgraph.report.render",
    "refresh_advice": "pytest_fullgraph.report.gate",
    "refresh_command": "pytest_fullgraph.report.gate",
    "terminal_lines": "pytest_fullgraph.report.terminal",
    "write": "pytest_fullgraph.report.files",
    "write_atomic": "pytest_fullgraph.report.files",
}

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


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use, or a submodule not imported yet (``report.tables``)."""
    if name in PUBLIC_API:
        value = getattr(importlib.import_module(PUBLIC_API[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # the import binds it here too
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC_API})


if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
    from pytest_fullgraph.report.files import distinct, load, write, write_atomic
    from pytest_fullgraph.report.gate import GateResult, diff, refresh_advice, refresh_command
    from pytest_fullgraph.report.html import DIFF_HTML_NAME
    from pytest_fullgraph.report.render import markdown
    from pytest_fullgraph.report.schema import JSON_NAME, MARKDOWN_NAME, Report, ReportError
    from pytest_fullgraph.report.terminal import terminal_lines
