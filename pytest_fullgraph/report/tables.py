"""A report's checks arranged for reading, shared by its renderings (the Markdown page, the terminal summary,
the findings page): the matrix's columns and rows, break sites grouped across checks, CUDA-graph skips, and the
text helpers they use. No torch import."""

from __future__ import annotations

import re
from typing import Any

from pytest_fullgraph.core.break_advice import Advice, advise
from pytest_fullgraph.core.break_help import BreakHelp
from pytest_fullgraph.core.results import DEFAULT_DTYPE, CheckResult
from pytest_fullgraph.report import known_issues
from pytest_fullgraph.report.causes import shown_origin
from pytest_fullgraph.report.order import canonical_index, report_levels, report_scenarios
from pytest_fullgraph.report.schema import Report


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def break_label(result: CheckResult) -> str:
    """What a ``break`` was: N breaks recorded, or N graphs where one was required, or a bare break."""
    records = result.break_records()
    if records:
        return plural(len(records), "break")
    if result.graph_count is not None and result.graph_count != 1:
        return plural(result.graph_count, "graph")
    return "break"


def columns(report: Report) -> list[tuple[str, str]]:
    """The matrix's (level, scenario) columns, in the report's order (``order``)."""
    scenarios = report_scenarios(report)
    return [(level, scenario) for level in report_levels(report) for scenario in scenarios]


def rows(checks: list[CheckResult]) -> list[tuple[str, str, str]]:
    """(model, dtype, label) per matrix row; the dtype shows in the label once a report has any but float32."""
    pairs = sorted({(result.model, result.dtype) for result in checks},
                   key=lambda pair: (pair[0], *canonical_index(pair[1], DTYPE_ORDER)))
    plain = all(dtype == DEFAULT_DTYPE for _, dtype in pairs)
    return [(model, dtype, model if plain else f"{model} ({dtype})") for model, dtype in pairs]


def grouped_sites(checks: list[CheckResult]) -> list[dict[str, Any]]:
    """Break sites across all checks, most widespread first: location, GB id, origin, models, checks, the known
    upstream issues its breaks match (``known``) and its first break (``record``, what ``site_advice`` reads)."""
    sites: dict[tuple[str, str, str], dict[str, Any]] = {}
    for result in checks:
        for record in result.break_records():
            # a higher-order op's break is as many sites as there are breaks inside it
            inside = f"{record.cause.title()} in {record.cause.function}" if record.cause else ""
            where = shown_where(record.where())
            site = sites.setdefault((where, record.gb_type, inside), {
                "where": where, "gb_type": record.gb_type, "gb_id": record.gb_id or "",
                "origin": shown_origin(record.origin, record.file), "function": record.function,
                "source": record.source,
                "models": set(), "checks": set(),
                "root_cause": False, "inside": inside, "inside_gb_id": record.cause.gb_id if record.cause else "",
                "known": {}, "record": record,
            })
            site["models"].add(result.model)
            site["checks"].add(result.check_id)
            site["root_cause"] |= record.root_cause
            site["known"].update(dict.fromkeys(known_issues.known(result, record)))
    ordered = sorted(sites.values(), key=lambda s: (-len(s["checks"]), location_key(s["where"]), s["gb_type"]))
    for site in ordered:
        site["models"], site["checks"] = sorted(site["models"]), sorted(site["checks"])
        site["known"] = list(site["known"])
    return ordered


def sites_by_location(checks: list[CheckResult]) -> list[dict[str, Any]]:
    """Break sites merged per source line: one line of code that breaks in three ways (the ``Tensor.item()``, the
    context manager it sits in, the loop around it) is one place to fix. Each has its ``breaks`` (the
    ``grouped_sites`` entries there), and the union of their origins, models and checks; most checks first."""
    places: dict[str, dict[str, Any]] = {}
    for site in grouped_sites(checks):
        place = places.setdefault(site["where"], {"where": site["where"], "function": site["function"],
                                                  "source": site["source"], "breaks": [], "origins": [],
                                                  "models": set(), "checks": set()})
        place["breaks"].append(site)
        place["origins"] = list(dict.fromkeys([*place["origins"], site["origin"]]))
        place["models"] |= set(site["models"])
        place["checks"] |= set(site["checks"])
    ordered = sorted(places.values(), key=lambda p: (-len(p["checks"]), location_key(p["where"])))
    for place in ordered:
        place["models"], place["checks"] = sorted(place["models"]), sorted(place["checks"])
    return ordered


def site_advice(site: dict[str, Any], help_by_id: dict[str, BreakHelp]) -> Advice:
    """What to do about a break site (``break_advice.advise`` of its first break): every site has advice."""
    return advise(site["record"], help_by_id)


def fold(names: list[str], noun: str = "model", shown: int = 5) -> str:
    """A list for a table cell: written out when short, else a count that opens (``<details>``) to the list."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"<details><summary>{plural(len(names), noun)}</summary>{', '.join(names)}</details>"


#: The order dtypes are listed in everywhere: the reference precision first.
DTYPE_ORDER = (DEFAULT_DTYPE, "bfloat16", "float16")


#: A break's file outside site-packages and the project is an absolute path of the machine that ran it (reports
#: written before ``breaks.display_path`` shortened it): shown from the Python library directory on.
_STDLIB = re.compile(r"^/.*/lib/(python3\.\d+)/")


def shown_where(where: str) -> str:
    """``file:line`` as a report shows it: ``python3.11/copy.py:153``, not the machine's absolute path."""
    return _STDLIB.sub(r"\1/", where)


def location_key(where: str) -> tuple[str, int]:
    """``file:line`` ordered by file, then by line as a number (``utils.py:396`` before ``utils.py:2899``)."""
    file, _, line = where.rpartition(":")
    return (file, int(line)) if line.isdigit() else (where, 0)


def inside_text(site: dict[str, Any]) -> str:
    """A higher-order op's site: the break inside it, which is the news."""
    return f"; inside it: {escape(site['inside'])}" if site.get("inside") else ""


def crash_line(worker: dict[str, str]) -> str:
    test = f" while running {worker['test']}" if worker.get("test") else ""
    return f"{worker.get('node')}{test}: {worker.get('error')}"


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cudagraph_skips(checks: list[CheckResult]) -> list[tuple[str, list[str]]]:
    """(reason, check ids) for each reason inductor gave for running a graph without CUDA graphs, the most
    widespread first."""
    by_reason: dict[str, list[str]] = {}
    for result in checks:
        for reason in result.cudagraph_skips:
            by_reason.setdefault(reason, []).append(result.check_id)
    return sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))


def flag_text(value: bool | None, missing: str = "—") -> str:
    """transformers' ``_can_compile_fullgraph`` as a table cell: True, False, or ``missing`` when unknown."""
    return missing if value is None else str(value)
