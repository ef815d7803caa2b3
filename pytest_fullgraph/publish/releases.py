"""The torch-release table of the findings page: the same checks run under several torch releases, their outcome
counts per release and level, and what changed from each release to the next, as ``report diff`` says it. No torch
import (the releases compared are the reports', not this machine's)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

from pytest_fullgraph.core.results import OUTCOMES
from pytest_fullgraph.report.gate import diff
from pytest_fullgraph.report.order import levels_in
from pytest_fullgraph.report.schema import Report


def release_section(releases: Sequence[tuple[str, Report]]) -> list[str]:
    """Outcome counts per torch release and level, then what changed from each release to the next."""
    ordered = sorted(releases, key=lambda item: (_release(item[1]), item[0]))
    reports = [report for _, report in ordered]
    levels = levels_in((result.level for report in reports for result in report.checks), *reports)
    models = sorted({result.model for report in reports for result in report.checks})
    same = len({frozenset(result.key for result in report.checks) for report in reports}) == 1
    lines = ["## Torch releases", "",
             f"{'The same checks on each release' if same else 'Checks on each release'} "
             f"(models {', '.join(models)}). From "
             f"{', '.join(f'`{source}`' for source, _ in ordered)}.", "",
             "| torch | transformers | checks | " + " | ".join(f"`{level}`" for level in levels) + " |",
             "|---|---|---|" + "---|" * len(levels)]
    for report in reports:
        cells = [_level_counts(report, level) for level in levels]
        lines.append(f"| {report.environment.get('torch')} | {report.environment.get('transformers')} | "
                     f"{len(report.checks)} | " + " | ".join(cells) + " |")
    lines += ["", "What changed from each release to the next (`report diff`, one line per change with the "
              "checks it touched):", ""]
    for older, newer in itertools.pairwise(reports):
        gate = diff(older, newer, allow_missing=True, allow_settings=True)
        changes = grouped_changes([*gate.regressions, *gate.improvements, *gate.notes])
        title = f"- **torch {older.environment.get('torch')} → {newer.environment.get('torch')}**"
        if not changes:
            lines.append(f"{title}: no verdict and no break site changed")
            continue
        lines.append(f"{title}: {gate.summary().split(':')[0]}")
        lines += [f"  - {change}" for change in changes]
    return lines


def grouped_changes(lines: Sequence[str]) -> list[str]:
    """The gate's lines (``IMPROVED llama-greedy-generate-float32: break site gone X``) grouped by what changed,
    each with how many checks and which models: the same change over 32 checks is one line. Sorted."""
    groups: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        kind, _, rest = line.partition(" ")
        check, _, what = rest.partition(": ")
        groups.setdefault((kind, what), []).append(check)
    return [f"{kind} {what}: {len(checks)} check(s) of {', '.join(sorted({_model(c) for c in checks}))}"
            for (kind, what), checks in sorted(groups.items())]


def _model(check_id: str) -> str:
    """The model of a check id (``model-scenario-level-dtype``; model names may hold hyphens, the rest not)."""
    return check_id.rsplit("-", 3)[0]


def _release(report: Report) -> tuple[int, ...]:
    version = str(report.environment.get("torch", "0")).split("+")[0]
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _level_counts(report: Report, level: str) -> str:
    """``38 pass, 2 break`` for one level of one release, least severe first."""
    counts = Counter(result.outcome for result in report.checks if result.level == level)
    return ", ".join(f"{counts[name]} {name}" for name in OUTCOMES if counts[name]) or "—"
