"""The Markdown page's sections grouped by cause: break sites per line of code, errors by cause and whose fault
(each marked "known: URL" where the table of known upstream issues has it), the known upstream issues, skips by
reason, mismatches, the flag audit's disagreements, CUDA-graph skips, peak memory and the slowest checks. Each is
a list of lines, empty when there is nothing to say."""

from __future__ import annotations

from typing import Any

from pytest_fullgraph.core.break_advice import REGISTRY, SOURCES, Advice
from pytest_fullgraph.core.break_help import BreakHelp, hint_text
from pytest_fullgraph.core.results import (
    BREAK,
    ERROR,
    FAILING_OUTCOMES,
    MISMATCH,
    NONDETERMINISTIC,
    SKIP,
    CheckResult,
    check_seconds,
)
from pytest_fullgraph.report.audit import disagreements, has_flags, model_summaries
from pytest_fullgraph.report.causes import FAULTS, error_key, group, skip_key
from pytest_fullgraph.report.known_issues import KnownIssue, by_issue, known, known_of, labels
from pytest_fullgraph.report.order import levels_in
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import (
    cudagraph_skips,
    escape,
    fold,
    plural,
    site_advice,
    sites_by_location,
)

#: Slowest checks listed; lists longer than this many lines fold.
SLOWEST_SHOWN = 10
FOLD_LINES = 20


def break_sites(report: Report, checks: list[CheckResult]) -> list[str]:
    """One row per line of code that breaks: the statement under its location, each break there with PyTorch's
    page, origin, models and checks; then PyTorch's words on each GB id, and advice for the breaks without."""
    places = sites_by_location(checks)
    if not places:
        return []
    help_by_id = report.break_help()
    lines = ["## Break sites", "", f"{plural(len(places), 'line')} of code {'breaks' if len(places) == 1 else 'break'}"
             "; a break marked *(consequence)* is raised because of another one (fix that one).", "",
             "| location | breaks | origin | models | checks |", "|---|---|---|---|---|"]
    for place in places:
        source = f"<br>`{escape(place['source'].strip())}`" if place["source"].strip() else ""
        found = "; ".join(_break_text(site, help_by_id) for site in place["breaks"])
        lines.append(f"| `{place['where']}` ({place['function']}){source} | {found} | {', '.join(place['origins'])} "
                     f"| {fold(place['models'])} | {len(place['checks'])} |")
    lines.append("")
    gb_ids = [gb for place in places for site in place["breaks"] for gb in (site["gb_id"], site["inside_gb_id"]) if gb]
    return lines + _break_help(gb_ids, help_by_id) + _other_advice(places, help_by_id)


def _break_text(site: dict[str, Any], help_by_id: dict[str, BreakHelp]) -> str:
    gb_id = site["gb_id"]
    link = (f"[{gb_id}]({help_by_id[gb_id].url}) " if gb_id in help_by_id else f"{gb_id} ") if gb_id else ""
    inside = f" (inside it: {escape(site['inside'])})" if site.get("inside") else ""
    consequence = "" if site["root_cause"] else " *(consequence)*"
    return f"{link}{escape(site['gb_type'])}{inside}{consequence}{_known_text(site['known'])}"


def _known_text(issues: list[KnownIssue]) -> str:
    """`` (known: URL (open))`` after a cause matched by the table of known upstream issues; "" for a new one."""
    return f" ({escape(labels(issues))})" if issues else ""


def _break_help(gb_ids: list[str], help_by_id: dict[str, BreakHelp]) -> list[str]:
    """PyTorch's own words on each GB id of the break sites, in the sites' order."""
    shown = [help_by_id[gb_id] for gb_id in dict.fromkeys(gb_ids) if gb_id in help_by_id]
    if not shown:
        return []
    lines = ["### What PyTorch says about these breaks", ""]
    for found in shown:
        text = " ".join(part for part in (found.explanation, f"Hint: {hint_text(found)}" if hint_text(found) else "")
                        if part)
        lines.append(f"- [{found.gb_id}]({found.url}) **{escape(found.gb_type)}**: {escape(text)}")
    return [*lines, ""]


def _other_advice(places: list[dict[str, Any]], help_by_id: dict[str, BreakHelp]) -> list[str]:
    """Advice for the breaks PyTorch's help for a GB id does not cover (none, or none stored): from PyTorch's
    message or documentation, else by the break's kind; breaks of one type with the same advice share an item."""
    sites: dict[tuple[str, Advice], list[str]] = {}
    for place in places:
        for site in place["breaks"]:
            advice = site_advice(site, help_by_id)
            if advice.source != REGISTRY:
                sites.setdefault((site["gb_type"], advice), []).append(f"`{place['where']}`")
    if not sites:
        return []
    lines = ["### Advice for the breaks without PyTorch's help for a GB id", ""]
    for (gb_type, advice), wheres in sites.items():
        page = f" [PyTorch's page]({advice.url})" if advice.url else ""
        lines.append(f"- **{escape(gb_type)}** at {fold(wheres, 'site')}: {escape(advice.text)}{page} "
                     f"*({SOURCES[advice.source]})*")
    return [*lines, ""]


def errors(report: Report, checks: list[CheckResult], heading: str = "##") -> list[str]:
    """Errors (and nondeterministic eager runs) grouped by cause, under whose fault each is."""
    failed = [result for result in checks if result.outcome in (ERROR, NONDETERMINISTIC)]
    if not failed:
        return []
    groups = group(failed, error_key, with_fault=True)
    lines = [f"{heading} Errors by cause", "", f"{plural(len(failed), 'check')}, {plural(len(groups), 'cause')}; one "
             "example message per cause.", "", "| whose fault | cause | checks | models | levels |",
             "|---|---|---|---|---|"]
    for found in groups:
        levels = levels_in(found.levels, report)
        lines.append(f"| {FAULTS[found.fault]} | {escape(found.example)}{_known_text(known_of(found.checks))} | "
                     f"{len(found.checks)} | {fold(found.models)} | {', '.join(levels)} |")
    return [*lines, ""]


def known_upstream(checks: list[CheckResult]) -> list[str]:
    """The known upstream issues the failing checks match (``report.known_issues``), and how many failing checks
    match none: those are new to the table."""
    matched = by_issue(checks)
    if not matched:
        return []
    failing = [result for result in checks if result.outcome in (*FAILING_OUTCOMES, BREAK)]
    covered = {result.check_id for _, found in matched for result in found}
    lines = ["## Known upstream issues", "",
             f"{len(covered)} of {plural(len(failing), 'failing check')} match an issue or pull request already "
             "reported upstream; the rest are not in the table (`pytest_fullgraph/report/known_issues.py`).", "",
             "| known | status | what | checks | models |", "|---|---|---|---|---|"]
    lines += [f"| {issue.url} | {issue.status} | {escape(issue.title)} | {len(found)} | "
              f"{fold(sorted({result.model for result in found}))} |" for issue, found in matched]
    return [*lines, ""]


def skips(checks: list[CheckResult]) -> list[str]:
    """Skips grouped by their reason: nothing was judged there, and the reason says whether that is expected."""
    skipped = [result for result in checks if result.outcome == SKIP]
    if not skipped:
        return []
    lines = ["## Skips by reason", "", "| reason | checks | models |", "|---|---|---|"]
    for found in group(skipped, skip_key):
        reason = found.example if len({r.message for r in found.checks}) == 1 else found.key
        lines.append(f"| {escape(reason)} | {len(found.checks)} | {fold(found.models)} |")
    return [*lines, ""]


def mismatches(checks: list[CheckResult]) -> list[str]:
    """Every check whose compiled tokens differ from eager's, where and how (rounding or divergence)."""
    found = [result for result in checks if result.outcome == MISMATCH]
    if not found:
        return []
    items = [f"- `{result.check_id}`: {escape(result.headline())}{_known_text(known(result))}" for result in found]
    return ["## Mismatches", "", *folded_list(items, "mismatch"), ""]


def folded_list(items: list[str], noun: str) -> list[str]:
    """A Markdown list, its tail folded once it is longer than ``FOLD_LINES``."""
    if len(items) <= FOLD_LINES:
        return items
    rest = len(items) - FOLD_LINES
    return [*items[:FOLD_LINES], "", f"<details><summary>{plural(rest, f'more {noun}')}</summary>", "",
            *items[FOLD_LINES:], "", "</details>"]


def audit(checks: list[CheckResult]) -> list[str]:
    """transformers' ``_can_compile_fullgraph`` against the measured verdicts: the models where they disagree,
    grouped by how (the rest agree, or were not measured enough to tell, and are counted)."""
    summaries = model_summaries(checks)
    if not has_flags(summaries):
        return []
    disagreeing = disagreements(summaries)
    lines = ["## transformers' `_can_compile_fullgraph` flag audit", "",
             f"Of {plural(len(summaries), 'model')}, **{len(disagreeing)}** disagree with the flag"
             + (":" if disagreeing else "."), ""]
    if not disagreeing:
        return lines
    by_case: dict[tuple[str, str], list[str]] = {}
    for summary in disagreeing:
        # the evidence starts with a check id: without the model's name, the same evidence for many reads once
        shared = summary.evidence.removeprefix(f"{summary.model}-")
        by_case.setdefault((summary.disagreement, shared), []).append(f"{summary.model} ({summary.model_class})")
    lines += ["| disagreement | models | evidence |", "|---|---|---|"]
    lines += [f"| {kind} | {fold(models)} | {escape(evidence)} |" for (kind, evidence), models in by_case.items()]
    return [*lines, ""]


def slowest(checks: list[CheckResult]) -> list[str]:
    """Where a run's time went: its slowest checks, with the phases' seconds."""
    timed = sorted((result for result in checks if result.timings), key=lambda r: -check_seconds(r))[:SLOWEST_SHOWN]
    if not timed:
        return []
    lines = ["## Slowest checks", "", "| check | seconds | phases |", "|---|---|---|"]
    for result in timed:
        phases = ", ".join(f"{name.removesuffix('_s')} {value:.1f}" for name, value in result.timings.items())
        lines.append(f"| `{result.check_id}` | {check_seconds(result):.1f} | {phases} |")
    return [*lines, ""]


def cudagraphs(checks: list[CheckResult]) -> list[str]:
    found = cudagraph_skips(checks)
    if not found:
        return []
    lines = ["## CUDA graphs skipped", "", "Inductor ran these compiled generations without CUDA graphs "
             "(`mode=\"reduce-overhead\"`); the tokens were still judged.", "", "| reason | checks |", "|---|---|"]
    lines += [f"| {escape(reason)} | {', '.join(f'`{check}`' for check in ids)} |" for reason, ids in found]
    return [*lines, ""]


MIB = 1024 * 1024


def memory(report: Report, checks: list[CheckResult]) -> list[str]:
    """Peak CUDA memory of the compiled runs, per level: what a GPU job must have free (CUDA checks only)."""
    measured = [result for result in checks if result.peak_memory is not None]
    if not measured:
        return []
    levels = levels_in({r.level for r in measured}, report)
    lines = ["## Peak CUDA memory", "", "The most CUDA memory each compiled run held at once (the model's weights "
             "included), summed and largest per level.", "", "| level | checks | sum (MiB) | largest (MiB) | in |",
             "|---|---|---|---|---|"]
    for level in levels:
        peaks = sorted(((r.peak_memory or 0, r.check_id) for r in measured if r.level == level), reverse=True)
        lines.append(f"| {level} | {len(peaks)} | {sum(p for p, _ in peaks) / MIB:,.1f} | {peaks[0][0] / MIB:,.1f} "
                     f"| `{peaks[0][1]}` |")
    return [*lines, ""]
