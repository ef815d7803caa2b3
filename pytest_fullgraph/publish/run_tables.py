"""The tables and lists of one run's section of the findings page (``findings``), each from the run's checks:
outcomes per level, scenario dependence, shared break sites, level differences, the models with each outcome, the
flag audit and the check time. No torch import."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pytest_fullgraph.core.results import OUTCOMES, PASS, CheckResult, check_seconds, outcome_rank
from pytest_fullgraph.report.audit import disagreements, model_summaries
from pytest_fullgraph.report.known_issues import known_of
from pytest_fullgraph.report.order import levels_in
from pytest_fullgraph.report.tables import grouped_sites

#: Level pairs whose outcomes are compared model by model: the loop's two forms, the loop compiled and exported,
#: and transformers' compiled forward against the same forward inside our loop.
COMPARED_LEVELS = (("decode", "while"), ("decode", "export"), ("forward", "decode"))
#: How long a quoted message may be in a list.
MESSAGE_CHARS = 200


def outcome_tables(checks: Sequence[CheckResult], levels: Sequence[str]) -> list[str]:
    """Outcomes per level, counted over checks, then over models (each by its worst outcome at the level)."""
    lines = ["| level | checks | " + " | ".join(OUTCOMES) + " | models passing every check |",
             "|---|" + "---|" * (len(OUTCOMES) + 2)]
    for level in levels:
        at_level = [result for result in checks if result.level == level]
        passing = {result.model for result in at_level} - {result.model for result in at_level
                                                             if result.outcome != PASS}
        lines.append(_counts_row(f"`{level}`", [result.outcome for result in at_level], [str(len(passing))]))
    summaries = model_summaries(list(checks))
    lines += ["", "The same over models: each model counted once per level, by its worst outcome there (a skip "
              "only when every check skipped).", "",
              "| level | models | " + " | ".join(OUTCOMES) + " |", "|---|" + "---|" * (len(OUTCOMES) + 1)]
    for level in levels:
        verdicts = [summary.verdicts[level] for summary in summaries if level in summary.verdicts]
        lines.append(_counts_row(f"`{level}`", verdicts))
    return lines


def _counts_row(label: str, outcomes: Sequence[str], extra: Sequence[str] = ()) -> str:
    counts = Counter(outcomes)
    return "| " + " | ".join([label, str(len(outcomes)), *(str(counts[name]) for name in OUTCOMES), *extra]) + " |"


def scenario_dependence(checks: Sequence[CheckResult]) -> list[str]:
    """The (model, level) pairs whose outcome is not the same in every scenario and dtype."""
    outcomes: dict[tuple[str, str], dict[str, list[str]]] = {}
    for result in checks:
        by_outcome = outcomes.setdefault((result.model, result.level), {})
        by_outcome.setdefault(result.outcome, []).append(result.scenario)
    mixed = [(key, found) for key, found in sorted(outcomes.items()) if len(found) > 1]
    if not mixed:
        return ["Every model has one outcome per level, in every scenario."]
    lines = [f"A model has one outcome per level in every scenario, but for {len(mixed)} (model, level) pair(s):", ""]
    for (model, level), found in mixed:
        cells = "; ".join(f"{outcome} in {', '.join(sorted(set(scenarios)))}" for outcome, scenarios in
                          sorted(found.items(), key=lambda item: outcome_rank(item[0])))
        lines.append(f"- {model} `{level}`: {cells}")
    return lines


def site_table(checks: Sequence[CheckResult], count: int) -> list[str]:
    """The ``count`` root-cause break sites shared by the most models (then checks, then location), one row
    each; the breaks dynamo raised because of a nested one ("Graph break under ...") are counted, not listed."""
    every = sorted(grouped_sites(list(checks)),
                   key=lambda site: (-len(site["models"]), -len(site["checks"]), site["where"], site["gb_type"],
                                     site["inside"]))
    sites = [site for site in every if site["root_cause"]]
    if not every:
        return ["No graph breaks."]
    lines = ["| site | GB id | break | origin | models | checks | which models |", "|---|---|---|---|---|---|---|"]
    for site in sites[:count]:
        what = site["gb_type"] + (f"; inside it: {site['inside']}" if site["inside"] else "") + "".join(
            f"; {issue.label()}" for issue in site["known"])
        named = ", ".join(site["models"][:12]) + (f", and {len(site['models']) - 12} more"
                                                  if len(site["models"]) > 12 else "")
        lines.append("| " + " | ".join(_cell(text) for text in (
            f"`{site['where']}`", site["gb_id"] or "-", what, site["origin"],
            str(len(site["models"])), str(len(site["checks"])), named)) + " |")
    rest = [f"{len(sites) - count} more root-cause site(s)"] if len(sites) > count else []
    if len(every) > len(sites):
        rest.append(f"{len(every) - len(sites)} site(s) of breaks raised because of a nested break")
    return [*lines, "", f"Not listed: {' and '.join(rest)}."] if rest else lines


def level_differences(checks: Sequence[CheckResult]) -> list[str]:
    """For each pair of ``COMPARED_LEVELS`` both present: how often one model's check (scenario, dtype) has the
    same outcome at both levels, and which models differ."""
    by_key = {result.key: result for result in checks}
    lines: list[str] = []
    for first, second in COMPARED_LEVELS:
        pairs = [(result, by_key[(result.model, result.scenario, second, result.dtype)]) for result in checks
                 if result.level == first and (result.model, result.scenario, second, result.dtype) in by_key]
        if not pairs:
            continue
        differing: dict[tuple[str, str, str], int] = Counter(
            (one.model, one.outcome, other.outcome) for one, other in pairs if one.outcome != other.outcome)
        same = len(pairs) - sum(differing.values())
        lines.append(f"- `{second}` against `{first}`: the same outcome in {same} of {len(pairs)} checks"
                     + (":" if differing else "."))
        lines += [f"  - {model}: `{first}` {one}, `{second}` {other} ({count} check(s))"
                  for (model, one, other), count in sorted(differing.items())]
    return lines or ["No two compared levels ran on the same checks."]


def outcome_lines(checks: Sequence[CheckResult], outcome: str) -> list[str]:
    """The models with an ``outcome``: their levels, the first such check's message, and the known upstream
    issues their checks match."""
    by_model: dict[str, list[CheckResult]] = {}
    for result in checks:
        if result.outcome == outcome:
            by_model.setdefault(result.model, []).append(result)
    if not by_model:
        return [f"- No `{outcome}`."]
    lines = [f"- `{outcome}`, {sum(map(len, by_model.values()))} check(s) of {len(by_model)} model(s):"]
    for model, found in sorted(by_model.items()):
        levels = ", ".join(levels_in(result.level for result in found))
        lines.append(f"  - {model} ({levels}): {_message(found[0].message)}")
        lines += [f"    - {issue.label()}: {issue.title}" for issue in known_of(found)]
    return lines


def _message(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else "(no message)"
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS] + " ..."


def audit_lines(checks: Sequence[CheckResult]) -> list[str]:
    """The flag audit's disagreements, grouped by direction."""
    disagreeing = disagreements(model_summaries(list(checks)))
    if not disagreeing:
        return ["No model's `_can_compile_fullgraph` flag disagrees with its measured verdicts."]
    lines = [f"{len(disagreeing)} model(s) whose `_can_compile_fullgraph` flag disagrees with the measured "
             "verdicts:", ""]
    for kind in sorted({summary.disagreement for summary in disagreeing}):
        found = [summary for summary in disagreeing if summary.disagreement == kind]
        lines.append(f"- {kind} ({len(found)}): " + ", ".join(summary.model for summary in found))
        evidence = {summary.evidence for summary in found}
        if len(evidence) == 1:
            lines.append(f"  ({_message(evidence.pop())})")
        else:
            lines += [f"  - {summary.model} ({summary.model_class}): {_message(summary.evidence)}"
                      for summary in found]
    return lines


def time_lines(checks: Sequence[CheckResult], slowest: int = 5) -> list[str]:
    """The check time summed over checks (not wall time: workers run side by side), and the slowest checks."""
    spent = {result.check_id: check_seconds(result) for result in checks}
    ordered = sorted(checks, key=lambda result: (-spent[result.check_id], result.key))
    lines = [f"Summed over checks: {sum(spent.values()) / 60:.1f} min. The slowest:", ""]
    lines += [f"- {result.check_id}: {spent[result.check_id]:.1f} s ({result.outcome})"
              for result in ordered[:slowest]]
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")

