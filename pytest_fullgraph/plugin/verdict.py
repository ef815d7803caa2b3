"""A check's result as a pytest outcome: whose fault a failure is decides between a failure and an xfail."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_fullgraph.core.results import BREAK, ERROR, PASS, SKIP, CheckResult
from pytest_fullgraph.report.causes import FAULTS, OUR_FAULTS, fault_of, fault_of_origin
from pytest_fullgraph.report.known_issues import known

if TYPE_CHECKING:
    from pytest_fullgraph.plugin.baseline import Baseline


def apply_verdict(result: CheckResult, *, strict: bool, baseline: Baseline | None = None) -> None:
    """pass → pass; skip (a known limitation, a dtype without kernels) → skip; break → xfail (fail when strict)
    where the break is the model's, transformers', torch's or the user's; a break or error in pytest_fullgraph's
    own code (its loop, its checks) → fail, strict or not; mismatch, error, nondeterministic → fail. A failure the
    table of known upstream issues has gets a line ``known: URL (status): title`` under its message.

    With a ``baseline`` (not being rewritten): worse than the baseline's verdict → fail, whatever the outcome; a
    failure the baseline has → xfail (a break still fails when strict); our own faults fail all the same."""
    __tracebackhide__ = True
    judged = baseline.judge(result) if baseline is not None and not baseline.update else None
    if judged is not None and judged.before is not None and judged.worse:
        assert baseline is not None
        worse = "; ".join(line.split(": ", 1)[1] for line in judged.worse)
        pytest.fail(f"{result.outcome}: worse than the baseline: was {judged.before.outcome} in {baseline.shown} "
                    f"({worse})\n{result.message}", pytrace=False)
    if result.outcome == PASS:
        return
    if result.outcome == SKIP:
        pytest.skip(f"{result.model}: {result.message}")
    notes = "".join(f"\n{issue.label()}: {issue.title}" for issue in known(result))
    ours = our_fault(result)
    if ours is not None:
        pytest.fail(f"{result.outcome} in pytest_fullgraph's own code, not in what it checks: {ours}\n"
                    f"{result.message}{notes}", pytrace=False)
    if judged is not None and judged.before is not None and not (strict and result.outcome == BREAK):
        assert baseline is not None
        pytest.xfail(f"{result.outcome} as in the baseline {baseline.shown}: {result.message}{notes}")
    if not strict and result.outcome == BREAK:
        pytest.xfail(f"graph break: {result.message}{notes}")
    pytest.fail(f"{result.outcome}: {result.message}{notes}", pytrace=False)


def our_fault(result: CheckResult) -> str | None:
    """Where a break or error of a check is pytest_fullgraph's own fault, in words, or None when it is not.

    A break is ours when any root-cause break recorded is in our code (the model may break first: our loop's
    break would still stop it once the model is fixed); an error, when its fault (``causes.fault_of``) is ours.
    """
    if result.outcome == BREAK:
        for record in result.break_records():
            if record.root_cause and fault_of_origin(record.origin) in OUR_FAULTS:
                return f"{FAULTS[fault_of_origin(record.origin)]} breaks at {record.where()} ({record.gb_type})"
    if result.outcome in (BREAK, ERROR) and fault_of(result) in OUR_FAULTS:
        return FAULTS[fault_of(result)]
    return None
