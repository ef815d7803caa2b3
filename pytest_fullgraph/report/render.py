"""Renderings of a report: the Markdown page (CI step summaries) and pytest's terminal summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.levels import BUILTIN_LEVEL_NAMES
from pytest_fullgraph.report.audit import AUDIT_LEVELS, disagreements, has_flags, model_summaries
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.results import (
    BREAK,
    DEFAULT_DTYPE,
    DIVERGENCE,
    FAILING_OUTCOMES,
    MISMATCH,
    OUTCOMES,
    ROUNDING,
    CheckResult,
)
from pytest_fullgraph.scenarios import SCENARIOS

if TYPE_CHECKING:
    from pytest_fullgraph.break_help import BreakHelp


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def break_label(result: CheckResult) -> str:
    """What a ``break`` was: N breaks recorded, or N graphs where one was required, or a bare break."""
    records = result.break_records()
    if records:
        return _plural(len(records), "break")
    if result.graph_count is not None and result.graph_count != 1:
        return _plural(result.graph_count, "graph")
    return "break"


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


def short_cell(result: CheckResult | None) -> str:
    if result is None:
        return "-"
    if result.outcome == BREAK:
        records = result.break_records()
        return f"break({len(records)})" if records else f"break({break_label(result)})"
    if result.outcome == MISMATCH and result.mismatch is not None and result.mismatch.kind:
        return f"MISMATCH({result.mismatch.kind})"
    return OUTCOMES[result.outcome].short if result.outcome in OUTCOMES else result.outcome


def _canonical(values: set[str], order: Iterable[str]) -> list[str]:
    """Known names in their defined order (e.g. forward before generate), unknown ones after, sorted."""
    known = [name for name in dict.fromkeys(order) if name in values]
    return known + sorted(values - set(known))


def columns(report: Report) -> list[tuple[str, str]]:
    checks = report.checks
    env = report.environment
    # the report's own legend first; reports written before legends existed fall back to the built-in order
    levels = _canonical({r.level for r in checks}, [*(env.get("levels") or {}), *BUILTIN_LEVEL_NAMES])
    scenarios = _canonical({r.scenario for r in checks}, [*(env.get("scenarios") or {}), *SCENARIOS])
    return [(level, scenario) for level in levels for scenario in scenarios]


def rows(checks: list[CheckResult]) -> list[tuple[str, str, str]]:
    """(model, dtype, label) per matrix row; the dtype shows in the label once a report has any but float32."""
    pairs = sorted({(result.model, result.dtype) for result in checks})
    plain = all(dtype == DEFAULT_DTYPE for _, dtype in pairs)
    return [(model, dtype, model if plain else f"{model} ({dtype})") for model, dtype in pairs]


def grouped_sites(checks: list[CheckResult]) -> list[dict[str, Any]]:
    """Break sites across all checks, most widespread first: location, GB id, origin, models, checks."""
    sites: dict[tuple[str, str, str], dict[str, Any]] = {}
    for result in checks:
        for record in result.break_records():
            # a higher-order op's break is as many sites as there are breaks inside it
            inside = f"{record.cause.title()} in {record.cause.function}" if record.cause else ""
            site = sites.setdefault((record.where(), record.gb_type, inside), {
                "where": record.where(), "gb_type": record.gb_type, "gb_id": record.gb_id or "",
                "origin": record.origin, "function": record.function, "models": set(), "checks": set(),
                "root_cause": False, "inside": inside, "inside_gb_id": record.cause.gb_id if record.cause else "",
            })
            site["models"].add(result.model)
            site["checks"].add(result.check_id)
            site["root_cause"] |= record.root_cause
    ordered = sorted(sites.values(), key=lambda s: (-len(s["checks"]), s["where"], s["gb_type"]))
    for site in ordered:
        site["models"], site["checks"] = sorted(site["models"]), sorted(site["checks"])
    return ordered


def _inside(site: dict[str, Any]) -> str:
    """A higher-order op's site: the break inside it, which is the news."""
    return f"; inside it: {_escape(site['inside'])}" if site.get("inside") else ""


def _crash_line(worker: dict[str, str]) -> str:
    test = f" while running {worker['test']}" if worker.get("test") else ""
    return f"{worker.get('node')}{test}: {worker.get('error')}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _shard_text(env: dict[str, Any]) -> str:
    """" · shard 2/8" for one shard's report, " · shards 1/8, 2/8" for merged ones, "" when unsharded."""
    shard = env.get("shard")
    if isinstance(shard, str):
        return f" · shard {shard}"
    return f" · shards {', '.join(shard)}" if shard else ""


def markdown(report: Report) -> str:
    """A GitHub step-summary friendly page: outcome matrix, legend, break sites, failures."""
    checks = report.sorted_checks()
    env = report.environment
    lines = ["# pytest_fullgraph report", "",
             f"torch {env.get('torch')} · transformers {env.get('transformers')} · backend "
             f"`{env.get('backend')}` · max_new_tokens {env.get('max_new_tokens')} · dtypes "
             f"{','.join(env.get('dtypes') or [DEFAULT_DTYPE])} · device {env.get('device')} · "
             f"{len(checks)} checks{_shard_text(env)}", ""]
    if env.get("shards_missing"):
        lines += [f"**Incomplete:** shard(s) {', '.join(env['shards_missing'])} of this run are missing from the "
                  "merged report.", ""]
    if report.interrupted:
        lines += [f"**Incomplete:** the run was interrupted (exit status {report.run.get('exitstatus')}); checks "
                  "that had not finished are missing from this report.", ""]
    counts = Counter(result.outcome for result in checks)
    lines += [", ".join(f"**{counts[name]}** {name}" for name in OUTCOMES if counts[name]) or "no checks", ""]
    if report.crashed_workers:
        lines += ["**Crashed workers:** " + "; ".join(_crash_line(w) for w in report.crashed_workers), ""]
    lines += _feature_sections(report, checks)
    matrix = columns(report)
    if len(matrix) > MAX_MATRIX_COLUMNS:
        lines += [f"The per-check matrix ({len(matrix)} level x scenario columns) is left out; the feature views "
                  "above and the JSON hold every check.", ""]
        matrix = []
    if matrix:
        by_key = {result.key: result for result in checks}
        lines.append("| model | " + " | ".join(f"{level}<br>{scenario}" for level, scenario in matrix) + " |")
        lines.append("|---|" + "---|" * len(matrix))
        for model, dtype, label in rows(checks):
            cells = [cell(by_key.get((model, scenario, level, dtype))) for level, scenario in matrix]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += _legend(report, {level for level, _ in matrix}, {scenario for _, scenario in matrix})
    sites = grouped_sites(checks)
    if sites:
        help_by_id = report.break_help()
        lines += ["## Break sites", "", "| location | GB id | break | origin | root cause | models | checks |",
                  "|---|---|---|---|---|---|---|"]
        for site in sites:
            lines.append(f"| `{site['where']}` ({site['function']}) | {_gb_link(site['gb_id'], help_by_id)} | "
                         f"{_escape(site['gb_type'])}{_inside(site)} | {site['origin']} | "
                         f"{'yes' if site['root_cause'] else 'no'} | {', '.join(site['models'])} | "
                         f"{len(site['checks'])} |")
        lines.append("")
        lines += _help_section([gb_id for site in sites for gb_id in (site["gb_id"], site["inside_gb_id"]) if gb_id],
                               help_by_id)
    lines += _audit_section(checks)
    lines += _cudagraph_section(checks)
    lines += _memory_section(report, checks)
    problems = [result for result in checks if result.outcome in FAILING_OUTCOMES]
    if problems:
        lines += ["## Failures", ""]
        lines += [f"- `{result.check_id}` **{result.outcome}**: {_escape(result.headline())}" for result in problems]
        lines.append("")
    return "\n".join(lines)


#: Above this many (level, scenario) columns the model x check matrix is unreadable: the feature views replace it.
MAX_MATRIX_COLUMNS = 40
#: A check's outcome as one character, for the feature x model view.
_GLYPHS = {"pass": "✅", "skip": "⏭", "nondeterministic": "⚠", "break": "⛔", "mismatch": "❌", "error": "💥"}


def _feature_sections(report: Report, checks: list[CheckResult]) -> list[str]:
    """Which generation features compile into one graph with eager's tokens: feature x level (outcomes counted
    over the models) and feature x model (one glyph per level). Shown once a run has scenarios beyond the four
    basic ones."""
    scenarios = _canonical({r.scenario for r in checks}, [*(report.environment.get("scenarios") or {}), *SCENARIOS])
    if set(scenarios) <= {"greedy", "sample", "eos", "padded"}:
        return []
    levels = _canonical({r.level for r in checks}, [*(report.environment.get("levels") or {}), *BUILTIN_LEVEL_NAMES])
    models = sorted({r.model for r in checks})
    by_cell: dict[tuple[str, str], list[CheckResult]] = {}
    for result in checks:
        by_cell.setdefault((result.scenario, result.level), []).append(result)
    lines = ["## Generation features x levels", "",
             "Each cell counts the models' outcomes for the feature at the level.", "",
             "| feature (scenario) | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]
    for scenario in scenarios:
        cells = []
        for level in levels:
            counts = Counter(result.outcome for result in by_cell.get((scenario, level), []))
            cells.append(" ".join(f"{_GLYPHS.get(outcome, outcome)} {counts[outcome]}" for outcome in OUTCOMES
                                  if counts[outcome]) or "—")
        lines.append(f"| {_feature_label(scenario)} | " + " | ".join(cells) + " |")
    lines += ["", "## Generation features x models", "",
              f"Each cell: one glyph per level, in the order {', '.join(levels)}.", "",
              "| feature (scenario) | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    by_key = {result.key[:3]: result for result in checks}
    for scenario in scenarios:
        cells = ["".join(_GLYPHS.get(by_key[(model, scenario, level)].outcome, "?") if (model, scenario, level)
                         in by_key else "·" for level in levels) for model in models]
        lines.append(f"| {_feature_label(scenario)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _feature_label(scenario: str) -> str:
    known = SCENARIOS.get(scenario)
    return f"{known.feature} (`{scenario}`)" if known and known.feature != scenario else f"`{scenario}`"


def _gb_link(gb_id: str, help_by_id: dict[str, BreakHelp]) -> str:
    if not gb_id:
        return "—"
    return f"[{gb_id}]({help_by_id[gb_id].url})" if gb_id in help_by_id else gb_id


def hint_text(found: BreakHelp) -> str:
    """The specific hints, then what kind of break the boilerplate says it is: one line."""
    kinds = f"({', '.join(found.kinds)})" if found.kinds else ""
    return " ".join(part for part in (*found.hints, kinds) if part)


def _help_section(gb_ids: list[str], help_by_id: dict[str, BreakHelp]) -> list[str]:
    """PyTorch's own words on each GB id of the break sites, in the sites' order."""
    shown = [help_by_id[gb_id] for gb_id in dict.fromkeys(gb_ids) if gb_id in help_by_id]
    if not shown:
        return []
    lines = ["### What PyTorch says about these breaks", ""]
    for found in shown:
        text = " ".join(part for part in (found.explanation, f"Hint: {hint_text(found)}" if hint_text(found) else "")
                        if part)
        lines.append(f"- [{found.gb_id}]({found.url}) **{_escape(found.gb_type)}**: {_escape(text)}")
    return [*lines, ""]


def _flag(value: bool | None) -> str:
    return "—" if value is None else str(value)


def _audit_section(checks: list[CheckResult]) -> list[str]:
    """transformers' ``_can_compile_fullgraph`` beside the measured forward and decode verdicts."""
    summaries = model_summaries(checks)
    if not has_flags(summaries):
        return []
    lines = ["## transformers' `_can_compile_fullgraph` flag audit", "",
             "| model | class | parameters | flag | " + " | ".join(AUDIT_LEVELS) + " | disagreement |",
             "|---|---|---|---|" + "---|" * len(AUDIT_LEVELS) + "---|"]
    for summary in summaries:
        verdicts = [OUTCOMES[v].cell if v in OUTCOMES else (v or "—")
                    for v in (summary.verdicts.get(level, "") for level in AUDIT_LEVELS)]
        parameters = f"{summary.parameters:,}" if summary.parameters is not None else "—"
        lines.append(f"| {summary.model} | {summary.model_class or '—'} | {parameters} | "
                     f"{_flag(summary.can_compile_fullgraph)} | " + " | ".join(verdicts) +
                     f" | {summary.disagreement or ''} |")
    lines.append("")
    disagreeing = disagreements(summaries)
    lines += [f"**{_plural(len(disagreeing), 'disagreement')}** between the flag and the measured verdicts"
              + (":" if disagreeing else "."), ""]
    lines += [f"- {summary.model} ({summary.model_class}): {summary.disagreement}: {_escape(summary.evidence)}"
              for summary in disagreeing]
    return [*lines, ""] if disagreeing else lines


def cudagraph_skips(checks: list[CheckResult]) -> list[tuple[str, list[str]]]:
    """(reason, check ids) for each reason inductor gave for running a graph without CUDA graphs, the most
    widespread first."""
    by_reason: dict[str, list[str]] = {}
    for result in checks:
        for reason in result.cudagraph_skips:
            by_reason.setdefault(reason, []).append(result.check_id)
    return sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))


def _cudagraph_section(checks: list[CheckResult]) -> list[str]:
    skips = cudagraph_skips(checks)
    if not skips:
        return []
    lines = ["## CUDA graphs skipped", "", "Inductor ran these compiled generations without CUDA graphs "
             "(`mode=\"reduce-overhead\"`); the tokens were still judged.", "", "| reason | checks |", "|---|---|"]
    lines += [f"| {_escape(reason)} | {', '.join(f'`{check}`' for check in ids)} |" for reason, ids in skips]
    return [*lines, ""]


MIB = 1024 * 1024


def _memory_section(report: Report, checks: list[CheckResult]) -> list[str]:
    """Peak CUDA memory of the compiled runs, per level: what a GPU job must have free (CUDA checks only)."""
    measured = [result for result in checks if result.peak_memory is not None]
    if not measured:
        return []
    levels = _canonical({r.level for r in measured}, [*(report.environment.get("levels") or {}),
                                                     *BUILTIN_LEVEL_NAMES])
    lines = ["## Peak CUDA memory", "", "The most CUDA memory each compiled run held at once (the model's weights "
             "included), summed and largest per level.", "", "| level | checks | sum (MiB) | largest (MiB) | in |",
             "|---|---|---|---|---|"]
    for level in levels:
        peaks = sorted(((r.peak_memory or 0, r.check_id) for r in measured if r.level == level), reverse=True)
        lines.append(f"| {level} | {len(peaks)} | {sum(p for p, _ in peaks) / MIB:,.1f} | {peaks[0][0] / MIB:,.1f} "
                     f"| `{peaks[0][1]}` |")
    return [*lines, ""]


def _legend(report: Report, levels: set[str], scenarios: set[str]) -> list[str]:
    """What each level and scenario in the matrix means, from the descriptions the report carries."""
    described = [(kind, name, text) for kind, names in (("level", levels), ("scenario", scenarios))
                 for name, text in (report.environment.get(f"{kind}s") or {}).items() if name in names and text]
    if not described:
        return []
    return [*(f"- {kind} `{name}`: {_escape(text)}" for kind, name, text in described), ""]


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
    sites = grouped_sites(checks)[:top_sites]
    if sites:
        help_by_id = report.break_help()
        lines.append("top break sites:")
        for site in sites:
            lines.append(f"  {site['where']} {site['gb_id'] or '-'} {site['gb_type']}{_inside(site)} "
                         f"[{site['origin']}] in {len(site['checks'])} check(s): {', '.join(site['models'])}")
            found = help_by_id.get(site["gb_id"] or site["inside_gb_id"])
            if found is not None:
                lines.append(f"    hint: {hint_text(found) or found.explanation} {found.url}".rstrip())
    disagreeing = disagreements(model_summaries(checks))
    if disagreeing:
        lines.append(f"_can_compile_fullgraph disagrees with the verdicts for {len(disagreeing)} model(s):")
        lines += [f"  {summary.model}: {summary.disagreement}" for summary in disagreeing]
    for reason, ids in cudagraph_skips(checks):
        lines.append(f"CUDA graphs skipped in {len(ids)} check(s): {reason}")
    for worker in report.crashed_workers:
        lines.append(f"crashed worker {_crash_line(worker)}")
    if report.interrupted:
        lines.append("run interrupted: the report holds only the checks that finished")
    return lines
