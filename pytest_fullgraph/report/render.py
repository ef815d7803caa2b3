"""A report as a Markdown page (CI step summaries) that reads at a glance at 196 models: a counts table first, the
changes since a baseline, the models that are not all-pass (models with the same outcomes share a row), the feature
views, then what went wrong grouped by cause (``sections``). The terminal summary is ``terminal``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pytest_fullgraph.core.names import SCENARIO_FEATURES
from pytest_fullgraph.core.results import (
    BREAK,
    DEFAULT_DTYPE,
    DIVERGENCE,
    MISMATCH,
    OUTCOMES,
    PASS,
    ROUNDING,
    CheckResult,
)
from pytest_fullgraph.report import recompiles, sections
from pytest_fullgraph.report.gate import diff
from pytest_fullgraph.report.merge import uneven_levels
from pytest_fullgraph.report.order import canonical, levels_in, scenarios_in
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import (
    DTYPE_ORDER,
    break_label,
    columns,
    crash_line,
    escape,
    fold,
    plural,
    rows,
)

#: A mismatch's cell by its float64 class: a rounding flip reads apart from a real divergence.
_MISMATCH_CELLS = {ROUNDING: "〰️ rounding", DIVERGENCE: "❌ divergence"}


def cell(result: CheckResult | None) -> str:
    if result is None:
        return "—"
    if result.outcome == BREAK:
        return f"⛔ {break_label(result)}"
    if result.outcome == MISMATCH and result.mismatch is not None and result.mismatch.kind in _MISMATCH_CELLS:
        return _MISMATCH_CELLS[result.mismatch.kind]
    return OUTCOMES[result.outcome].cell if result.outcome in OUTCOMES else result.outcome


def _shard_text(env: dict[str, Any]) -> str:
    """" · shard 2/8" for one shard's report, " · shards 1/8, 2/8" for merged ones, "" when unsharded."""
    shard = env.get("shard")
    if isinstance(shard, str):
        return f" · shard {shard}"
    return f" · shards {', '.join(shard)}" if shard else ""


def markdown(report: Report, baseline: Report | None = None) -> str:
    """A GitHub step-summary friendly page that reads at a glance at 196 models: counts first, then the changes
    since ``baseline`` (when given), the models that are not all-pass, and what went wrong grouped by cause."""
    checks = report.sorted_checks()
    lines = [*_header(report, checks), *_summary(report, checks)]
    if baseline is not None:
        lines += _changes(baseline, report)
    lines += _feature_sections(report, checks)
    lines += _matrix(report, checks)
    lines += sections.break_sites(report, checks)
    lines += recompiles.markdown_section(checks)
    lines += sections.errors(report, checks)
    lines += sections.known_upstream(checks)
    lines += sections.mismatches(checks)
    lines += sections.skips(checks)
    lines += sections.audit(checks)
    lines += sections.cudagraphs(checks)
    lines += sections.memory(report, checks)
    lines += sections.slowest(checks)
    return "\n".join(lines)


def _header(report: Report, checks: list[CheckResult]) -> list[str]:
    env = report.environment
    lines = ["# pytest_fullgraph report", "",
             f"torch {env.get('torch')} · transformers {env.get('transformers')} · backend "
             f"`{env.get('backend')}` · max_new_tokens {env.get('max_new_tokens')} · dtypes "
             f"{','.join(env.get('dtypes') or [DEFAULT_DTYPE])} · device {env.get('device')} · "
             f"{plural(len(checks), 'check')}{_shard_text(env)}", ""]
    if env.get("shards_missing"):
        lines += [f"**Incomplete:** shard(s) {', '.join(env['shards_missing'])} of this run are missing from the "
                  "merged report.", ""]
    uneven = uneven_levels(checks)
    if uneven:
        lines += [f"**Levels not run for every model:** {'; '.join(uneven)}.", ""]
    if report.interrupted:
        lines += [f"**Incomplete:** the run was interrupted ({report.interruption()}); checks "
                  "that had not finished are missing from this report.", ""]
    if report.crashed_workers:
        lines += ["**Crashed workers:** " + "; ".join(crash_line(w) for w in report.crashed_workers), ""]
    return lines


def _summary(report: Report, checks: list[CheckResult]) -> list[str]:
    """Levels x outcomes counted, and per level how many models passed every check there."""
    if not checks:
        return ["No checks ran.", ""]
    shown = [name for name in OUTCOMES if any(result.outcome == name for result in checks)]
    levels = levels_in({r.level for r in checks}, report)
    dtypes = canonical({r.dtype for r in checks}, DTYPE_ORDER)
    lines = ["## Summary", "", "| level | checks | " + " | ".join(OUTCOMES[name].cell for name in shown) +
             " | models passing every check |", "|---|---|" + "---|" * len(shown) + "---|"]
    for level in levels:
        for dtype in dtypes:
            found = [result for result in checks if result.level == level and result.dtype == dtype]
            label = level if len(dtypes) == 1 else f"{level} ({dtype})"
            if found:
                lines.append(_count_row(label, found, shown))
    lines.append(_count_row("**all levels**", checks, shown))
    return [*lines, ""]


def _count_row(label: str, checks: list[CheckResult], shown: list[str]) -> str:
    counts = Counter(result.outcome for result in checks)
    models = {result.model for result in checks}
    failing = {result.model for result in checks if result.outcome != PASS}
    return (f"| {label} | {len(checks)} | " + " | ".join(str(counts[name]) for name in shown) +
            f" | {len(models - failing)} of {len(models)} |")


def _changes(baseline: Report, report: Report) -> list[str]:
    """What the gate sees against the baseline: regressions first, each a line; long lists fold."""
    gate = diff(baseline, report, allow_settings=True)  # refused settings never reach a page; allowed ones are said
    lines = ["## Changes since the baseline", "", *gate.header(), gate.summary(), ""]
    items = [f"- {escape(line)}" for line in [*gate.regressions, *gate.improvements, *gate.notes]]
    return [*lines, *sections.folded_list(items, "change"), ""] if items else lines


def _matrix(report: Report, checks: list[CheckResult]) -> list[str]:
    """Models x (level, scenario) outcomes; models that pass every check are counted, not listed, and models with
    the same outcomes share a row."""
    matrix = columns(report)
    if len(matrix) > MAX_MATRIX_COLUMNS:
        return [f"The per-check matrix ({len(matrix)} level x scenario columns) is left out; the feature views "
                "above and the JSON hold every check.", ""]
    if not matrix:
        return []
    by_key = {result.key: result for result in checks}
    same: dict[tuple[str, ...], list[str]] = {}
    for model, dtype, label in rows(checks):
        cells = tuple(cell(by_key.get((model, scenario, level, dtype))) for level, scenario in matrix)
        same.setdefault(cells, []).append(label)
    passing = [label for cells, labels in same.items() if set(cells) <= {_PASS_CELL, "—"} for label in labels]
    lines = ["## Checks by model", ""]
    if passing:
        lines += [f"**{len(passing)}** of {plural(sum(map(len, same.values())), 'model')} pass every check: "
                  f"{fold(passing)}.", ""]
    # the largest groups first; then the models' order (by name, dtypes in their order)
    shown = sorted(((cells, labels) for cells, labels in same.items() if not set(cells) <= {_PASS_CELL, "—"}),
                   key=lambda item: -len(item[1]))
    if shown:
        lines.append("| models | " + " | ".join(f"{level}<br>{scenario}" for level, scenario in matrix) + " |")
        lines.append("|---|" + "---|" * len(matrix))
        lines += [f"| {fold(labels)} | " + " | ".join(cells) + " |" for cells, labels in shown]
        lines.append("")
    return lines + _legend(report, {level for level, _ in matrix}, {scenario for _, scenario in matrix})


_PASS_CELL = OUTCOMES[PASS].cell


#: Above this many (level, scenario) columns the model x check matrix is unreadable: the feature views replace it.
MAX_MATRIX_COLUMNS = 40
#: A check's outcome as one character, for the feature x model view.
_GLYPHS = {"pass": "✅", "skip": "⏭", "nondeterministic": "⚠", "break": "⛔", "mismatch": "❌", "error": "💥"}


def _feature_sections(report: Report, checks: list[CheckResult]) -> list[str]:
    """Which generation features compile into one graph with eager's tokens: feature x level (outcomes counted
    over the models) and feature x model (one glyph per level). Shown once a run has scenarios beyond the four
    basic ones."""
    scenarios = scenarios_in({r.scenario for r in checks}, report)
    if set(scenarios) <= {"greedy", "sample", "eos", "padded"}:
        return []
    levels = levels_in({r.level for r in checks}, report)
    models = sorted({r.model for r in checks})
    lines = ["## Generation features x levels", "", *feature_level_table(report, checks)]
    lines += ["", "## Generation features x models", "",
              f"Each cell: one glyph per level, in the order {', '.join(levels)}.", "",
              "| feature (scenario) | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    by_key = {result.key[:3]: result for result in checks}
    for scenario in scenarios:
        cells = ["".join(_GLYPHS.get(by_key[(model, scenario, level)].outcome, "?") if (model, scenario, level)
                         in by_key else "·" for level in levels) for model in models]
        lines.append(f"| {_feature_label(scenario, report)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def feature_level_table(report: Report, checks: list[CheckResult]) -> list[str]:
    """Feature x level: each cell counts the models' outcomes for one scenario at one level, by glyph."""
    scenarios = scenarios_in({r.scenario for r in checks}, report)
    levels = levels_in({r.level for r in checks}, report)
    by_cell: dict[tuple[str, str], list[CheckResult]] = {}
    for result in checks:
        by_cell.setdefault((result.scenario, result.level), []).append(result)
    lines = [f"Each cell counts the models' outcomes for the feature at the level ({_glyph_legend()}).", "",
             "| feature (scenario) | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]
    for scenario in scenarios:
        cells = []
        for level in levels:
            counts = Counter(result.outcome for result in by_cell.get((scenario, level), []))
            cells.append(" ".join(f"{_GLYPHS.get(outcome, outcome)} {counts[outcome]}" for outcome in OUTCOMES
                                  if counts[outcome]) or "—")
        lines.append(f"| {_feature_label(scenario, report)} | " + " | ".join(cells) + " |")
    return lines


def _glyph_legend() -> str:
    return ", ".join(f"{glyph} {outcome}" for outcome, glyph in _GLYPHS.items())


def _feature_label(scenario: str, report: Report) -> str:
    """A scenario named by its feature: as the run recorded it, else (reports from before the run recorded it) as
    the built-in scenarios had it."""
    feature = (report.environment.get("scenario_features") or {}).get(scenario) or SCENARIO_FEATURES.get(scenario,
                                                                                                         scenario)
    return f"{feature} (`{scenario}`)" if feature != scenario else f"`{scenario}`"


def _legend(report: Report, levels: set[str], scenarios: set[str]) -> list[str]:
    """What each level and scenario in the matrix means, from the descriptions the report carries."""
    described = [(kind, name, text) for kind, names in (("level", levels), ("scenario", scenarios))
                 for name, text in (report.environment.get(f"{kind}s") or {}).items() if name in names and text]
    if not described:
        return []
    return [*(f"- {kind} `{name}`: {escape(text)}" for kind, name, text in described), ""]


