"""The baseline gate: a report compared with a committed baseline, like PyTorch's graph-break CI check.

Each metric has a direction (a less severe outcome, fewer breaks and fewer break sites are better). A
regression fails the gate; a check of the baseline missing from the report is a regression too (a shard that
never ran must not pass), unless allowed; with the ratchet, an improvement also fails, so the baseline is
refreshed when things get better.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.results import MISMATCH, PASS, ROUNDING, CheckResult, outcome_rank


@dataclass
class GateResult:
    regressions: list[str] = field(default_factory=list)
    improvements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: with the ratchet on, improvements fail the gate as well
    ratchet: bool = False

    @property
    def failed(self) -> bool:
        return bool(self.regressions or (self.ratchet and self.improvements))

    @property
    def changed(self) -> bool:
        return bool(self.regressions or self.improvements or self.notes)

    def summary(self) -> str:
        verdict = "FAILED" if self.failed else "passed"
        ratchet = " (ratchet: improvements fail too)" if self.ratchet else ""
        return (f"{len(self.regressions)} regression(s), {len(self.improvements)} improvement(s), "
                f"{len(self.notes)} note(s): gate {verdict}{ratchet}")


def break_sites(result: CheckResult) -> set[tuple[str, str]]:
    return {(record.where(), record.gb_type) for record in result.break_records()}


def first_break_site(result: CheckResult) -> set[tuple[str, str]]:
    record = result.first_break
    return {(record.where(), record.gb_type)} if record else set()


def gated_outcome(result: CheckResult, divergences_only: bool) -> str:
    """The outcome the gate compares: with ``divergences_only`` a mismatch classified as a rounding flip
    counts as a pass (tokens differ only where the dtype cannot tell the two apart)."""
    if divergences_only and result.outcome == MISMATCH and result.mismatch and result.mismatch.kind == ROUNDING:
        return PASS
    return result.outcome


def diff(baseline: Report, current: Report, *, allow_missing: bool = False, ratchet: bool = False,
         divergences_only: bool = False) -> GateResult:
    """Compare ``current`` with ``baseline``, check by check."""
    gate = GateResult(ratchet=ratchet)
    if current.interrupted:
        gate.regressions.append("INCOMPLETE: the current run was interrupted; its report holds only the checks "
                                "that finished")
    missing = current.environment.get("shards_missing") or []
    if missing:
        line = f"INCOMPLETE: shard(s) {', '.join(map(str, missing))} of this run are missing from the merged report"
        (gate.notes if allow_missing else gate.regressions).append(line)
    before = {result.key: result for result in baseline.checks}
    after = {result.key: result for result in current.checks}
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old is None:
            assert new is not None
            gate.notes.append(f"NEW {new.check_id}: {new.outcome}")
        elif new is None:
            line = f"MISSING {old.check_id}: in the baseline ({old.outcome}) but not in this report"
            (gate.notes if allow_missing else gate.regressions).append(line)
        else:
            _compare(gate, old, new, divergences_only)
    return gate


def _compare(gate: GateResult, old: CheckResult, new: CheckResult, divergences_only: bool) -> None:
    name = new.check_id
    before, after = gated_outcome(old, divergences_only), gated_outcome(new, divergences_only)
    if outcome_rank(after) > outcome_rank(before):
        gate.regressions.append(f"REGRESSION {name}: {before} -> {after}: {new.headline()}")
    elif outcome_rank(after) < outcome_rank(before):
        gate.improvements.append(f"IMPROVED {name}: {before} -> {after}")
    # where one side recorded only its first break (``--fullgraph-breaks=first``, or ``auto``'s fast-tier
    # ``generate``), the first breaks are what both have: a new one is a regression, the counts say nothing
    complete = old.every_break_recorded and new.every_break_recorded
    sites, (added, gone) = ((break_sites, ("new break site", "break site gone")) if complete else
                            (first_break_site, ("new first break", "first break gone")))
    for where, gb_type in sorted(sites(new) - sites(old)):
        gate.regressions.append(f"REGRESSION {name}: {added} {where} ({gb_type})")
    for where, gb_type in sorted(sites(old) - sites(new)):
        gate.improvements.append(f"IMPROVED {name}: {gone} {where} ({gb_type})")
    if not complete:
        return
    old_count, new_count = len(old.break_records()), len(new.break_records())
    if new_count > old_count:
        gate.regressions.append(f"REGRESSION {name}: graph breaks {old_count} -> {new_count}")
    elif new_count < old_count:
        gate.improvements.append(f"IMPROVED {name}: graph breaks {old_count} -> {new_count}")


def refresh_command(baseline_path: str, current_path: str) -> str:
    """The exact command that makes the current report the new baseline."""
    return f"cp {shlex.quote(current_path)} {shlex.quote(baseline_path)}"
