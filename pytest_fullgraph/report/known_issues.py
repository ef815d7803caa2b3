"""Findings already reported upstream: a table of signatures, each naming the issue or pull request that covers
it, so a repeated run tells a new failure from a known one. The reports (JSON, Markdown, HTML, the terminal
summary, ``report upstream``'s drafts and the findings page) say "known: URL" beside a matching failure. No torch
import.

To add an entry: a ``KnownIssue`` in ``KNOWN_ISSUES`` with the address, a short title, the status and the fewest
signature fields that single the failure out, and a line in ``RECORDED`` of ``tests/report/test_known_issues.py``
(the models and the words of the failure it covers), which checks that the entry matches records of the reports
under ``bench/reports/`` and only those.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from pytest_fullgraph.core.results import BREAK, FAILING_OUTCOMES, BreakRecord, CheckResult
from pytest_fullgraph.report.causes import raised_at

#: What an entry's ``status`` may say of its issue or pull request; "unknown": the tracker's state was not read when
#: the entry went in (the renderings say "status unknown").
STATUSES = ("open", "merged", "closed", "unknown")
#: The signature's fields, as ``KnownIssue`` names them; each is a glob (``fnmatch``, case-sensitive), "" for any.
SIGNATURE = ("site", "gb_id", "error", "message", "model", "level")


@dataclass(frozen=True, kw_only=True)
class KnownIssue:
    """An upstream issue or pull request and the signature of the failures it covers.

    A failing check matches when its model and level match and one of its failures (the error its message names,
    each break and the break inside it) matches every field given: ``site``, the failure's ``file:line`` as the
    report records it (transformers' and torch's files from the package on, ``transformers/cache_utils.py:2156``;
    glob the line, it moves between releases; other files may be absolute in older reports: start their glob with
    ``*``); ``gb_id`` of a break; ``error``, the exception's type (its last
    dotted part will do: ``KeyError``, ``Unsupported``); ``message``, the error's or break's message.
    """

    url: str
    title: str
    status: str
    site: str = ""
    gb_id: str = ""
    error: str = ""
    message: str = ""
    model: str = ""
    level: str = ""

    def signature(self) -> dict[str, str]:
        """The fields given, by name."""
        return {name: value for name in SIGNATURE if (value := getattr(self, name))}

    @property
    def status_text(self) -> str:
        """The status as a rendering shows it beside the address: ``open``, ``status unknown``."""
        return "status unknown" if self.status == "unknown" else self.status

    def label(self) -> str:
        """``known: URL (open)``, as every rendering says it."""
        return f"known: {self.url} ({self.status_text})"

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "title": self.title, "status": self.status, "signature": self.signature()}


#: The table, in the order the reports list it.
KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(url="https://github.com/huggingface/transformers/pull/46384",
               title="deepseek_v4's static cache has no `heavily_compressed_attention` layer (DSv4 static cache)",
               status="open", site="transformers/cache_utils.py:*", error="KeyError",
               message="*KeyError: 'heavily_compressed_attention'*"),
    # the refusal's note (``hf_export.CheckedRunner``) names the counter; ExecuTorch's runner refusals recorded before
    # the note show only the spec given, not the exported one, so they are left unmatched
    KnownIssue(url="https://github.com/huggingface/transformers/issues/44609",
               title="sliding-window cache layers count steps in a Python int (`cumulative_length_int`): an exported "
                     "decode program refuses the next step, a compiled forward recompiles",
               status="unknown", site="transformers/exporters/runners/runner_*.py:*",
               message="*SlidingWindow*.cumulative_length_int * at export, * now*"),
)


@dataclass(frozen=True)
class Failure:
    """One thing a check's signature is matched against: where it happened, its GB id, type and message."""

    where: str
    gb_id: str
    error: str
    message: str


def _of_break(record: BreakRecord) -> list[Failure]:
    inside = _of_break(record.cause) if record.cause is not None else []
    return [Failure(record.where() if record.file else "", record.gb_id or "", record.exception, record.message),
            *inside]


def failures(result: CheckResult, record: BreakRecord | None = None) -> list[Failure]:
    """What a failing check is matched on: ``record`` (and the break inside it) when given, else the error its
    message names and every break it recorded."""
    if record is not None:
        return _of_break(record)
    where, error = raised_at(result.message) or ("", "")
    return [Failure(where, "", error, result.message),
            *(failure for found in result.break_records() for failure in _of_break(found))]


def _error_matches(pattern: str, error: str) -> bool:
    return fnmatchcase(error, pattern) or fnmatchcase(error.rpartition(".")[2], pattern)


def _matches(issue: KnownIssue, failure: Failure) -> bool:
    return all((not issue.site or fnmatchcase(failure.where, issue.site),
                not issue.gb_id or fnmatchcase(failure.gb_id, issue.gb_id),
                not issue.error or _error_matches(issue.error, failure.error),
                not issue.message or fnmatchcase(failure.message, issue.message)))


def known(result: CheckResult, record: BreakRecord | None = None,
          table: Iterable[KnownIssue] | None = None) -> list[KnownIssue]:
    """The entries of ``table`` (``KNOWN_ISSUES`` unless given) a failing check matches (``record``: only that
    break of it), in the table's order; none for a check that passed or skipped."""
    if result.outcome not in (*FAILING_OUTCOMES, BREAK):
        return []
    found = failures(result, record)
    return [issue for issue in (KNOWN_ISSUES if table is None else table)
            if fnmatchcase(result.model, issue.model or "*") and fnmatchcase(result.level, issue.level or "*")
            and any(_matches(issue, failure) for failure in found)]


def known_of(checks: Iterable[CheckResult], table: Iterable[KnownIssue] | None = None) -> list[KnownIssue]:
    """The entries any of ``checks`` matches, each once, in the table's order."""
    entries = tuple(KNOWN_ISSUES if table is None else table)
    matched = {issue for result in checks for issue in known(result, table=entries)}
    return [issue for issue in entries if issue in matched]


def by_issue(checks: Iterable[CheckResult],
             table: Iterable[KnownIssue] | None = None) -> list[tuple[KnownIssue, list[CheckResult]]]:
    """Each entry the checks match, with the checks that match it (in the checks' order), in the table's order."""
    entries = tuple(KNOWN_ISSUES if table is None else table)
    matched: dict[KnownIssue, list[CheckResult]] = {issue: [] for issue in entries}
    for result in checks:
        for issue in known(result, table=entries):
            matched[issue].append(result)
    return [(issue, found) for issue, found in matched.items() if found]


def report_section(checks: Iterable[CheckResult]) -> list[dict[str, Any]]:
    """The report JSON's ``known_issues``: each entry the checks match, with the ids of those checks."""
    return [{**issue.to_dict(), "checks": sorted(result.check_id for result in found)}
            for issue, found in by_issue(checks)]


def labels(issues: Iterable[KnownIssue]) -> str:
    """``known: URL (open); known: URL (merged)`` for a table cell or a line; "" for none."""
    return "; ".join(issue.label() for issue in issues)
