"""The check end to end on toy models with known behaviour, run as users run the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import PLANTED_BREAK_LINE, checks_by_id, read_report

FORWARD_GREEDY = ["-k", "greedy and forward", "-p", "no:cacheprovider"]


def test_toy_model_compiles_and_passes_exactly(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-backend=eager", *FORWARD_GREEDY,
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1)
    report = read_report(tmp_path)
    check = checks_by_id(report)["toy-greedy-forward"]
    assert check["outcome"] == "pass"
    assert check["graph_count"] >= 1 and check["breaks"] == []
    # where the checks ran, not merely whether an accelerator exists
    assert check["device"] == "cpu" and report["environment"]["device"] == "cpu"
    assert isinstance(report["environment"]["cuda_available"], bool)


def test_planted_break_is_xfail_at_its_file_and_line(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_break", "--fullgraph-backend=eager", "-rx",
                                   *FORWARD_GREEDY, f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines([f"*graph break: Data-dependent branching [[]GB0170[]] at conftest.py:"
                                 f"{PLANTED_BREAK_LINE} in forward (user)*"])
    written = read_report(tmp_path)
    first = checks_by_id(written)["toy_break-greedy-forward"]["first_break"]
    assert (first["file"], first["line"], first["function"]) == ("conftest.py", PLANTED_BREAK_LINE, "forward")
    assert first["source"] == "if out.logits.sum() > 0:  # planted graph break: data-dependent branch"
    assert first["gb_id"] == "GB0170" and first["exception"] == "torch._dynamo.exc.Unsupported"
    # the run stores its torch's help with the report, for readers without torch
    assert written["break_help"]["GB0170"]["gb_type"] == "Data-dependent branching"


@pytest.mark.parametrize(("mode", "recorded"), [("all", 1), ("first", 0), ("auto", 1)])
def test_break_mode_decides_whether_every_break_is_recorded(toy_project: pytest.Pytester, tmp_path: Path,
                                                           mode: str, recorded: int) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_break", "--fullgraph-backend=eager", *FORWARD_GREEDY,
                                   f"--fullgraph-breaks={mode}", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(xfailed=1)
    check = checks_by_id(read_report(tmp_path))["toy_break-greedy-forward"]
    assert check["first_break"]["line"] == PLANTED_BREAK_LINE
    assert len(check["breaks"]) == recorded
    assert ("diagnose_s" in check["timings"]) is (mode != "first")
    if recorded:
        assert check["breaks"][0]["line"] == PLANTED_BREAK_LINE and check["breaks"][0]["hits"] >= 1


def test_the_default_break_mode_keeps_the_first_break_of_generate_in_the_fast_tier(toy_project: pytest.Pytester,
                                                                                  tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_break", "--fullgraph-backend=eager",
                                   "-k", "greedy and generate", "-p", "no:cacheprovider",
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(xfailed=1)
    written = read_report(tmp_path)
    check = checks_by_id(written)["toy_break-greedy-generate"]
    assert check["first_break"]["file"] == "transformers/generation/utils.py"
    assert check["breaks"] == [] and "diagnose_s" not in check["timings"]
    assert written["environment"]["breaks"] == "auto"


def test_planted_break_fails_when_strict(toy_project: pytest.Pytester) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_break", "--fullgraph-backend=eager",
                                   "--fullgraph-strict", *FORWARD_GREEDY)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*break: Data-dependent branching*conftest.py:*"])


def test_compiled_only_drift_is_a_mismatch_at_the_right_position(toy_project: pytest.Pytester,
                                                                 tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_drift", "--fullgraph-backend=eager",
                                   *FORWARD_GREEDY, f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(failed=1)
    check = checks_by_id(read_report(tmp_path))["toy_drift-greedy-forward"]
    mismatch = check["mismatch"]
    # prefill runs eagerly in transformers' compiled-forward path: the first compiled step is new token 1
    assert (mismatch["row"], mismatch["position"], mismatch["step"]) == (0, 9, 1)
    assert mismatch["compiled_token"] == 5 and mismatch["eager_token"] != 5
    assert mismatch["eager_logit_gap"] > 0
    result.stdout.fnmatch_lines(["*mismatch: compiled tokens differ from eager at row 0, position 9 (new token 1):"
                                 "*compiled 5; eager top-1/top-2 logit gap there*"])


def test_broken_model_errors_alone(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_broken,toy", "--fullgraph-backend=eager",
                                   *FORWARD_GREEDY, f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*error: model 'toy_broken' failed to build: RuntimeError: this model cannot "
                                 "be built*"])
    outcomes = {k: c["outcome"] for k, c in checks_by_id(read_report(tmp_path)).items()}
    assert outcomes == {"toy_broken-greedy-forward": "error", "toy-greedy-forward": "pass"}


def test_all_scenarios_pass_on_toy_at_forward_level(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy", "-k", "forward", "-p", "no:cacheprovider",
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=4)
    checks = checks_by_id(read_report(tmp_path))
    eos = checks["toy-eos-forward"]["eos_token_id"]
    assert isinstance(eos, int) and eos > 2
    assert {c["backend"] for c in checks.values()} == {"aot_eager"}


def test_junit_properties_carry_outcome_and_first_break(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ElementTree

    junit = tmp_path / "junit.xml"
    toy_project.runpytest("--fullgraph-models=toy_break", "--fullgraph-backend=eager", *FORWARD_GREEDY,
                          f"--junitxml={junit}").assert_outcomes(xfailed=1)
    properties = {p.get("name"): p.get("value") for p in ElementTree.parse(junit).iter("property")}
    assert properties["fullgraph_outcome"] == "break"
    assert properties["graph_breaks"] == "1"
    assert f"conftest.py:{PLANTED_BREAK_LINE} in forward" in (properties["first_break"] or "")


def test_interrupted_run_writes_a_report_that_says_so(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    toy_project.makepyfile(test_stop="def test_stop(fullgraph_check):\n"
                                     "    fullgraph_check('toy', 'greedy', 'forward')\n"
                                     "    raise KeyboardInterrupt\n")
    result = toy_project.runpytest("test_stop.py", "--fullgraph-models=toy", "--fullgraph-backend=eager",
                                   "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = read_report(tmp_path)
    assert report["run"] == {"exitstatus": int(pytest.ExitCode.INTERRUPTED), "interrupted": True}
    assert list(checks_by_id(report)) == ["toy-greedy-forward"]  # the check that finished is kept
    assert "**Incomplete:** the run was interrupted" in (tmp_path / "fullgraph-report.md").read_text()


def test_complete_run_says_it_was_not_interrupted(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-backend=eager", *FORWARD_GREEDY,
                          f"--fullgraph-report={tmp_path}").assert_outcomes(passed=1)
    assert read_report(tmp_path)["run"] == {"exitstatus": 0, "interrupted": False}


@pytest.mark.breadth
def test_a_test_running_several_checks_records_each_of_them(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    toy_project.makepyfile(test_two="def test_two(fullgraph_check):\n"
                                    "    fullgraph_check('toy', 'greedy', 'forward')\n"
                                    "    fullgraph_check('toy', 'eos', 'forward')\n")
    result = toy_project.runpytest_subprocess("test_two.py", "-n", "1", "--fullgraph-models=toy",
                                              "--fullgraph-backend=eager", "-p", "no:cacheprovider",
                                              f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1)
    assert sorted(checks_by_id(read_report(tmp_path))) == ["toy-eos-forward", "toy-greedy-forward"]
