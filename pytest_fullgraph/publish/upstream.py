"""Findings drafted for the people who can fix them: a report's failing checks grouped by whose fault they are
(a model's code in transformers, transformers' generation or cache code, dynamo, inductor, export, a runtime), one
Markdown draft per group with a section per cause: title, versions, expected versus actual, the models affected and
the reproducer (``repro``'s script where one covers the cause). No torch import.

Failures of our own loop and of the user's code are not upstream's: the index lists them, with where to look. A
cause the table of known upstream issues (``known_issues``) has is linked to its issue or pull request, not
presented as new.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_fullgraph.core.results import BREAK, FAILING_OUTCOMES, MISMATCH, BreakRecord, CheckResult
from pytest_fullgraph.report.causes import error_key, fault_of, fault_of_origin, raised_at, shown_origin
from pytest_fullgraph.report.files import write_atomic
from pytest_fullgraph.report.known_issues import KnownIssue, known
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import fold, plural, shown_where

#: Upstream groups, in the order the index lists them: (file stem, who fixes it).
UPSTREAM = {
    "transformers-models": "transformers: a model's code (src/transformers/models)",
    "transformers-generation": "transformers: generation, cache or masking code",
    "dynamo": "PyTorch: dynamo (torch.compile's tracer)",
    "inductor": "PyTorch: inductor (torch.compile's compiler)",
    "export": "PyTorch: torch.export",
    "runtime": "a runtime: AOTInductor and the .pt2 loader (PyTorch), ExecuTorch (PyTorch), ONNX Runtime",
}
#: Not upstream's: fixed here or by the user.
NOT_UPSTREAM = {"loop": "pytest_fullgraph's own loop: an issue in this repository",
                "plugin": "pytest_fullgraph's own checks (their comparison or explanation crashed): an issue in this "
                          "repository",
                "user": "your own code (a conftest model or level)",
                "unknown": "not told: read the check's message"}
_EXPECTED = {
    "error": "the call runs as it does eagerly with the default cache",
    BREAK: "the code compiles with `fullgraph=True`: one graph, no break",
    MISMATCH: "compiled tokens equal eager tokens (`torch.equal`)",
    "nondeterministic": "eager generation gives the same tokens twice",
}


@dataclass(frozen=True)
class Finding:
    """One thing wrong in one check: a root-cause break (a check with three is three findings) or the check's
    error, mismatch or nondeterminism."""

    result: CheckResult
    record: BreakRecord | None = None


def findings(checks: list[CheckResult]) -> list[Finding]:
    """The failing checks' findings: each root-cause break of a break (each site once), else the check itself."""
    found: list[Finding] = []
    for result in checks:
        if result.outcome == BREAK and result.break_records():
            roots = [record for record in result.break_records() if record.root_cause] or result.break_records()[:1]
            unique = {(record.where(), record.gb_type): record for record in roots}
            found += [Finding(result, record) for record in unique.values()]
        elif result.outcome in (*FAILING_OUTCOMES, BREAK):
            found.append(Finding(result))
    return found


def upstream_group(finding: Finding, supportable: frozenset[str] = frozenset()) -> str:
    """A key of ``UPSTREAM`` or ``NOT_UPSTREAM``. A break is its origin's (``causes.fault_of_origin``), or dynamo's
    when PyTorch calls its GB id *supportable* (``supportable``: those ids), wherever the code that meets it lives;
    anything else is ``causes.fault_of`` its check, PyTorch's share split by where it broke."""
    record, result = finding.record, finding.result
    if record is not None:
        fault = ("dynamo" if record.gb_id in supportable
                 else fault_of_origin(shown_origin(record.origin, record.file)))
    else:
        fault = fault_of(result)
    if fault in ("model", "transformers"):
        return {"model": "transformers-models", "transformers": "transformers-generation"}[fault]
    if fault != "torch":
        return fault
    text = f"{result.message} {result.first_break.where() if result.first_break else ''}"
    if result.artifact or re.search(r"aoti|AOTInductor|load_generate|\.pt2", text):
        return "runtime"
    if result.level == "export" or "torch/export/" in text:
        return "export"
    return "inductor" if re.search(r"torch/_inductor/|InductorError|LoweringException", text) else "dynamo"


@dataclass
class Cause:
    """Findings of one cause: the first is the example."""

    title: str
    findings: list[Finding]

    @property
    def checks(self) -> list[CheckResult]:
        return list({finding.result.check_id: finding.result for finding in self.findings}.values())

    @property
    def models(self) -> list[str]:
        return sorted({finding.result.model for finding in self.findings})

    def known(self) -> dict[KnownIssue, list[str]]:
        """The known upstream issues its findings match (already reported: to be linked, not filed again), each
        with the ids of the checks it covers."""
        found: dict[KnownIssue, list[str]] = {}
        for finding in self.findings:
            for issue in known(finding.result, finding.record):
                found.setdefault(issue, []).append(finding.result.check_id)
        return {issue: list(dict.fromkeys(checks)) for issue, checks in found.items()}


def causes(found: list[Finding]) -> list[Cause]:
    """Findings grouped by one cause each: a break by its site and type, anything else by its message with numbers
    and quoted names aside; most checks first."""
    grouped: dict[str, Cause] = {}
    for finding in found:
        record = finding.record
        title = (f"{record.gb_type} at {shown_where(record.where())} ({record.function})" if record is not None
                 else _headline(finding.result))
        grouped.setdefault(error_key(title), Cause(title, [])).findings.append(finding)
    return sorted(grouped.values(), key=lambda cause: (-len(cause.checks), cause.title))


def _headline(result: CheckResult) -> str:
    """An error's type and place, without the blame sentence: ``IndexError at transformers/cache_utils.py:487``."""
    place, error_type = raised_at(result.message) or ("", "")
    if error_type:
        return f"{result.outcome}: {error_type} at {place}"
    return f"{result.outcome}: {result.headline().split(';')[0]}"


def _reproducers(directory: Path | None) -> dict[str, str]:
    """Check id to the text of the ``repro`` script that covers it, from ``repro``'s output directory."""
    if directory is None or not (directory / "repro-index.json").is_file():
        return {}
    index = json.loads((directory / "repro-index.json").read_text())
    scripts: dict[str, str] = {}
    for entry in index.get("reproducers", []):
        if entry.get("written") and (directory / entry["written"]).is_file():
            text = (directory / entry["written"]).read_text()
            scripts.update({check: text for check in entry.get("checks", [])})
    return scripts


def draft(group: str, found: list[Cause], environment: dict[str, Any], report_names: str,
          scripts: dict[str, str]) -> str:
    """One group's draft: a section per cause, each ready to paste into an issue."""
    lines = [f"# Findings for {UPSTREAM[group]}", "",
             f"torch {environment.get('torch')} · transformers {environment.get('transformers')} · python "
             f"{environment.get('python', '?')} · backend `{environment.get('backend')}` · device "
             f"{environment.get('device')}; from {report_names}", ""]
    for number, cause in enumerate(found, 1):
        example = cause.checks[0]
        levels = ", ".join(dict.fromkeys(result.level for result in cause.checks))
        already = cause.known()
        lines += [f"## {number}. {cause.title}{' (known upstream)' if already else ''}", "",
                  *(line for issue, covered in already.items() for line in (
                      f"**Known upstream** ({issue.status_text}, {len(covered)} of "
                      f"{plural(len(cause.checks), 'check')}): "
                      f"[{issue.title}]({issue.url}). Already reported: add to it what this run adds (models, "
                      "versions) rather than file it again.", "")),
                  f"**Models affected** ({plural(len(cause.models), 'model')}, {plural(len(cause.checks), 'check')}; "
                  f"levels {levels}): {fold(cause.models, shown=12)}", "",
                  f"**Expected:** {_EXPECTED.get(example.outcome, 'the call succeeds')}.", "",
                  f"**Actual** (`{example.check_id}`): {example.message.strip()}", ""]
        script = next((scripts[result.check_id] for result in cause.checks if result.check_id in scripts), None)
        if script is not None:
            lines += ["**Reproducer** (needs only torch and transformers; exits 1 while the bug is there):", "",
                      "```python", script.rstrip(), "```", ""]
        else:
            lines += ["**Reproducer:** `python -m pytest_fullgraph repro " + report_names +
                      f" {example.check_id} -o repros` writes one (or says why it cannot).", ""]
    return "\n".join(lines)


def write_drafts(report: Report, report_names: str, output: Path, repros: Path | None = None) -> list[Path]:
    """A draft per upstream group with failing checks, and ``README.md``, the index (what is not upstream's
    too); the paths written."""
    supportable = frozenset(gb_id for gb_id, found in report.break_help().items() if "supportable" in found.kinds)
    by_group: dict[str, list[Finding]] = {}
    for finding in findings(report.sorted_checks()):
        by_group.setdefault(upstream_group(finding, supportable), []).append(finding)
    scripts = _reproducers(repros)
    output.mkdir(parents=True, exist_ok=True)
    written, index = [], ["# Findings by whose fault they are", ""]
    for group, who in UPSTREAM.items():
        if group in by_group:
            found = causes(by_group[group])
            path = output / f"{group}.md"
            write_atomic(path, draft(group, found, report.environment, report_names, scripts))
            written.append(path)
            checks = {finding.result.check_id for finding in by_group[group]}
            known_causes = sum(1 for cause in found if cause.known())
            already = f" ({known_causes} known upstream)" if known_causes else ""
            index.append(f"- [{who}]({path.name}): {plural(len(found), 'cause')}{already}, "
                         f"{plural(len(checks), 'check')}")
    for group, who in NOT_UPSTREAM.items():
        if group in by_group:
            models = sorted({finding.result.model for finding in by_group[group]})
            index.append(f"- not drafted, {who}: {plural(len(by_group[group]), 'finding')} ({', '.join(models)})")
    if len(index) == 2:
        index.append("No failing check: nothing to draft.")
    write_atomic(output / "README.md", "\n".join([*index, ""]))
    return [*written, output / "README.md"]
