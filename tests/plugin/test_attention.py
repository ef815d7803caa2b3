"""--fullgraph-attn: every model set to one attention implementation; a model that cannot use it is a skip that
says why, and reports of different implementations are different configurations."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.publish.collate import group_name
from pytest_fullgraph.report.merge import merge
from pytest_fullgraph.report.schema import ReportError
from tests.conftest import checks_by_id, read_report

#: The implementation is set when the model is built: one check per model at the cheapest compiled level shows it.
ONE_CHECK_EACH = "test_generation_compiles_exactly and greedy-forward"


def test_a_model_runs_with_the_implementation_asked_and_one_that_cannot_is_skipped(toy_project: pytest.Pytester,
                                                                                 tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=llama,gpt2", "--fullgraph-attn=eager", "--fullgraph-suite=on",
                                   "--fullgraph-backend=eager", "-k", ONE_CHECK_EACH,
                                   f"--fullgraph-report={tmp_path / 'eager'}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["fullgraph: *attn=eager*"])
    assert read_report(tmp_path / "eager")["environment"]["attn_implementation"] == "eager"
    flex = toy_project.runpytest("--fullgraph-models=gpt2", "--fullgraph-attn=flex_attention", "--fullgraph-suite=on",
                                 "--fullgraph-backend=eager", "-k", ONE_CHECK_EACH,
                                 f"--fullgraph-report={tmp_path / 'flex'}")
    flex.assert_outcomes(skipped=1)
    check = checks_by_id(read_report(tmp_path / "flex"))["gpt2-greedy-forward"]
    assert check["outcome"] == "skip"
    assert check["message"].startswith("skipped: GPT2LMHeadModel cannot use attn_implementation='flex_attention': "
                                       "GPT2LMHeadModel does not support an attention implementation through torch's "
                                       "flex_attention")


def test_an_unknown_implementation_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(fullgraph_settings):\n    pass\n")
    result = pytester.runpytest("--fullgraph-attn=flash")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("--fullgraph-attn='flash' is not an attention implementation; use one of eager, sdpa, flex_attention"
            in result.stderr.str())


def test_reports_of_different_implementations_do_not_merge_and_group_apart() -> None:
    environment = {"torch": "2.13.0", "transformers": "5.24.0", "backend": "aot_eager", "max_new_tokens": 4,
                   "run_slow": False, "strict": False, "breaks": "all"}
    default, eager = report.Report(dict(environment)), report.Report({**environment, "attn_implementation": "eager"})
    with pytest.raises(ReportError, match="attention implementation is 'eager' but an earlier report has None"):
        merge([("default", default), ("eager", eager)])
    assert group_name(eager) == "fast-eager-torch2.13.0"
    assert group_name(default) == "fast-torch2.13.0"
