"""The measured findings as Markdown, generated from reports so that a findings page cannot drift from the data.

    python -m pytest_fullgraph report findings bench/reports --releases bench/reports/releases -o docs/FINDINGS.md

One run's reports (its shards or parts, merged): outcomes per level, counted over checks and over models; the
models whose outcome depends on the scenario; the break sites shared by the most models; where two levels give
one model different outcomes; the models with each failing outcome and with skips; the flag audit; the check
time (each table is ``run_tables``'). Then the torch-release reports (``releases``): outcomes per release and
level, and what changed from each release to the next, as ``report diff`` says it. Further runs (``--also``: the
decoding-modes matrix, transformers' export paths) get a shorter section each: outcomes per level, per generation
feature, errors by cause, break sites and mismatches. Everything is sorted and nothing depends on the machine or
the clock (paths are shown relative to the working directory), so the same reports give the same bytes. No torch
import.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_fullgraph.core.results import MISMATCH, CheckResult
from pytest_fullgraph.publish.provenance import draws_table, provenance
from pytest_fullgraph.publish.releases import release_section
from pytest_fullgraph.publish.run_tables import (
    audit_lines,
    level_differences,
    outcome_lines,
    outcome_tables,
    scenario_dependence,
    site_table,
    time_lines,
)
from pytest_fullgraph.report import recompiles
from pytest_fullgraph.report.files import distinct, load, write_atomic
from pytest_fullgraph.report.merge import merge
from pytest_fullgraph.report.order import levels_in, selected_scenarios
from pytest_fullgraph.report.render import feature_level_table
from pytest_fullgraph.report.schema import JSON_NAME, Report, ReportError
from pytest_fullgraph.report.sections import errors

#: Break sites listed per table unless ``--sites`` says otherwise.
DEFAULT_SITES = 15
#: Outcomes listed model by model, with each model's first message: the failures, then the skips' reasons.
LISTED_OUTCOMES = ("error", "mismatch", "nondeterministic", "skip")
#: Environment keys that describe a run's configuration, and how the page's first line says each.
CONFIGURATION = (("torch", "torch {}"), ("transformers", "transformers {}"), ("backend", "backend {}"),
                 ("max_new_tokens", "{} new tokens"), ("dtypes", "{}"), ("device", "on {}"),
                 ("attn_implementation", "attention {}"), ("run_slow", "{}"))
#: Values said in words rather than as stored.
WORDS: dict[str, dict[Any, str]] = {"run_slow": {True: "slow tier", False: "fast tier"}}


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


def _configuration(environment: dict[str, Any], checks: Sequence[CheckResult]) -> str:
    """The run's settings as the page's first line says them; the new tokens as its checks generated them (a level
    such as ``cache`` generates its own count, whatever the run's ``--fullgraph-max-new-tokens``)."""
    parts = []
    for key, template in CONFIGURATION:
        if key == "max_new_tokens":
            count, levels_own = _tokens_generated(checks, environment.get(key))
            parts.append(template.format(count) + levels_own)
            continue
        value = environment.get(key)
        if value is None or value == []:
            continue
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        parts.append(template.format(WORDS.get(key, {}).get(value, value)))
    return ", ".join(parts)


def _tokens_generated(checks: Sequence[CheckResult], run_tokens: Any) -> tuple[Any, str]:
    """One count when every check generated the same (the run's, or a level's own); else the run's, and each level's
    own after it: ``(4, " (cache: 16)")``."""
    per_level = {result.level: result.max_new_tokens for result in checks}
    counts = set(per_level.values())
    if len(counts) <= 1:
        return (counts.pop() if counts else run_tokens), ""
    own = ", ".join(f"{level}: {count}" for level, count in sorted(per_level.items()) if count != run_tokens)
    return run_tokens, f" ({own})"


def _run_heading(label: str, run: Sequence[tuple[str, Report]]) -> tuple[Report, list[CheckResult], list[str]]:
    """A run's reports merged (``report merge``'s rules: one configuration), its checks, and the lines every run's
    section opens with (configuration, sources, provenance, outcomes per level)."""
    merged = merge(run)
    checks = merged.sorted_checks()
    levels = levels_in((result.level for result in checks), merged)
    models = sorted({result.model for result in checks})
    scenarios = selected_scenarios((result.scenario for result in checks), merged)
    return merged, checks, [f"## {label}{len(checks)} checks of {len(models)} models", "",
                    f"{_configuration(merged.environment, checks)}; scenarios {', '.join(scenarios)}. From "
                    f"{', '.join(f'`{source}`' for source, _ in run)}.", "",
                    provenance(report for _, report in run).line(), "",
                    "### Outcomes per level", "", *outcome_tables(checks, levels)]


def run_section(run: Sequence[tuple[str, Report]], sites: int = DEFAULT_SITES) -> list[str]:
    """The sections of one run, its reports merged (``report merge``'s rules: one configuration)."""
    _, checks, lines = _run_heading("", run)
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


def further_run_section(label: str, run: Sequence[tuple[str, Report]], sites: int = DEFAULT_SITES) -> list[str]:
    """A run beside the basic matrix (the decoding modes, transformers' export paths), merged: outcomes per level
    and per generation feature, errors by cause and whose fault, break sites, mismatches."""
    merged, checks, lines = _run_heading(f"`{label}`: ", run)
    drawn = draws_table(report for _, report in run)
    if drawn:
        lines += ["", "Levels whose outcomes vary from run to run, each check that failed (not a skip) drawn again "
                  "(`bench/draws.py`, `environment.draws`):", "", *drawn]
    lines += ["", "### Generation features x levels", "", *feature_level_table(merged, checks)]
    lines += ["", *(errors(merged, checks, heading="###") or ["### Errors by cause", "", "No errors."])]
    lines += ["", "### Break sites shared by the most models", "", *site_table(checks, sites)]
    lines += ["", "### Mismatches", "", *outcome_lines(checks, MISMATCH)]
    return [*lines, *_recompiles(checks)]


def _recompiles(checks: list[CheckResult]) -> list[str]:
    """The second requests of a run that made them (``--fullgraph-recompiles``), as the Markdown page lists them."""
    found = recompiles.markdown_section(checks)
    return ["", "### Recompiles", *found[1:-1]] if found else []

