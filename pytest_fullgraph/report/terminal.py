"""pytest's terminal summary of a report: a compact matrix, the most widespread break sites with a hint each,
the known upstream issues the failures match, flag disagreements, why checks were skipped, CUDA-graph skips,
crashed workers."""

from __future__ import annotations

from collections import Counter

from pytest_fullgraph.core.results import BREAK, MISMATCH, OUTCOMES, SKIP, CheckResult
from pytest_fullgraph.report import recompiles
from pytest_fullgraph.report.audit import disagreements, model_summaries
from pytest_fullgraph.report.known_issues import by_issue
from pytest_fullgraph.report.merge import uneven_levels
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import (
    break_label,
    columns,
    crash_line,
    cudagraph_skips,
    grouped_sites,
    inside_text,
    rows,
    site_advice,
)


def short_cell(result: CheckResult | None) -> str:
    if result is None:
        return "-"
    if result.outcome == BREAK:
        records = result.break_records()
        return f"break({len(records)})" if records else f"break({break_label(result)})"
    if result.outcome == MISMATCH and result.mismatch is not None and result.mismatch.kind:
        return f"MISMATCH({result.mismatch.kind})"
    return OUTCOMES[result.outcome].short if result.outcome in OUTCOMES else result.outcome


def terminal_lines(report: Report, top_sites: int = 5) -> list[str]:
    """A compact matrix and the most widespread break sites, for pytest's terminal summary."""
    checks = report.sorted_checks()
    matrix = columns(report)
    by_key = {result.key: result for result in checks}
    headers = [f"{level}/{scenario}" for level, scenario in matrix]
    table = [[label] + [short_cell(by_key.get((model, s, lv, dtype))) for lv, s in matrix]
             for model, dtype, label in rows(checks)]
    widths = [max(len(str(row[i])) for row in [["model", *headers], *table]) for i in range(len(headers) + 1)]
    lines = ["  ".join(text.ljust(widths[i]) for i, text in enumerate(row)).rstrip()
             for row in [["model", *headers], *table]]
    uneven = uneven_levels(checks)
    if uneven:
        lines.append(f"levels not run for every model: {'; '.join(uneven)}")
    sites = grouped_sites(checks)[:top_sites]
    if sites:
        help_by_id = report.break_help()
        lines.append("top break sites:")
        for site in sites:
            lines.append(f"  {site['where']} {site['gb_id'] or '-'} {site['gb_type']}{inside_text(site)} "
                         f"[{site['origin']}] in {len(site['checks'])} check(s): {', '.join(site['models'])}")
            lines += [f"    {issue.label()}" for issue in site["known"]]  # already reported: before how to fix it
            lines.append(f"    hint: {site_advice(site, help_by_id).line()}")
    lines += recompiles.terminal_section(checks, top_sites)
    for issue, matched in by_issue(checks):  # a repeated run tells its known failures from new ones
        lines.append(f"{issue.label()}: {issue.title}, in {len(matched)} failing check(s): "
                     f"{', '.join(sorted({result.model for result in matched}))}")
    disagreeing = disagreements(model_summaries(checks))
    if disagreeing:
        lines.append(f"_can_compile_fullgraph disagrees with the verdicts for {len(disagreeing)} model(s):")
        lines += [f"  {summary.model}: {summary.disagreement}" for summary in disagreeing]
    skipped = Counter(result.message for result in checks if result.outcome == SKIP)
    for reason, count in skipped.most_common(top_sites):  # a skip cell says nothing of why
        lines.append(f"skipped {count} check(s): {reason}")
    if len(skipped) > top_sites:
        lines.append(f"skipped for {len(skipped) - top_sites} more reason(s): see the report")
    for reason, ids in cudagraph_skips(checks):
        lines.append(f"CUDA graphs skipped in {len(ids)} check(s): {reason}")
    for worker in report.crashed_workers:
        lines.append(f"crashed worker {crash_line(worker)}")
    if report.interrupted:
        lines.append(f"run interrupted ({report.interruption()}): the report holds only the checks that finished")
    return lines
