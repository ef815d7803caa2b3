"""Whose fault decides the verdict: a break or crash in pytest_fullgraph's own code fails, whatever
``--fullgraph-strict`` says; the model's, transformers' or torch's break stays an xfail."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import pytest_fullgraph
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.plugin.verdict import apply_verdict, our_fault
from tests.conftest import PLANTED_BREAK_LINE, checks_by_id, read_report
from tests.factories import a_break, a_check

MODEL_BREAK = a_break("transformers/models/llama/modeling_llama.py", origin="model")
LOOP_BREAK = a_break("pytest_fullgraph/loop/decode.py", origin="loop")


@pytest.mark.parametrize(("result", "ours"), [
    (a_check("llama", "break", breaks=(MODEL_BREAK,)), None),
    (a_check("llama", "break", breaks=(a_break("torch/nn/functional.py", origin="torch"),)), None),
    (a_check("llama", "break", breaks=(LOOP_BREAK,)),
     "pytest_fullgraph's loop breaks at pytest_fullgraph/loop/decode.py:7"),
    # the model breaks first, the loop later: fixing the model would leave our break
    (a_check("llama", "break", breaks=(MODEL_BREAK, LOOP_BREAK)), "pytest_fullgraph's loop breaks at"),
    # a consequence in our frame of a root cause elsewhere is not ours
    (a_check("llama", "break", breaks=(MODEL_BREAK, a_break("pytest_fullgraph/loop/decode.py", origin="loop",
                                                            root_cause=False))), None),
    (a_check("llama", "break", "expected one graph, got 2 (recompiles: L['n'] == 3)"), "pytest_fullgraph's loop"),
    (a_check("llama", "error", "compiled generation failed at pytest_fullgraph/check/compare.py:40: KeyError: 3"),
     "pytest_fullgraph's checks"),
    (a_check("llama", "error", "compiled generation failed at transformers/cache_utils.py:40: IndexError: 3"), None),
    (a_check("llama", "mismatch", "compiled tokens differ"), None),
])
def test_whose_fault_a_failure_is(result: CheckResult, ours: str | None) -> None:
    found = our_fault(result)
    assert found == ours if ours is None else (found is not None and found.startswith(ours))


@pytest.mark.parametrize("strict", [False, True])
def test_a_break_of_ours_fails_strict_or_not_and_the_models_is_an_xfail_unless_strict(strict: bool) -> None:
    with pytest.raises(pytest.fail.Exception, match=re.escape("break in pytest_fullgraph's own code, not in what it "
                                                              "checks: pytest_fullgraph's loop breaks at "
                                                              "pytest_fullgraph/loop/decode.py:7")):
        apply_verdict(a_check("llama", "break", "planted", breaks=(LOOP_BREAK,)), strict=strict)
    expected = pytest.fail.Exception if strict else pytest.xfail.Exception
    with pytest.raises(expected, match="graph break: planted" if not strict else "break: planted"):
        apply_verdict(a_check("llama", "break", "planted", breaks=(MODEL_BREAK,)), strict=strict)


#: A data-dependent branch planted in the loop's scores step, the same statement as the toy model's planted break.
PLANTED_IN_THE_LOOP = "    if logits.sum() > 0:  # planted in the loop\n        logits = logits + 0\n"


#: The verdict is the first break's: the diagnostic pass that records every break adds a second compile, not a verdict.
FIRST_BREAK = ("--fullgraph-breaks=first",)


def planted_copy(root: Path) -> int:
    """A copy of the installed package (its suite beside it, as a wheel ships it) with a data-dependent branch in
    the loop's ``last_scores``; the planted line's number."""
    package = root / "pytest_fullgraph"
    shutil.copytree(Path(pytest_fullgraph.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(pytest_fullgraph.__file__).parents[1] / "suites", package / "suite",
                    ignore=shutil.ignore_patterns("__pycache__"))
    steps = package / "loop" / "steps.py"
    lines = steps.read_text().splitlines(keepends=True)
    body = next(index for index, line in enumerate(lines) if line.startswith("def last_scores")) + 2
    steps.write_text("".join([*lines[:body], PLANTED_IN_THE_LOOP, *lines[body:]]))
    return body + 1


def test_a_data_dependent_op_planted_in_the_loop_fails_the_run_naming_our_site(
        toy_project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = planted_copy(toy_project.path / "planted")
    monkeypatch.setenv("PYTHONPATH", str(toy_project.path / "planted"))
    result = toy_project.runpytest_subprocess("--fullgraph-models=toy", "--fullgraph-backend=eager", "-k",
                                              "greedy and decode", "-p", "no:cacheprovider", *FIRST_BREAK,
                                              f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"*break in pytest_fullgraph's own code, not in what it checks: pytest_fullgraph's "
                                 f"loop breaks at pytest_fullgraph/loop/steps.py:{line} (Data-dependent branching)*"])
    first = checks_by_id(read_report(tmp_path))["toy-greedy-decode"]["first_break"]
    assert (first["file"], first["line"], first["origin"]) == ("pytest_fullgraph/loop/steps.py", line, "loop")


def test_the_same_op_planted_in_a_models_forward_stays_an_xfail(toy_project: pytest.Pytester,
                                                                 tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_break", "--fullgraph-backend=eager", "-k",
                                   "greedy and decode", "-p", "no:cacheprovider", *FIRST_BREAK,
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(xfailed=1)
    assert result.ret == 0
    written = read_report(tmp_path)
    first = checks_by_id(written)["toy_break-greedy-decode"]["first_break"]
    assert (first["file"], first["line"], first["origin"]) == ("conftest.py", PLANTED_BREAK_LINE, "user")
    # the run records each scenario's feature, which the report's feature views label scenarios by
    assert written["environment"]["scenario_features"]["padded"] == "padding"
