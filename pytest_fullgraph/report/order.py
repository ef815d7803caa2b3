"""The order a report lists its levels and scenarios in, decided here once for every rendering (the Markdown page,
the HTML page, the findings page, the release table).

The built-in names come first, in their defined order (``core.names``: forward before generate, greedy before
sample), whatever the report holds: its JSON stores the ``levels`` and ``scenarios`` legends with sorted keys, and
older reports lack a legend or list only some names. Names of one's own follow, in the order the report's
environment gives them: the run's selection (``levels_selected``, ``scenarios_selected``: lists, kept in the run's
order) and then its legends; names no report mentions come last, sorted. No torch import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pytest_fullgraph.core.names import BUILTIN_LEVEL_NAMES, SCENARIO_NAMES

if TYPE_CHECKING:
    from pytest_fullgraph.report.schema import Report


def canonical(values: Iterable[str], order: Iterable[str]) -> list[str]:
    """Known names in their defined order (e.g. forward before generate), unknown ones after, sorted."""
    values = set(values)
    known = [name for name in dict.fromkeys(order) if name in values]
    return known + sorted(values - set(known))


def canonical_index(name: str, order: tuple[str, ...]) -> tuple[int, str]:
    """A sort key: names of ``order`` in its order, others after them, by name."""
    return (order.index(name), "") if name in order else (len(order), name)


def _named(reports: Iterable[Report], kind: str) -> list[str]:
    """The ``kind`` (levels, scenarios) each report's environment names: its selection, then its legend."""
    return [name for report in reports for key in (f"{kind}_selected", kind)
            for name in report.environment.get(key) or ()]


def level_order(*reports: Report) -> list[str]:
    """The levels in the order the reports list them: the built-in ones, then those the reports name."""
    return [*BUILTIN_LEVEL_NAMES, *_named(reports, "levels")]


def scenario_order(*reports: Report) -> list[str]:
    """The scenarios in the order the reports list them: the built-in ones, then those the reports name."""
    return [*SCENARIO_NAMES, *_named(reports, "scenarios")]


def levels_in(names: Iterable[str], *reports: Report) -> list[str]:
    """``names`` (levels, each once) in ``level_order(*reports)``."""
    return canonical(names, level_order(*reports))


def scenarios_in(names: Iterable[str], *reports: Report) -> list[str]:
    """``names`` (scenarios, each once) in ``scenario_order(*reports)``."""
    return canonical(names, scenario_order(*reports))


def report_levels(report: Report) -> list[str]:
    """The levels of the report's checks, in its order."""
    return levels_in((result.level for result in report.checks), report)


def report_scenarios(report: Report) -> list[str]:
    """The scenarios of the report's checks, in its order."""
    return scenarios_in((result.scenario for result in report.checks), report)


def selected_scenarios(names: Iterable[str], report: Report) -> list[str]:
    """``names`` in the order the run selected its scenarios (its legend's, sorted, when it recorded no selection),
    the rest by name: how the findings page says which scenarios a run had, in the run's own words."""
    environment = report.environment
    return canonical(names, environment.get("scenarios_selected") or environment.get("scenarios") or ())
