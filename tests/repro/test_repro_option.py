"""``--fullgraph-repro=DIR``: a run's failing checks get their reproducers when it ends, as ``repro`` writes them,
without costing the run its verdicts or its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.repro import command
from pytest_fullgraph.repro.command import INDEX_NAME, reproduce_run


@pytest.mark.breadth
def test_a_run_writes_a_verified_script_per_failing_cause_and_says_why_not_for_the_rest(
        toy_project: pytest.Pytester, tmp_path: Path) -> None:
    """cpmant's static cache is written past its end (a script, run in a fresh process before it is kept); a toy
    model that does not build has no config to inline (the reason)."""
    from tests.conftest import checks_by_id, read_report

    repros, reports = tmp_path / "repros", tmp_path / "report"
    result = toy_project.runpytest("--fullgraph-models=cpmant,toy_broken", "-k", "greedy-forward", "-p",
                                   "no:cacheprovider", f"--fullgraph-repro={repros}", f"--fullgraph-report={reports}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("xfailed", 0) == 2, outcomes  # the verdicts stand
    assert checks_by_id(read_report(reports))["cpmant-greedy-forward"]["outcome"] == "error"
    index = json.loads((repros / INDEX_NAME).read_text())
    by_check = {check: entry for entry in index["reproducers"] for check in entry["checks"]}
    written = by_check["cpmant-greedy-forward-float32"]
    assert written["exit_status"] == 1 and "IndexError" in written["printed"]
    assert (repros / written["written"]).is_file()
    assert "failed to build" in by_check["toy_broken-greedy-forward-float32"]["reason"]
    result.stdout.fnmatch_lines(["fullgraph repro: not written  toy_broken-greedy-forward-float32*",
                                 "fullgraph repro: written      cpmant-greedy-forward-float32.py*exit 1*",
                                 f"fullgraph reproducers: 1 reproducer(s) written to {repros}, 1 cause(s) without "
                                 "one*"])


#: A project's own model: a subclass transformers does not export, with a data-dependent branch (line 9).
BRANCHY_CONFTEST = """\
import torch
from transformers import LlamaForCausalLM
from pytest_fullgraph import build_tiny, register_model


class BranchyLlama(LlamaForCausalLM):
    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        if out.logits.sum() > 0:  # a data-dependent branch: a graph break
            out.logits = out.logits * 1
        return out


register_model("branchy", lambda: build_tiny("llama", model_class=BranchyLlama))
"""


@pytest.mark.breadth  # a run, a reduction and a fresh process (about a minute): the workflow's plugin job runs it
def test_a_conftest_models_own_class_is_imported_from_its_file_by_its_script(pytester: pytest.Pytester,
                                                                            tmp_path: Path) -> None:
    """The report records the file of a class transformers does not export; the script imports the class from it,
    its header says so, and in a fresh process (pytest_fullgraph not installed for it) it meets the break."""
    from tests.conftest import checks_by_id, read_report

    conftest = pytester.makeconftest(BRANCHY_CONFTEST).resolve()
    repros, reports = tmp_path / "repros", tmp_path / "report"
    result = pytester.runpytest("--fullgraph-models=branchy", "-k", "greedy-forward", "-p", "no:cacheprovider",
                                f"--fullgraph-repro={repros}", f"--fullgraph-report={reports}")
    check = checks_by_id(read_report(reports))["branchy-greedy-forward"]
    assert (check["outcome"], check["model_class"], check["model_file"]) == ("break", "BranchyLlama", str(conftest))
    assert check["first_break"]["file"] == "conftest.py" and check["first_break"]["line"] == 9
    [entry] = json.loads((repros / INDEX_NAME).read_text())["reproducers"]
    assert entry["written"] == "branchy-greedy-forward-float32.py", entry["reason"]
    result.stdout.fnmatch_lines(["fullgraph repro: written      branchy-greedy-forward-float32.py*exit 1*"])
    script = repros / entry["written"]
    assert f"needs torch, transformers and the class BranchyLlama from {conftest}" in " ".join(
        line.removeprefix("# ") for line in script.read_text().splitlines() if line.startswith("#"))
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    ran = subprocess.run([sys.executable, "-I", str(script)], cwd=empty, capture_output=True, text=True,
                         check=False, timeout=300)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stdout.startswith("BUG: ") and f'"where": "{conftest}:9"' in ran.stdout.splitlines()[-1]


def _report(interrupted: bool = False) -> Report:
    failing = CheckResult("cpmant", "greedy", "forward", "eager", 2, outcome="error", message="IndexError: x")
    return Report({}, [failing], run={"exitstatus": 1, "interrupted": interrupted})


class _Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_an_interrupted_run_writes_none_and_says_how_to_get_them(tmp_path: Path) -> None:
    line = reproduce_run(_report(interrupted=True), tmp_path, _Terminal())
    assert line.startswith("reproducers not written: the run was interrupted") and "repro" in line
    assert not list(tmp_path.iterdir())


def test_a_failure_of_the_step_is_one_line_not_the_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the disk is full\nmore detail")

    monkeypatch.setattr(command, "reproduce", broken)
    assert reproduce_run(_report(), tmp_path, None) == "reproducers not written: RuntimeError: the disk is full"


def test_a_run_without_failures_writes_an_empty_index(tmp_path: Path) -> None:
    passing = Report({}, [CheckResult("llama", "greedy", "forward", "eager", 2, outcome="pass")])
    terminal = _Terminal()
    assert reproduce_run(passing, tmp_path, terminal) == f"no failing check: {tmp_path / INDEX_NAME} lists none"
    assert json.loads((tmp_path / INDEX_NAME).read_text())["reproducers"] == [] and terminal.lines == []
