"""The baseline gate inside the run (``--fullgraph-baseline``, ``--fullgraph-baseline-update``), run as users run it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TOY_CONFTEST

#: ``toy_flip`` is the plain toy, or with TOY_BREAKS set the toy whose forward breaks: one model that gets worse.
FLIP_CONFTEST = TOY_CONFTEST + '''

import os


def flipping():
    return build_tiny("llama", model_class=PlantedBreak if os.environ.get("TOY_BREAKS") else LlamaForCausalLM)


register_model("toy_flip", flipping)
'''
#: One check at the cheapest compiled level (the gate is the same at every level), its first break recorded.
ONE_CHECK = ["--fullgraph-models=toy_flip", "--fullgraph-backend=eager", "-k", "greedy and forward", "-p",
             "no:cacheprovider", "-rxX", "--fullgraph-breaks=first"]


@pytest.fixture
def flip_project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(FLIP_CONFTEST)
    return pytester


def outcomes_in(baseline: Path) -> dict[str, str]:
    checks = json.loads(baseline.read_text())["checks"]
    return {f"{c['model']}-{c['scenario']}-{c['level']}": c["outcome"] for c in checks}


def test_a_check_worse_than_the_baseline_fails_naming_the_baselines_outcome_and_update_round_trips(
        flip_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = flip_project.path / "baselines" / "toy.json"
    update = ["--fullgraph-baseline=baselines/toy.json", "--fullgraph-baseline-update"]
    started = flip_project.runpytest(*ONE_CHECK, *update)
    started.assert_outcomes(passed=1)
    started.stdout.fnmatch_lines(["fullgraph baseline updated: baselines/toy.json (1 check(s) of this run, 0 kept)"])
    assert outcomes_in(baseline) == {"toy_flip-greedy-forward": "pass"}

    monkeypatch.setenv("TOY_BREAKS", "1")
    worse = flip_project.runpytest(*ONE_CHECK, "--fullgraph-baseline=baselines/toy.json")
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines([
        "*toy_flip-greedy-forward-float32*", "*break: worse than the baseline: was pass in baselines/toy.json "
        "(pass -> break: Data-dependent branching [[]GB0170[]] at conftest.py:9*",
        "fullgraph baseline baselines/toy.json: 1 check(s) compared, 1 worse, 0 better, 0 not in it"])

    accepted = flip_project.runpytest(*ONE_CHECK, *update)
    accepted.assert_outcomes(xfailed=1)  # updating judges as a run without a baseline does
    assert outcomes_in(baseline) == {"toy_flip-greedy-forward": "break"}
    known = flip_project.runpytest(*ONE_CHECK, "--fullgraph-baseline=baselines/toy.json")
    known.assert_outcomes(xfailed=1)
    known.stdout.fnmatch_lines(["XFAIL *toy_flip-greedy-forward-float32* - break as in the baseline "
                                "baselines/toy.json: Data-dependent branching*"])
    assert known.ret == 0

    monkeypatch.delenv("TOY_BREAKS")
    fixed = flip_project.runpytest(*ONE_CHECK, "--fullgraph-baseline=baselines/toy.json")
    fixed.assert_outcomes(passed=1)
    fixed.stdout.fnmatch_lines([
        "fullgraph baseline baselines/toy.json: 1 check(s) compared, 0 worse, 1 better, 0 not in it",
        "fixed since the baseline: toy_flip-greedy-forward-float32: break -> pass",
        "update it with --fullgraph-baseline-update (rewrites this run's checks in baselines/toy.json, keeps the "
        "rest)"])


def test_an_update_keeps_the_checks_this_run_did_not_run(flip_project: pytest.Pytester) -> None:
    arguments = ["--fullgraph-models=toy_flip", "--fullgraph-backend=eager", "-p", "no:cacheprovider",
                 "--fullgraph-baseline=base.json", "--fullgraph-baseline-update"]
    flip_project.runpytest(*arguments, "-k", "greedy and forward").assert_outcomes(passed=1)
    flip_project.runpytest(*arguments, "-k", "sample and forward").assert_outcomes(passed=1)
    assert outcomes_in(flip_project.path / "base.json") == {"toy_flip-greedy-forward": "pass",
                                                            "toy_flip-sample-forward": "pass"}


def test_a_baseline_of_other_settings_is_a_usage_error_naming_both_values(flip_project: pytest.Pytester) -> None:
    flip_project.runpytest(*ONE_CHECK, "--fullgraph-baseline=base.json", "--fullgraph-baseline-update")
    other = flip_project.runpytest(*(each.replace("=eager", "=aot_eager") for each in ONE_CHECK),
                                   "--fullgraph-baseline=base.json")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    other.stderr.fnmatch_lines(["ERROR: --fullgraph-baseline=base.json was made with other settings (backend: "
                                "'eager' in the baseline, 'aot_eager' in this run): run with its settings, or keep "
                                "one baseline file per configuration"])


@pytest.mark.parametrize(("arguments", "line"), [
    (["--fullgraph-baseline-update"],
     "ERROR: --fullgraph-baseline-update needs --fullgraph-baseline=FILE: the baseline to rewrite"),
    (["--fullgraph-baseline=nope.json"], "ERROR: --fullgraph-baseline=nope.json: */nope.json: cannot read (No such "
                                         "file or directory); to start one, add --fullgraph-baseline-update"),
])
def test_a_missing_baseline_is_one_line_saying_how_to_start_one(flip_project: pytest.Pytester, arguments: list[str],
                                                                 line: str) -> None:
    result = flip_project.runpytest(*ONE_CHECK, *arguments)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])


def test_the_ini_key_reads_the_baseline_beside_the_ini_file(flip_project: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    flip_project.runpytest(*ONE_CHECK, "--fullgraph-baseline=ci/base.json", "--fullgraph-baseline-update")
    ini = flip_project.makeini("[pytest]\nfullgraph_baseline = ci/base.json\n")
    monkeypatch.chdir(flip_project.mkdir("elsewhere"))
    result = flip_project.runpytest(*ONE_CHECK, "-c", str(ini))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["fullgraph baseline ci/base.json: 1 check(s) compared, 0 worse, 0 better, 0 not in "
                                 "it"])
