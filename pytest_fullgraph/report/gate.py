"""The baseline gate: a report compared with a committed baseline, like PyTorch's graph-break CI check.

Each metric has a direction (a less severe outcome, fewer breaks and fewer break sites are better). A
regression fails the gate; a check of the baseline missing from the report is a regression too (a shard that
never ran must not pass), unless allowed; with the ratchet, an improvement also fails, so the baseline is
refreshed when things get better.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_fullgraph.core.results import MISMATCH, PASS, ROUNDING, CheckResult, outcome_rank
from pytest_fullgraph.report.schema import Report, ReportError


@dataclass
class GateResult:
    regressions: list[str] = field(default_factory=list)
    improvements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: with the ratchet on, improvements fail the gate as well
    ratchet: bool = False
    #: the settings the two reports differ in, when compared anyway (``settings_differences``)
    settings: list[str] = field(default_factory=list)
    #: checks of the baseline this report lacks (failures, or notes with ``allow_missing``)
    missing: int = 0

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

    def header(self) -> list[str]:
        """What a reader must know before the lines: the reports compared differ in their settings."""
        if not self.settings:
            return []
        return [f"COMPARED ANYWAY (--allow-settings), settings differ: {'; '.join(self.settings)}"]


def _release(version: Any) -> Any:
    """A release as far as the gate tells them apart: ``2.13.0+cpu`` and ``2.13.1`` are both torch 2.13."""
    return ".".join(str(version).split("+")[0].split(".")[:2]) if version else version


def _device(value: Any) -> Any:
    return "cpu" if value in (None, "none") else value  # reports before --fullgraph-device ran on the CPU


#: The settings a check's outcome depends on, each with how its two values are compared: reports that differ in one
#: are not two runs of the same checks. Strictness and the tier change no outcome; the break mode is compared check
#: by check (first breaks only where one side recorded only those).
SETTINGS: dict[str, Callable[[Any], Any]] = {
    "backend": str, "max_new_tokens": int, "torch": _release, "transformers": _release, "device": _device,
    "attn_implementation": lambda value: value, "recompiles": str,
}
#: How a message names a setting.
_SETTING_NAMES = {"torch": "torch release", "transformers": "transformers release",
                  "attn_implementation": "attention implementation", "recompiles": "--fullgraph-recompiles"}


def settings_differences(baseline: dict[str, Any], current: dict[str, Any],
                         sides: tuple[str, str] = ("in the baseline", "in this run")) -> list[str]:
    """``name: 'a' in the baseline, 'b' in this run`` (``sides`` names the two) for each setting of ``SETTINGS`` the
    two environments differ in; a setting one of them does not record (an older report) is not compared."""
    found = []
    for name, compared in SETTINGS.items():
        if name not in baseline or name not in current:
            continue
        before, after = baseline[name], current[name]
        if compared(before) != compared(after):
            found.append(f"{_SETTING_NAMES.get(name, name)}: {before!r} {sides[0]}, {after!r} {sides[1]}")
    return found


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
         divergences_only: bool = False, allow_settings: bool = False) -> GateResult:
    """Compare ``current`` with ``baseline``, check by check. Reports of different settings (``SETTINGS``) raise
    ``ReportError`` naming the first, unless ``allow_settings`` (a release diff compares torch releases on purpose),
    which puts each difference in the result's ``settings``."""
    gate = GateResult(ratchet=ratchet, settings=settings_differences(baseline.environment, current.environment))
    if gate.settings and not allow_settings:
        raise ReportError(f"the reports were made with different settings ({gate.settings[0]}): compare runs of one "
                          "configuration, or pass --allow-settings to compare them anyway")
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
            gate.missing += 1
            (gate.notes if allow_missing else gate.regressions).append(line)
        else:
            compare_checks(gate, old, new, divergences_only)
    return gate


def compare_checks(gate: GateResult, old: CheckResult, new: CheckResult, divergences_only: bool = False) -> None:
    """One check against its baseline: its regressions and improvements added to ``gate``'s lines."""
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


def refresh_advice(gate: GateResult, baseline_path: str, current_path: str) -> str:
    """What to do to accept the current report as the baseline: the command, unless the report lacks checks of the
    baseline (copying it would shrink the baseline) or was made with other settings; "" when nothing changed."""
    if not gate.changed:
        return ""
    if gate.missing:
        return (f"not suggesting this report as the baseline: it lacks {gate.missing} of the baseline's checks, which "
                "copying it would drop; run them (or every shard) and diff again")
    if gate.settings:
        return "not suggesting this report as the baseline: it was made with other settings"
    return f"to accept the current report as the baseline: {refresh_command(baseline_path, current_path)}"
