"""A report as a Markdown page (CI step summaries): outcome matrix, feature views, break sites with PyTorch's words
on them, the flag audit, CUDA-graph skips, peak memory, failures. The terminal summary is ``terminal``."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.builtin_levels import BUILTIN_LEVEL_NAMES
from pytest_fullgraph.report.audit import AUDIT_LEVELS, disagreements, has_flags, model_summaries
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import (
    break_label,
    canonical,
    columns,
    crash_line,
    cudagraph_skips,
    escape,
    flag_text,
    grouped_sites,
    hint_text,
    inside_text,
    plural,
    rows,
)
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


def markdown(report: Report) -> str:
    """A GitHub step-summary friendly page: outcome matrix, legend, break sites, failures."""
    checks = report.sorted_checks()
    env = report.environment
    lines = ["# pytest_fullgraph report", "",
             f"torch {env.get('torch')} · transformers {env.get('transformers')} · backend "
             f"`{env.get('backend')}` · max_new_tokens {env.get('max_new_tokens')} · dtypes "
             f"{','.join(env.get('dtypes') or [DEFAULT_DTYPE])} · device {env.get('device')} · "
             f"{plural(len(checks), 'check')}{_shard_text(env)}", ""]
    if env.get("shards_missing"):
        lines += [f"**Incomplete:** shard(s) {', '.join(env['shards_missing'])} of this run are missing from the "
                  "merged report.", ""]
    if report.interrupted:
        lines += [f"**Incomplete:** the run was interrupted (exit status {report.run.get('exitstatus')}); checks "
                  "that had not finished are missing from this report.", ""]
    counts = Counter(result.outcome for result in checks)
    lines += [", ".join(f"**{counts[name]}** {name}" for name in OUTCOMES if counts[name]) or "no checks", ""]
    if report.crashed_workers:
        lines += ["**Crashed workers:** " + "; ".join(crash_line(w) for w in report.crashed_workers), ""]
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
                         f"{escape(site['gb_type'])}{inside_text(site)} | {site['origin']} | "
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
        lines += [f"- `{result.check_id}` **{result.outcome}**: {escape(result.headline())}" for result in problems]
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
    scenarios = canonical({r.scenario for r in checks}, [*(report.environment.get("scenarios") or {}), *SCENARIOS])
    if set(scenarios) <= {"greedy", "sample", "eos", "padded"}:
        return []
    levels = canonical({r.level for r in checks}, [*(report.environment.get("levels") or {}), *BUILTIN_LEVEL_NAMES])
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


def _help_section(gb_ids: list[str], help_by_id: dict[str, BreakHelp]) -> list[str]:
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
                     f"{flag_text(summary.can_compile_fullgraph)} | " + " | ".join(verdicts) +
                     f" | {summary.disagreement or ''} |")
    lines.append("")
    disagreeing = disagreements(summaries)
    lines += [f"**{plural(len(disagreeing), 'disagreement')}** between the flag and the measured verdicts"
              + (":" if disagreeing else "."), ""]
    lines += [f"- {summary.model} ({summary.model_class}): {summary.disagreement}: {escape(summary.evidence)}"
              for summary in disagreeing]
    return [*lines, ""] if disagreeing else lines


def _cudagraph_section(checks: list[CheckResult]) -> list[str]:
    skips = cudagraph_skips(checks)
    if not skips:
        return []
    lines = ["## CUDA graphs skipped", "", "Inductor ran these compiled generations without CUDA graphs "
             "(`mode=\"reduce-overhead\"`); the tokens were still judged.", "", "| reason | checks |", "|---|---|"]
    lines += [f"| {escape(reason)} | {', '.join(f'`{check}`' for check in ids)} |" for reason, ids in skips]
    return [*lines, ""]


MIB = 1024 * 1024


def _memory_section(report: Report, checks: list[CheckResult]) -> list[str]:
    """Peak CUDA memory of the compiled runs, per level: what a GPU job must have free (CUDA checks only)."""
    measured = [result for result in checks if result.peak_memory is not None]
    if not measured:
        return []
    levels = canonical({r.level for r in measured}, [*(report.environment.get("levels") or {}),
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
    return [*(f"- {kind} `{name}`: {escape(text)}" for kind, name, text in described), ""]


