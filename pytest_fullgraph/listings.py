"""What ``python -m pytest_fullgraph`` lists: the scenarios, the built-in levels, the models (a table surveyed as each
model builds) and the versions CI keys its caches on. Each returns the command's exit status: 0, or 2 and one line
on stderr for a selection that selects nothing. The report commands are ``__main__``'s.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from pytest_fullgraph import report
from pytest_fullgraph.report.tables import flag_text

if TYPE_CHECKING:
    from pytest_fullgraph.levels.base import Level


def list_scenarios(selection: str, as_json: bool) -> int:
    """The scenarios a ``--fullgraph-scenarios`` selection names, each with its kind and what it cannot change."""
    from pytest_fullgraph.check.scenarios import BASIC, SCENARIOS, select_scenarios

    try:
        names = select_scenarios(selection)
    except ValueError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = [{"name": name, "feature": SCENARIOS[name].feature, "kind": SCENARIOS[name].kind,
             "basic": name in BASIC, "description": SCENARIOS[name].description, "inert": SCENARIOS[name].inert}
            for name in names]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        note = f" [cannot change the tokens: {row['inert']}]" if row["inert"] else ""
        print(f"{row['name']:<{width}}  {row['kind']:<9}  {row['description']}{note}")
    return 0


def list_levels(selection: str, as_json: bool) -> int:
    """The built-in levels (a conftest's own are known only inside a pytest run), ``--fullgraph-levels``' way."""
    from pytest_fullgraph.levels.builtin import builtin_levels

    levels = builtin_levels()
    try:
        names = levels.select(selection, run_slow=False)
    except ValueError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2
    rows = [{"name": name, "collected": collected_when(levels[name]), "description": levels[name].description}
            for name in names]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    width, when = max(len(row["name"]) for row in rows), max(len(row["collected"]) for row in rows)
    for row in rows:
        print(f"{row['name']:<{width}}  {row['collected']:<{when}}  {row['description']}")
    return 0


def collected_when(level: Level) -> str:
    """When a run collects the level unless ``--fullgraph-levels`` names it."""
    return "opt-in" if level.opt_in else "slow tier" if level.slow_only else "default"


def versions() -> int:
    """torch, transformers and Python as CI's cache key (``key=...``) and one per line."""
    import platform

    import torch
    import transformers

    found = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
             "python": platform.python_version()}
    print(f"key=torch{found['torch']}-transformers{found['transformers']}-py{found['python']}")
    for name, version in found.items():
        print(f"{name}={version}")
    return 0


def list_models(selection: str, exclude: str, *, as_json: bool, build: bool, shard: str | None = None,
                shard_costs: str | None = None, verbose: bool = False) -> int:
    """The models table, with what transformers says about our tiny configs held back and counted in one line
    (``--verbose`` lets it through as it comes)."""
    from pytest_fullgraph.models.quiet import held_transformers_output

    with held_transformers_output(hold=not verbose) as held:
        status = _models_table(selection, exclude, as_json=as_json, build=build, shard=shard,
                               shard_costs=shard_costs)
    if held.lines:
        print(f"{len(held.lines)} transformers warning(s) about the tiny configs held back; --verbose shows them",
              file=sys.stderr)
    return status


def _models_table(selection: str, exclude: str, *, as_json: bool, build: bool, shard: str | None,
                  shard_costs: str | None) -> int:
    from pytest_fullgraph.models import session_registry
    from pytest_fullgraph.models.survey import survey
    from pytest_fullgraph.report.shard import model_costs, parse_shard, select_shard

    registry = session_registry()
    try:
        names = registry.select(selection, exclude)
        if shard is not None:
            costs = model_costs(_costs_report(shard_costs)) if shard_costs else None
            names = select_shard(names, parse_shard(shard, "--shard"), costs)
    except ValueError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2
    rows = []
    for name in names:  # printed as they finish: a full survey takes about a minute
        row = survey(registry, name, build=build)
        rows.append(row)
        if not as_json:
            if len(rows) == 1:
                print(_table_line(["model", "class", "parameters", "flag", "tags", "status"]))
            print(_table_line([row["name"], row["class"] or "-", _count(row["parameters"]),
                               flag_text(row["can_compile_fullgraph"], missing="-"), ",".join(row["tags"]) or "-",
                               row["status"]]),
                  flush=True)
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        buildable = sum(1 for row in rows if row["status"] == "ok")
        print(f"{len(rows)} models: {buildable} build and generate, "
              f"{sum(1 for row in rows if row['status'].startswith('skipped'))} skipped with a reason, "
              f"{sum(1 for row in rows if row['status'].startswith('error'))} errors" if build else
              f"{len(rows)} models (not built)")
    return 0


def _costs_report(path: str) -> report.Report:
    try:
        return report.load(path)
    except report.ReportError as error:
        raise report.ReportError(f"--shard-costs: {error}") from None


def _table_line(cells: list[str]) -> str:
    widths = (24, 40, 11, 5, 28)
    return " ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)) + " " + cells[-1]


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
