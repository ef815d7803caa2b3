"""The report's data model and its JSON form: pure data, no files, no torch, no git.

Everything the run knows that needs torch (versions, PyTorch's help for each GB id) is captured by the run and
handed in (``core.environment``, ``core.break_help``), so any machine reads, merges and
renders a report with what it holds. Reading and writing files is ``report.files``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_fullgraph.core.break_help import BreakHelp
from pytest_fullgraph.core.results import OUTCOMES, READABLE_SCHEMA_VERSIONS, SCHEMA, SCHEMA_VERSION, CheckResult
from pytest_fullgraph.report.validate import problem, record_problem

JSON_NAME = "fullgraph-report.json"
MARKDOWN_NAME = "fullgraph-report.md"


class ReportError(Exception):
    """A report file that cannot be used; the message names the file and what is wrong."""


@dataclass
class Report:
    environment: dict[str, Any]
    checks: list[CheckResult] = field(default_factory=list)
    #: one entry per xdist worker that died: ``node``, ``error`` and, when known, the ``test`` it was running
    crashed_workers: list[dict[str, str]] = field(default_factory=list)
    #: how the run ended: ``exitstatus`` (pytest's exit code), ``interrupted`` (Ctrl-C, SIGTERM, or a shard
    #: stopped early) and, when a signal stopped it, ``signal`` ("SIGTERM"); an interrupted report holds only the
    #: checks that finished
    run: dict[str, Any] = field(default_factory=lambda: {"exitstatus": None, "interrupted": False})
    #: PyTorch's help by GB id as the run's torch gave it (``break_help`` in the JSON, read back): the run fills it
    #: when it builds the report, so collate, merge and render need no torch and show the help of the release
    #: that ran, not of the one that reads
    stored_help: dict[str, BreakHelp] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return bool(self.run.get("interrupted"))

    def interruption(self) -> str:
        """How an interrupted run was stopped, for a report's warning: the signal, when one did, and the exit status."""
        stopped_by = f"{self.run['signal']}, " if self.run.get("signal") else ""
        return f"{stopped_by}exit status {self.run.get('exitstatus')}"

    def sorted_checks(self) -> list[CheckResult]:
        return sorted(self.checks, key=lambda result: result.key)

    def gb_ids(self) -> list[str]:
        """The GB ids of the checks' breaks (and of the breaks that caused them), sorted: what the run asks its
        torch to explain."""
        records = [record for result in self.checks for record in result.break_records()]
        return sorted({gb_id for record in records
                       for gb_id in (record.gb_id, record.cause.gb_id if record.cause else None) if gb_id})

    def break_help(self) -> dict[str, BreakHelp]:
        """The stored help for each GB id the checks' breaks have, by id; help for ids no check has any more (a
        report cut into shards) is left out, and an id the run's torch did not know has none."""
        return {gb_id: self.stored_help[gb_id] for gb_id in self.gb_ids() if gb_id in self.stored_help}

    def to_dict(self) -> dict[str, Any]:
        # the derived sections' modules load when a report is written: reading one (``from_dict``) needs neither
        from pytest_fullgraph.report.audit import model_summaries
        from pytest_fullgraph.report.known_issues import report_section

        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "environment": self.environment,
            "run": self.run,
            "crashed_workers": sorted(self.crashed_workers, key=lambda w: (w.get("node", ""), w.get("test", ""))),
            "checks": [result.to_dict() for result in self.sorted_checks()],
            # derived from the checks for readers of the JSON; recomputed, never read back
            "models": [summary.to_dict() for summary in model_summaries(self.checks)],
            # the run's torch's words, read back by collate, merge and render (which need no torch)
            "break_help": {gb_id: found.to_dict() for gb_id, found in self.break_help().items()},
            # derived from the checks and this package's table of known upstream issues; recomputed, never read back
            "known_issues": report_section(self.checks),
        }

    @classmethod
    def from_dict(cls, data: Any, source: str) -> Report:
        """The report ``data`` holds (parsed JSON); ``source`` names it in a ``ReportError`` for data that is not
        a report of a version this package reads."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ReportError(f"{source}: not a pytest_fullgraph report (expected \"schema\": \"{SCHEMA}\")")
        version = data.get("version")
        if isinstance(version, bool) or version not in READABLE_SCHEMA_VERSIONS:
            readable = f"{READABLE_SCHEMA_VERSIONS[0]} to {READABLE_SCHEMA_VERSIONS[-1]}"
            if isinstance(version, int) and version > SCHEMA_VERSION:
                raise ReportError(f"{source}: written by a newer pytest_fullgraph (report schema version {version}; "
                                  f"this one reads {readable}): upgrade pytest_fullgraph to read it")
            raise ReportError(f"{source}: report schema version {version!r} is not supported; this pytest_fullgraph "
                              f"reads versions {readable}")
        found = _problem(data)
        if found:
            raise ReportError(f"{source}: malformed report: {found}")
        try:
            checks = [CheckResult.from_dict(item) for item in data["checks"]]
            run = dict(data.get("run") or {"exitstatus": None, "interrupted": False})
            stored = {str(gb_id): BreakHelp.from_dict(entry) for gb_id, entry in (data.get("break_help") or {}).items()}
            return cls(dict(data["environment"]), checks, [dict(w) for w in data.get("crashed_workers", [])], run,
                       stored)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ReportError(f"{source}: malformed report ({type(error).__name__}: {error})") from None


#: The top-level fields a report must have, and those it may have, with their shapes.
_REQUIRED = {"environment": dict[str, Any], "checks": list[Any]}
_OPTIONAL = {"run": dict[str, Any] | None, "crashed_workers": list[dict[str, str]],
             "break_help": dict[str, dict[str, Any]] | None}


def _problem(data: dict[str, Any]) -> str | None:
    """The first field of a report's JSON that is missing or of the wrong shape, as ``checks[3].outcome:
    missing`` (naming the check when its identity is readable), or None."""
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        return f"{missing[0]}: missing"
    fields = {**_REQUIRED, **_OPTIONAL}
    found = next((each for name, hint in fields.items() if name in data
                  and (each := problem(data[name], hint, name))), None)
    if found:
        return found
    for index, item in enumerate(data["checks"]):
        found = record_problem(item, CheckResult, f"checks[{index}]") or _outcome_problem(item, index)
        if found:
            identity = [item.get(key) for key in ("model", "scenario", "level")] if isinstance(item, dict) else []
            named = [each for each in identity if isinstance(each, str)]
            return f"{found} (check {'-'.join(named)})" if identity and len(named) == len(identity) else found
    return None


def _outcome_problem(item: dict[str, Any], index: int) -> str | None:
    """An outcome this package does not know: the gate would read it as the worst, so it is a malformed report."""
    if item["outcome"] in OUTCOMES:
        return None
    return f"checks[{index}].outcome: {item['outcome']!r} is not an outcome (one of {', '.join(OUTCOMES)})"
