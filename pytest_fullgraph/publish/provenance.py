"""Where a set of committed reports' checks come from: how many commits ran them, and how many were rerun later and
swapped in, or re-judged from their records. Read from the reports themselves (each one's ``git_revision``, its
``replaced_checks`` and ``rejudged_checks``), so a page that quotes a report set says it without anyone counting.
No torch import.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_fullgraph.report.schema import Report

#: A commit named in a rerun's description ("rerun at f5703ca: ...", "(code of d42a90a: ...)").
_COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")
#: How many leading hex digits tell two commits apart here.
SHORT = 7


@dataclass
class Provenance:
    """The commits behind a report set's checks, and the checks that are not from the run that wrote their file."""

    checks: int = 0
    commits: set[str] = field(default_factory=set)
    rerun: int = 0
    #: reruns whose description names no commit
    rerun_unnamed: int = 0
    rejudged: int = 0

    def line(self) -> str:
        """One sentence for the pages that quote the set."""
        unnamed = f" ({self.rerun_unnamed} of them at a commit not recorded)" if self.rerun_unnamed else ""
        rejudged = (f"; {self.rejudged} re-judged from their records under a later rule "
                    "(`environment.rejudged_checks`)") if self.rejudged else ""
        return (f"Provenance: {self.checks} checks from {len(self.commits)} commit(s) (each report's run and the "
                f"reruns it records); {self.rerun} of them rerun later and swapped in by id"
                f"{unnamed} (`environment.replaced_checks`){rejudged}.")


def _commits_of(revision: Any) -> set[str]:
    values = revision if isinstance(revision, list) else [revision]
    return {str(value)[:SHORT] for value in values if value}


def provenance(reports: Iterable[Report]) -> Provenance:
    """The provenance of ``reports`` taken together (read before merging: merging folds their records)."""
    found = Provenance()
    for report in reports:
        environment = report.environment
        found.checks += len(report.checks)
        reruns = _records(environment.get("replaced_checks"))
        if sum(int(rerun.get("count", 0)) for rerun in reruns) < len(report.checks):  # some check is the run's own
            found.commits |= _commits_of(environment.get("git_revision"))
        for rerun in reruns:
            named = {commit[:SHORT] for commit in _COMMIT.findall(str(rerun.get("by", "")))}
            found.commits |= named
            found.rerun += int(rerun.get("count", 0))
            found.rerun_unnamed += 0 if named else int(rerun.get("count", 0))
        for rejudged in _records(environment.get("rejudged_checks")):
            found.rejudged += int(rejudged.get("count", 0))
    return found


def _records(value: Any) -> Sequence[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def draws_table(reports: Iterable[Report]) -> list[str]:
    """Per level drawn more than once (``environment.draws``, ``bench/draws.py``): its checks that pass, skip (decided
    before anything runs, so never drawn), fail every draw, vary (passing k of N draws), or failed once and were not
    drawn again; [] when no report holds draws."""
    reports = list(reports)
    drawn: dict[str, dict[str, list[str]]] = {}
    draws: dict[str, int] = {}
    for report in reports:
        for entry in _records(report.environment.get("draws")):
            level = str(entry.get("level"))
            draws[level] = max(draws.get(level, 0), int(entry.get("draws", 0)))
            drawn.setdefault(level, {}).update(entry.get("checks") or {})
    lines = []
    for level, outcomes in sorted(drawn.items()):
        checks = [result for report in reports for result in report.checks if result.level == level]
        passes = [sum(outcome == "pass" for outcome in outcomes[result.check_id]) for result in checks
                  if result.check_id in outcomes]
        varying = range(1, draws[level])
        header = ["level", "checks", "pass", "skip", f"fail all {draws[level]} draws",
                  *(f"varies ({k} of {draws[level]})" for k in varying), "failed, not drawn again"]
        undrawn = Counter(r.outcome if r.outcome in ("pass", "skip") else "failed" for r in checks
                          if r.check_id not in outcomes)
        row = [f"`{level}`", len(checks), undrawn["pass"], undrawn["skip"], passes.count(0),
               *(passes.count(k) for k in varying), undrawn["failed"]]
        lines += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|",
                  "| " + " | ".join(map(str, row)) + " |", ""]
    return lines[:-1]
