"""The measured findings as Markdown, generated from reports so that a findings page cannot drift from the data.

    python -m pytest_fullgraph report findings bench/reports --releases bench/reports/releases -o docs/FINDINGS.md

One run's reports (its shards or parts, merged): outcomes per level, counted over checks and over models; the
models whose outcome depends on the scenario; the break sites shared by the most models; where two levels give
one model different outcomes; the models with each failing outcome and with skips; the flag audit; the check
time. Then the torch-release reports (``releases``): outcomes per release and level, and what changed from each
release to the next, as ``report diff`` says it. Further runs (``--also``: the decoding-modes matrix,
transformers' export paths) get a shorter section each: outcomes per level, per generation feature, errors by
cause, break sites and mismatches. Everything is sorted and nothing depends on the machine or the
clock (paths are shown relative to the working directory), so the same reports give the same bytes. No torch
import.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_fullgraph.core.results import MISMATCH, OUTCOMES, PASS, CheckResult, check_seconds, outcome_rank
from pytest_fullgraph.publish.provenance import draws_table, provenance
from pytest_fullgraph.publish.releases import level_order, release_section
from pytest_fullgraph.report import JSON_NAME, Report, ReportError, distinct, load, merge, write_atomic
from pytest_fullgraph.report.audit import disagreements, model_summaries
from pytest_fullgraph.report.known_issues import known_of
from pytest_fullgraph.report.render import feature_level_table
from pytest_fullgraph.report.sections import errors
from pytest_fullgraph.report.tables import grouped_sites

#: Break sites listed per table unless ``--sites`` says otherwise.
DEFAULT_SITES = 15
#: Level pairs whose outcomes are compared model by model: the loop's two forms, the loop compiled and exported,
#: and transformers' compiled forward against the same forward inside our loop.
COMPARED_LEVELS = (("decode", "while"), ("decode", "export"), ("forward", "decode"))
#: Outcomes listed model by model, with each model's first message: the failures, then the skips' reasons.
LISTED_OUTCOMES = ("error", "mismatch", "nondeterministic", "skip")
#: Environment keys that describe a run's configuration, and how the page's first line says each.
CONFIGURATION = (("torch", "torch {}"), ("transformers", "transformers {}"), ("backend", "backend {}"),
                 ("max_new_tokens", "{} new tokens"), ("dtypes", "{}"), ("device", "on {}"),
                 ("attn_implementation", "attention {}"), ("run_slow", "{}"))
#: Values said in words rather than as stored.
WORDS: dict[str, dict[Any, str]] = {"run_slow": {True: "slow tier", False: "fast tier"}}
#: How long a quoted message may be in a list.
MESSAGE_CHARS = 200


def report_files(path: Path, *, releases: bool = False) -> list[Path]:
    """A report file as given; a directory stands for the reports directly in it (``*.json``, ``*.json.gz``;
    ``X.json`` beside ``X.json.gz`` is the same report unpacked, read once) or, for ``releases``, for one
    ``fullgraph-report.json[.gz]`` per sub-directory (one per torch release)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ReportError(f"{path}: no such report or directory")
    if releases:
        found = [next(each for each in pair if each.is_file()) for pair in
                 ((sub / f"{JSON_NAME}.gz", sub / JSON_NAME) for sub in sorted(path.iterdir()))
                 if any(each.is_file() for each in pair)]
    else:
        packed = sorted(path.glob("*.json.gz"))
        found = sorted([*packed, *(plain for plain in path.glob("*.json") if plain.with_suffix(".json.gz")
                                   not in packed)])
    if not found:
        pattern = f"*/{JSON_NAME}[.gz]" if releases else "*.json, *.json.gz"
        raise ReportError(f"{path}: no reports in this directory (looked for {pattern})")
    return found


def shown(path: Path) -> str:
    """A path as the page shows it: relative to the working directory when inside it, with forward slashes."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def command_line(reports: Sequence[Path], releases: Sequence[Path], output: Path | None,
                 sites: int = DEFAULT_SITES, also: Sequence[Path] = ()) -> str:
    """The command that regenerates the page, as the page's first lines quote it."""
    words = ["python", "-m", "pytest_fullgraph", "report", "findings", *(shown(path) for path in reports)]
    if releases:
        words += ["--releases", *(shown(path) for path in releases)]
    if also:
        words += ["--also", *(shown(path) for path in also)]
    if sites != DEFAULT_SITES:
        words += ["--sites", str(sites)]
    if output is not None:
        words += ["-o", shown(output)]
    return shlex.join(words)


def generate(reports: Sequence[Path], releases: Sequence[Path] = (), output: Path | None = None,
             sites: int = DEFAULT_SITES, also: Sequence[Path] = ()) -> str:
    """The whole page from the paths the command line takes (see ``report_files``); each of ``also`` is a
    further run (a directory of its shards, or one report)."""
    run = _loaded(reports)
    by_release = [(shown(path), load(path)) for given in releases for path in report_files(given, releases=True)]
    further = [(shown(given), _loaded([given])) for given in also]
    return findings(run, by_release, command_line(reports, releases, output, sites, also), sites, further)


def _loaded(paths: Sequence[Path]) -> list[tuple[str, Report]]:
    return [(shown(path), load(path)) for path in distinct(path for given in paths for path in report_files(given))]


def write(text: str, output: Path) -> None:
    """The page into ``output``, atomically; a path that cannot be written is a one-line ``ReportError``."""
    try:
        write_atomic(output, text)
    except OSError as error:
        raise ReportError(f"{output}: cannot write ({error.strerror or error})") from None


def findings(run: Sequence[tuple[str, Report]], releases: Sequence[tuple[str, Report]], command: str,
             sites: int = DEFAULT_SITES, further: Sequence[tuple[str, Sequence[tuple[str, Report]]]] = ()) -> str:
    """Markdown: a header quoting ``command``, the merged run's sections, each further run's, then the release
    table."""
    lines = ["# Findings", "",
             f"Generated by `{command}` from the reports named below; do not edit it by hand. When the reports "
             "change, run the command again and commit the page with them.", ""]
    lines += run_section(run, sites)
    for label, reports in further:
        lines += ["", *further_run_section(label, reports, sites)]
    if releases:
        lines += ["", *release_section(releases)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _configuration(environment: dict[str, Any]) -> str:
    parts = []
    for key, template in CONFIGURATION:
        value = environment.get(key)
        if value is None or value == []:
            continue
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        parts.append(template.format(WORDS.get(key, {}).get(value, value)))
    return ", ".join(parts)


def _counts_row(label: str, outcomes: Sequence[str], extra: Sequence[str] = ()) -> str:
    counts = Counter(outcomes)
    return "| " + " | ".join([label, str(len(outcomes)), *(str(counts[name]) for name in OUTCOMES), *extra]) + " |"


def run_section(run: Sequence[tuple[str, Report]], sites: int = DEFAULT_SITES) -> list[str]:
    """The sections of one run, its reports merged (``report merge``'s rules: one configuration)."""
    merged = merge(run)
    checks = merged.sorted_checks()
    levels = level_order(checks)
    models = sorted({result.model for result in checks})
    scenarios = list(dict.fromkeys(result.scenario for result in sorted(checks, key=_scenario_order(merged))))
    lines = [f"## {len(checks)} checks of {len(models)} models", "",
             f"{_configuration(merged.environment)}; scenarios {', '.join(scenarios)}. From "
             f"{', '.join(f'`{source}`' for source, _ in run)}.", "",
             provenance(report for _, report in run).line(), "",
             "### Outcomes per level", "", *outcome_tables(checks, levels)]
    lines += ["", *scenario_dependence(checks)]
    lines += ["", "### Break sites shared by the most models", "", *site_table(checks, sites)]
    without = [result for result in checks if result.level != "generate"]
    if len(without) != len(checks):
        lines += ["", "The same without the `generate` level, whose own sites every model shares:", "",
                  *site_table(without, sites)]
    lines += ["", "### Where two levels differ", "", *level_differences(checks)]
    lines += ["", "### Failures and skips by model", ""]
    for outcome in LISTED_OUTCOMES:
        lines += outcome_lines(checks, outcome)
    lines += ["", "### Flag audit", "", *audit_lines(checks)]
    lines += ["", "### Check time", "", *time_lines(checks)]
    return lines


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


def further_run_section(label: str, run: Sequence[tuple[str, Report]], sites: int = DEFAULT_SITES) -> list[str]:
    """A run beside the basic matrix (the decoding modes, transformers' export paths), merged: outcomes per level
    and per generation feature, errors by cause and whose fault, break sites, mismatches."""
    merged = merge(run)
    checks = merged.sorted_checks()
    models = sorted({result.model for result in checks})
    scenarios = list(dict.fromkeys(result.scenario for result in sorted(checks, key=_scenario_order(merged))))
    lines = [f"## `{label}`: {len(checks)} checks of {len(models)} models", "",
             f"{_configuration(merged.environment)}; scenarios {', '.join(scenarios)}. From "
             f"{', '.join(f'`{source}`' for source, _ in run)}.", "",
             provenance(report for _, report in run).line(), "",
             "### Outcomes per level", "", *outcome_tables(checks, level_order(checks))]
    drawn = draws_table(report for _, report in run)
    if drawn:
        lines += ["", "Levels whose outcomes vary from run to run, each check that failed (not a skip) drawn again "
                  "(`bench/draws.py`, `environment.draws`):", "", *drawn]
    lines += ["", "### Generation features x levels", "", *feature_level_table(merged, checks)]
    lines += ["", *(errors(merged, checks, heading="###") or ["### Errors by cause", "", "No errors."])]
    lines += ["", "### Break sites shared by the most models", "", *site_table(checks, sites)]
    return [*lines, "", "### Mismatches", "", *outcome_lines(checks, MISMATCH)]


def _scenario_order(report: Report) -> Any:
    """Sort key: scenarios in the run's own order (its legend), the rest by name."""
    legend = list(report.environment.get("scenarios_selected") or report.environment.get("scenarios") or {})
    return lambda result: (legend.index(result.scenario) if result.scenario in legend else len(legend),
                           result.scenario)


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
        levels = ", ".join(level_order(found))
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

