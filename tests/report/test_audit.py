"""The models section of a report and the audit of transformers' ``_can_compile_fullgraph`` flag."""

from __future__ import annotations

import json

from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report import Report, markdown, terminal_lines
from pytest_fullgraph.report.audit import COMPILES_ANYWAY, FLAG_BUT_BREAKS, disagreements, model_summaries


def result(model: str, level: str, outcome: str, flag: bool | None, scenario: str = "greedy",
           message: str = "", stage: str = "compiled generation") -> CheckResult:
    return CheckResult(model, scenario, level, "aot_eager", 4, outcome, message or outcome,
                       model_class=f"{model.title()}ForCausalLM", parameters=1000, can_compile_fullgraph=flag,
                       stage=stage)


CHECKS = [
    # flag True and forward compiles: agrees
    result("agree", "forward", "pass", True), result("agree", "decode", "pass", True),
    # flag True but transformers' compiled forward breaks: disagreement
    result("overclaims", "forward", "pass", True),
    result("overclaims", "forward", "break", True, scenario="sample", message="Data-dependent branching at x.py:3"),
    result("overclaims", "decode", "break", True),
    # flag False, forward not compiled by transformers, our loop compiles it exactly: disagreement
    result("conservative", "forward", "error", False, message="nothing was compiled"),
    result("conservative", "decode", "pass", False), result("conservative", "decode", "pass", False, "sample"),
    # flag False and decode breaks too: agrees
    result("honest", "forward", "error", False), result("honest", "decode", "break", False),
    # a decode mismatch is not "compiles anyway"; a skip alone says nothing
    result("drifts", "decode", "mismatch", False), result("skipped", "decode", "skip", False),
    # flag True but transformers never compiles it (llama4): a disagreement; an eager failure says nothing
    result("never_compiled", "forward", "error", True, message="nothing was compiled: transformers ran ..."),
    result("broken_eagerly", "forward", "error", True, message="eager generation failed at cache_utils.py:487",
           stage="eager generation"),
]


def test_each_model_gets_its_worst_outcome_per_level_and_the_flag_disagreements_both_ways() -> None:
    summaries = {summary.model: summary for summary in model_summaries(CHECKS)}
    assert summaries["overclaims"].verdicts == {"forward": "break", "decode": "break"}
    assert summaries["overclaims"].disagreement == FLAG_BUT_BREAKS
    assert summaries["overclaims"].evidence == (
        "overclaims-sample-forward-float32 break: Data-dependent branching at x.py:3")
    assert summaries["conservative"].disagreement == COMPILES_ANYWAY
    assert [s.model for s in disagreements(list(summaries.values()))] == ["conservative", "never_compiled",
                                                                         "overclaims"]
    for agreeing in ("agree", "honest", "drifts", "skipped", "broken_eagerly"):
        assert summaries[agreeing].disagreement == "", agreeing
    assert summaries["skipped"].verdicts == {"decode": "skip"}
    assert (summaries["agree"].model_class, summaries["agree"].parameters) == ("AgreeForCausalLM", 1000)


def test_the_markdown_terminal_and_json_carry_the_audit() -> None:
    report = Report({"backend": "aot_eager"}, CHECKS)
    page = markdown(report)
    assert "## transformers' `_can_compile_fullgraph` flag audit" in page
    assert "Of 8 models, **3** disagree with the flag:" in page
    assert ("| flag True, forward does not compile | overclaims (OverclaimsForCausalLM) | sample-forward-float32 "
            "break: Data-dependent branching at x.py:3 |") in page
    assert ("| flag False, compiles anyway | conservative (ConservativeForCausalLM) | every decode check is one "
            "graph") in page
    assert "| agree" not in page and "honest (" not in page  # agreeing models are counted, not listed
    lines = terminal_lines(report)
    assert "_can_compile_fullgraph disagrees with the verdicts for 3 model(s):" in lines
    data = json.loads(json.dumps(report.to_dict()))
    assert [m["model"] for m in data["models"] if m["disagreement"]] == ["conservative", "never_compiled",
                                                                        "overclaims"]
    reread = Report.from_dict(data, "memory")  # the derived section is recomputed, never read back
    assert reread.to_dict() == data


def test_reports_without_flags_have_no_audit_section() -> None:
    old = [CheckResult("llama", "greedy", "forward", "aot_eager", 4, "pass")]
    assert "flag audit" not in markdown(Report({}, old))


def test_a_mode_whose_loop_in_transformers_never_compiles_the_forward_says_nothing_of_the_flag() -> None:
    """Beam search's forward level errors for every model (transformers' _beam_search calls the forward
    uncompiled); that is no evidence against a model's _can_compile_fullgraph."""
    from pytest_fullgraph.core.results import MODE_NEVER_COMPILES

    never = CheckResult("llama", "beam", "forward", "aot_eager", 4, "error", stage="compiled generation",
                        message=f"nothing was compiled: transformers ran level 'forward' eagerly (transformers' "
                                f"beam_search {MODE_NEVER_COMPILES}: ...)", can_compile_fullgraph=True)
    broke = CheckResult("llama", "greedy", "forward", "aot_eager", 4, "break", can_compile_fullgraph=True)
    assert disagreements(model_summaries([never])) == []
    assert [summary.model for summary in disagreements(model_summaries([never, broke]))] == ["llama"]
