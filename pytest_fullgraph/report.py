"""The report: data model, merge, baseline diff, and the JSON / Markdown / terminal renderings."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_fullgraph.check import LEVELS, SCENARIOS, CheckResult

SCHEMA = "pytest_fullgraph/report"
SCHEMA_VERSION = 1
JSON_NAME = "fullgraph-report.json"
MARKDOWN_NAME = "fullgraph-report.md"
OUTCOME_RANK = {"pass": 0, "nondeterministic": 1, "break": 2, "mismatch": 3, "error": 4}


class ReportError(Exception):
    """A report file that cannot be used; the message names the file and what is wrong."""


@dataclass
class Report:
    environment: dict[str, Any]
    checks: list[CheckResult] = field(default_factory=list)
    crashed_workers: list[dict[str, str]] = field(default_factory=list)

    def sorted_checks(self) -> list[CheckResult]:
        return sorted(self.checks, key=check_key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "environment": self.environment,
            "crashed_workers": sorted(self.crashed_workers, key=lambda worker: worker.get("node", "")),
            "checks": [result.to_dict() for result in self.sorted_checks()],
        }

    @classmethod
    def from_dict(cls, data: Any, source: str) -> Report:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ReportError(f"{source}: not a pytest_fullgraph report (expected \"schema\": \"{SCHEMA}\")")
        if data.get("version") != SCHEMA_VERSION:
            raise ReportError(f"{source}: report schema version {data.get('version')!r} is not supported; "
                              f"this pytest_fullgraph reads version {SCHEMA_VERSION}")
        try:
            checks = [CheckResult.from_dict(item) for item in data["checks"]]
            return cls(dict(data["environment"]), checks, list(data.get("crashed_workers", [])))
        except (KeyError, TypeError, ValueError) as error:
            raise ReportError(f"{source}: malformed report ({type(error).__name__}: {error})") from None


def check_key(result: CheckResult) -> tuple[str, str, str]:
    return (result.model, result.scenario, result.level)


def environment(settings: dict[str, Any]) -> dict[str, Any]:
    """Versions and machine facts that explain a report, plus the settings that produced it."""
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "git_revision": _git_revision(),
        **settings,
    }


def _git_revision() -> str | None:
    try:
        completed = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                   check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() or None if completed.returncode == 0 else None


# --- reading and writing --------------------------------------------------------------------------------------


def load(path: str | Path) -> Report:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ReportError(f"{path}: cannot read ({error.strerror or error})") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ReportError(f"{path}: not valid JSON ({error})") from None
    return Report.from_dict(data, str(path))


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so an interrupted run never leaves a truncated file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write(report: Report, directory: str | Path) -> list[Path]:
    directory = Path(directory)
    json_path, markdown_path = directory / JSON_NAME, directory / MARKDOWN_NAME
    write_atomic(json_path, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    write_atomic(markdown_path, markdown(report))
    return [json_path, markdown_path]


def merge(reports: Iterable[tuple[str, Report]]) -> Report:
    """Union of shard reports; the same check with different outcomes in two shards is an error."""
    merged: Report | None = None
    by_key: dict[tuple[str, str, str], tuple[str, CheckResult]] = {}
    for source, report in reports:
        if merged is None:
            merged = Report(dict(report.environment))
        for name in ("torch", "transformers", "backend"):
            if report.environment.get(name) != merged.environment.get(name):
                raise ReportError(f"{source}: {name} is {report.environment.get(name)!r} but an earlier report "
                                  f"has {merged.environment.get(name)!r}; merge reports of one configuration")
        merged.crashed_workers.extend(report.crashed_workers)
        for result in report.checks:
            key = check_key(result)
            if key in by_key and by_key[key][1].outcome != result.outcome:
                raise ReportError(f"{source}: check {result.check_id} is {result.outcome!r} there but "
                                  f"{by_key[key][1].outcome!r} in {by_key[key][0]}")
            by_key[key] = (source, result)
    if merged is None:
        raise ReportError("no reports to merge")
    merged.checks = [result for _, result in by_key.values()]
    return merged


# --- diff against a baseline -----------------------------------------------------------------------------------


def break_sites(result: CheckResult) -> set[tuple[str, str]]:
    records = result.breaks or ([result.first_break] if result.first_break else [])
    return {(record.where(), record.gb_type) for record in records}


def break_count(result: CheckResult) -> int:
    return len(result.breaks) if result.breaks else int(result.first_break is not None)


def diff(baseline: Report, current: Report) -> tuple[list[str], list[str], list[str]]:
    """(regressions, improvements, notes), each a printable line, like PyTorch's graph-break CI gate."""
    regressions: list[str] = []
    improvements: list[str] = []
    notes: list[str] = []
    before = {check_key(result): result for result in baseline.checks}
    after = {check_key(result): result for result in current.checks}
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old is None:
            notes.append(f"NEW {new.check_id}: {new.outcome}")  # type: ignore[union-attr]
            continue
        if new is None:
            notes.append(f"MISSING {old.check_id}: in the baseline ({old.outcome}) but not in this report")
            continue
        name = new.check_id
        if OUTCOME_RANK.get(new.outcome, 9) > OUTCOME_RANK.get(old.outcome, 9):
            regressions.append(f"REGRESSION {name}: {old.outcome} -> {new.outcome}: {new.message.splitlines()[0]}"
                               if new.message else f"REGRESSION {name}: {old.outcome} -> {new.outcome}")
        elif OUTCOME_RANK.get(new.outcome, 9) < OUTCOME_RANK.get(old.outcome, 9):
            improvements.append(f"IMPROVED {name}: {old.outcome} -> {new.outcome}")
        for where, gb_type in sorted(break_sites(new) - break_sites(old)):
            regressions.append(f"REGRESSION {name}: new break site {where} ({gb_type})")
        for where, gb_type in sorted(break_sites(old) - break_sites(new)):
            improvements.append(f"IMPROVED {name}: break site gone {where} ({gb_type})")
        old_count, new_count = break_count(old), break_count(new)
        if new_count > old_count:
            regressions.append(f"REGRESSION {name}: graph breaks {old_count} -> {new_count}")
        elif new_count < old_count:
            improvements.append(f"IMPROVED {name}: graph breaks {old_count} -> {new_count}")
    return regressions, improvements, notes


# --- renderings --------------------------------------------------------------------------------------------------

_CELL = {"pass": "✅ pass", "mismatch": "❌ mismatch", "error": "💥 error", "nondeterministic": "⚠️ nondet"}


def cell(result: CheckResult | None) -> str:
    if result is None:
        return "—"
    if result.outcome == "break":
        return f"⛔ {max(break_count(result), 1)} break{'s' if break_count(result) != 1 else ''}"
    return _CELL.get(result.outcome, result.outcome)


def _canonical(values: set[str], order: Iterable[str]) -> list[str]:
    """Known names in their defined order (e.g. forward before generate), unknown ones after, sorted."""
    known = [name for name in order if name in values]
    return known + sorted(values - set(known))


def _columns(checks: list[CheckResult]) -> list[tuple[str, str]]:
    levels = _canonical({result.level for result in checks}, LEVELS)
    scenarios = _canonical({result.scenario for result in checks}, SCENARIOS)
    return [(level, scenario) for level in levels for scenario in scenarios]


def grouped_sites(checks: list[CheckResult]) -> list[dict[str, Any]]:
    """Break sites across all checks, most widespread first: location, GB id, origin, models, checks."""
    sites: dict[tuple[str, str], dict[str, Any]] = {}
    for result in checks:
        records = result.breaks or ([result.first_break] if result.first_break else [])
        for record in records:
            site = sites.setdefault((record.where(), record.gb_type), {
                "where": record.where(), "gb_type": record.gb_type, "gb_id": record.gb_id or "",
                "origin": record.origin, "function": record.function, "models": set(), "checks": set(),
                "root_cause": False,
            })
            site["models"].add(result.model)
            site["checks"].add(result.check_id)
            site["root_cause"] |= record.root_cause
    ordered = sorted(sites.values(), key=lambda s: (-len(s["checks"]), s["where"], s["gb_type"]))
    for site in ordered:
        site["models"], site["checks"] = sorted(site["models"]), sorted(site["checks"])
    return ordered


def markdown(report: Report) -> str:
    """A GitHub step-summary friendly page: outcome matrix, then break sites grouped by location."""
    checks = report.sorted_checks()
    env = report.environment
    lines = ["# pytest_fullgraph report", "",
             f"torch {env.get('torch')} · transformers {env.get('transformers')} · backend "
             f"`{env.get('backend')}` · max_new_tokens {env.get('max_new_tokens')} · {env.get('device')} · "
             f"{len(checks)} checks", ""]
    counts: dict[str, int] = defaultdict(int)
    for result in checks:
        counts[result.outcome] += 1
    lines += [", ".join(f"**{counts[o]}** {o}" for o in OUTCOME_RANK if counts[o]) or "no checks", ""]
    if report.crashed_workers:
        lines += ["**Crashed workers:** " + "; ".join(f"{w.get('node')}: {w.get('error')}"
                                                       for w in report.crashed_workers), ""]
    columns = _columns(checks)
    if columns:
        by_key = {check_key(result): result for result in checks}
        lines.append("| model | " + " | ".join(f"{level}<br>{scenario}" for level, scenario in columns) + " |")
        lines.append("|---|" + "---|" * len(columns))
        for model in sorted({result.model for result in checks}):
            cells = [cell(by_key.get((model, scenario, level))) for level, scenario in columns]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append("")
    sites = grouped_sites(checks)
    if sites:
        lines += ["## Break sites", "", "| location | GB id | break | origin | root cause | models | checks |",
                  "|---|---|---|---|---|---|---|"]
        for site in sites:
            lines.append(f"| `{site['where']}` ({site['function']}) | {site['gb_id'] or '—'} | "
                         f"{_escape(site['gb_type'])} | {site['origin']} | {'yes' if site['root_cause'] else 'no'}"
                         f" | {', '.join(site['models'])} | {len(site['checks'])} |")
        lines.append("")
    problems = [result for result in checks if result.outcome in ("mismatch", "error", "nondeterministic")]
    if problems:
        lines += ["## Failures", ""]
        lines += [f"- `{result.check_id}` **{result.outcome}**: {_escape(result.message.splitlines()[0])}"
                  for result in problems]
        lines.append("")
    return "\n".join(lines)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def terminal_lines(report: Report, top_sites: int = 5) -> list[str]:
    """A compact matrix and the most widespread break sites, for pytest's terminal summary."""
    checks = report.sorted_checks()
    columns = _columns(checks)
    by_key = {check_key(result): result for result in checks}
    short = {"pass": "pass", "mismatch": "MISMATCH", "error": "ERROR", "nondeterministic": "NONDET"}
    headers = [f"{level}/{scenario}" for level, scenario in columns]
    models = sorted({result.model for result in checks})
    rows = [[model] + [_short_cell(by_key.get((model, s, lv)), short) for lv, s in columns] for model in models]
    widths = [max(len(str(row[i])) for row in [["model", *headers], *rows]) for i in range(len(headers) + 1)]
    lines = ["  ".join(text.ljust(widths[i]) for i, text in enumerate(row)).rstrip()
             for row in [["model", *headers], *rows]]
    sites = grouped_sites(checks)[:top_sites]
    if sites:
        lines.append("top break sites:")
        lines += [f"  {site['where']} {site['gb_id'] or '-'} {site['gb_type']} [{site['origin']}] "
                  f"in {len(site['checks'])} check(s): {', '.join(site['models'])}" for site in sites]
    for worker in report.crashed_workers:
        lines.append(f"crashed worker {worker.get('node')}: {worker.get('error')}")
    return lines


def _short_cell(result: CheckResult | None, short: dict[str, str]) -> str:
    if result is None:
        return "-"
    if result.outcome == "break":
        return f"break({max(break_count(result), 1)})"
    return short.get(result.outcome, result.outcome)
