"""The CI matrix's last job: every shard's report, grouped by configuration, merged, gated and summarised.

A group is one tier on one torch release (``fast-torch2.13.0``): its shards merge into one report, which is
compared with ``<baselines>/<group>.json`` when that file exists. Groups of one tier on different torch releases
are diffed against each other, so the summary says which release changed which verdict. No torch import.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_fullgraph.report.files import load, write
from pytest_fullgraph.report.gate import diff, refresh_command
from pytest_fullgraph.report.merge import merge
from pytest_fullgraph.report.render import markdown
from pytest_fullgraph.report.schema import JSON_NAME, Report, ReportError

#: A path the shell left as typed because its glob matched no file.
_PATTERN = re.compile(r"[*?[]")


def group_name(report: Report) -> str:
    """``fast-torch2.13.0`` / ``slow-torch2.15.0``: the tier and the torch release a report ran; a run on a
    device other than the CPU says which (``slow-cuda-torch2.15.0``), since its verdicts are its own."""
    tier = "slow" if report.environment.get("run_slow") else "fast"
    device = str(report.environment.get("device") or "cpu").split(":")[0]
    if device != "cpu":
        tier = f"{tier}-{device}"
    if report.environment.get("attn_implementation"):
        tier = f"{tier}-{report.environment['attn_implementation']}"
    return f"{tier}-torch{str(report.environment.get('torch')).split('+')[0]}"  # 2.13.0+cpu is 2.13.0


@dataclass
class Collated:
    """What ``collate`` found: the summary to publish, and whether the gate failed."""

    summary: list[str] = field(default_factory=list)
    failed: bool = False
    merged: dict[str, Path] = field(default_factory=dict)
    #: the reports and baselines that could not be read, each as one line naming the file: bad input, which the
    #: command line exits 2 on rather than 1 (a broken file is not a regression)
    unreadable: list[str] = field(default_factory=list)

    def fail(self, line: str) -> None:
        """Something that must fail the run, said in the summary."""
        self.failed = True
        self.summary.append(line)

    def cannot_read(self, what: str, error: ReportError) -> None:
        self.unreadable.append(str(error))
        self.fail(f"**Unreadable {what}:** {error}")


def collate(reports: Iterable[Path], output: Path, baselines: Path | None = None,
            expect: Iterable[str] = ()) -> Collated:
    """Merge ``reports`` (``fullgraph-report.json`` files) per group into ``output/<group>/``, gate each against
    its baseline, and diff the torch releases of each tier. The run fails on a report or baseline that cannot be
    read (its shard's checks would be missing; ``unreadable`` names them), a group of ``expect`` with no report, a
    group with shards missing, and a regression against a baseline."""
    result = Collated()
    groups: dict[str, list[tuple[str, Report]]] = {}
    for path in sorted(reports):
        if not path.exists() and _PATTERN.search(str(path)):
            continue  # the shell's glob matched nothing (`reports/*/...` with no shard uploaded): no report
        try:
            report = load(path)
        except ReportError as error:
            result.cannot_read("report", error)
            continue
        groups.setdefault(group_name(report), []).append((str(path), report))
    if not groups and not result.unreadable:
        result.fail("**No reports:** no shard uploaded a fullgraph-report.json")
    # an unreadable report may be the expected group's: which group a file is, only its contents say
    unknown = f", or its reports are among the {len(result.unreadable)} unreadable" if result.unreadable else ""
    for name in sorted(set(expect) - set(groups)):
        result.fail(f"**Missing:** no report of {name} arrived (every shard of it failed to upload{unknown})")
    merged_reports: dict[str, Report] = {}
    for name, shards in sorted(groups.items()):
        try:
            merged = merge(shards)
        except ReportError as error:
            result.fail(f"**{name}: cannot merge:** {error}")
            continue
        merged_reports[name] = merged
        missing = merged.environment.get("shards_missing") or []
        if missing:
            result.fail(f"**{name}: shard(s) {', '.join(missing)} missing**")
        gate_lines, baseline = _gate(name, merged, output / name / JSON_NAME, baselines, result)
        # the HTML page of a gated group shows what changed against its baseline
        write(merged, output / name, baseline=baseline,
              baseline_name=str(baselines / f"{name}.json") if baselines else "the baseline")
        result.merged[name] = output / name / JSON_NAME
        result.summary += [f"## {name} ({len(shards)} report(s))", "", *gate_lines, markdown(merged, baseline)]
    result.summary += _release_changes(merged_reports)
    return result


def _gate(name: str, merged: Report, merged_path: Path, baselines: Path | None,
          result: Collated) -> tuple[list[str], Report | None]:
    """The summary's lines on the group's gate, and the baseline it was gated against (None when there is none)."""
    if baselines is None:
        return [], None
    baseline_path = baselines / f"{name}.json"
    if not baseline_path.is_file():
        return [f"No baseline for {name}: to start gating it, commit this run's merged report: "
                f"`{refresh_command(str(baseline_path), str(merged_path))}`", ""], None
    try:
        baseline = load(baseline_path)
    except ReportError as error:
        result.cannot_read("baseline", error)
        return ["", f"{name} is not gated: its baseline cannot be read", ""], None
    try:
        gate = diff(baseline, merged)
    except ReportError as error:  # a baseline of other settings gates nothing
        result.cannot_read("baseline", ReportError(f"{baseline_path}: {error}"))
        return ["", f"{name} is not gated: {error}", ""], None
    result.failed |= gate.failed
    # the verdict leads; the group's page lists each change under "Changes since the baseline"
    lines = [f"**Gate against {baseline_path}: {gate.summary()}**", ""]
    if gate.changed:
        lines += [f"To accept this run as the baseline: `{refresh_command(str(baseline_path), str(merged_path))}`", ""]
    return lines, baseline


def _release_key(name: str) -> tuple[str, tuple[int, ...]]:
    tier, _, release = name.partition("-torch")
    numbers = tuple(int(part) for part in release.split("+")[0].split(".") if part.isdigit())
    return tier, numbers


def _release_changes(merged: dict[str, Report]) -> list[str]:
    """Per tier, each torch release against the one before it: which verdicts changed (informational)."""
    lines: list[str] = []
    names = sorted(merged, key=_release_key)
    for older, newer in itertools.pairwise(names):
        if _release_key(older)[0] != _release_key(newer)[0]:
            continue
        gate = diff(merged[older], merged[newer], allow_missing=True, allow_settings=True)
        changes = [*gate.regressions, *gate.improvements]
        lines += [f"## What changed from {older} to {newer}", ""]
        lines += [f"- {line}" for line in changes] or ["- no verdict changed"]
        lines.append("")
    return lines
