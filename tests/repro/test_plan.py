"""Which script a failing check gets (``repro.plan``), from the ``CheckResult`` alone: the template that shows
it, one script per cause, why a failure gets none, and how a found failure is matched to the recorded one."""

from __future__ import annotations

import pytest

from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.repro.plan import Expected, Plan, grouped, plan_for
from tests.repro.failures import LOOP_CACHE_ERROR, check, record


def test_a_static_cache_error_is_shown_by_generate_with_a_static_cache() -> None:
    plan = plan_for(check())
    assert isinstance(plan, Plan) and plan.templates == ("static_error",)
    assert plan.expected == Expected("error", "IndexError", "transformers/cache_utils.py:487", plan.expected.message)


def test_our_loop_failing_where_generate_fails_alike_is_the_same_cause_and_a_loop_fault_is_not_written() -> None:
    loop = plan_for(check(level="decode", stage="eager generation by fullgraph_generate", message=LOOP_CACHE_ERROR))
    assert isinstance(loop, Plan) and loop.expected.type == "IndexError"
    assert loop.expected.where == "transformers/cache_utils.py:487"  # the loop's error is generate's, so its site
    other = LOOP_CACHE_ERROR.replace("(IndexError: index_copy_(): index 11", "(IndexError: another text")
    assert plan_for(check(level="decode", stage="eager generation by fullgraph_generate", message=other)
                    ).expected.where == ""  # type: ignore[union-attr]
    groups, skipped = grouped([check(), check(level="decode", stage="eager generation by fullgraph_generate",
                                             message=LOOP_CACHE_ERROR), check(scenario="sample")])
    assert len(groups) == 1 and not skipped and groups[0].representative.check_id == "cpmant-greedy-forward-float32"
    fault = (LOOP_CACHE_ERROR.split("; model.generate")[0]
             + "; model.generate with a static cache works, so the loop is at fault")
    reason = plan_for(check(level="decode", stage="eager generation by fullgraph_generate", message=fault))
    assert isinstance(reason, str) and "pytest_fullgraph's loop" in reason


@pytest.mark.parametrize(("result", "templates", "expected"), [
    (check(level="generate", outcome="break", stage="compiled generation",
           record=record("Data-dependent branching", "transformers/generation/utils.py", 2413, "eos")),
     ("generate_break",), Expected("break", "Data-dependent branching", "transformers/generation/utils.py:2413")),
    (check(model="llama4", outcome="error", stage="compiled generation",
           message="nothing was compiled: transformers ran level 'forward' eagerly (model type 'llama4_text' ...)"),
     ("not_compiled",), Expected("not_compiled")),
    (check(model="qwen4_exp", outcome="break", stage="compiled generation", record=record()),
     ("forward_compile", "compiled_generate"),
     Expected("break", "UserError", "transformers/models/qwen4_exp/modeling_qwen4_exp.py:752")),
    (check(model="mpt", level="decode", outcome="break", stage="compiled generation",
           record=record("Unsupported Tensor.item() call", "transformers/models/mpt/modeling_mpt.py", 121),
           message="Unsupported Tensor.item() call [GB0124] at ... (with fullgraph=True the compiler crashed instead: "
                   "InternalTorchDynamoError at pytest_fullgraph/loop/decode.py:319 in fullgraph_generate (loop): "
                   "PendingUnbackedSymbolNotFound: Pending unbacked symbols {u2} not in returned outputs)"),
     ("forward_compile",),
     Expected("crash", "InternalTorchDynamoError: PendingUnbackedSymbolNotFound",
              "transformers/models/mpt/modeling_mpt.py:121")),
    (check(model="git", level="while", outcome="break", stage="compiled generation",
           record=record("UncapturedHigherOrderOpError", "transformers/models/git/modeling_git.py", 840,
                         cause=record("Data-dependent branching", "transformers/models/git/modeling_git.py", 838))),
     ("forward_compile",),
     Expected("break", "Data-dependent branching", "transformers/models/git/modeling_git.py:838")),
    (check(model="git", level="while", outcome="break", stage="compiled generation",
           record=record("UncapturedHigherOrderOpError", "transformers/models/git/modeling_git.py", 840)),
     ("forward_compile",), Expected("break", "", "transformers/models/git/modeling_git.py:840")),
    (check(level="forward", outcome="mismatch", stage="compiled generation"), ("forward_mismatch",),
     Expected("mismatch")),
    (check(model="llama", level="hf_et_helper", outcome="mismatch", stage="compiled generation"), ("helper_mismatch",),
     Expected("mismatch")),
])
def test_each_failure_gets_the_script_that_shows_it(result: CheckResult, templates: tuple[str, ...],
                                                    expected: Expected) -> None:
    plan = plan_for(result)
    assert isinstance(plan, Plan) and plan.templates == templates
    assert (plan.expected.kind, plan.expected.type, plan.expected.where) == (expected.kind, expected.type,
                                                                             expected.where)


@pytest.mark.parametrize(("result", "words"), [
    (check(outcome="pass"), "not a failure"),
    (check(level="decode", outcome="mismatch", stage="compiled generation"), "loop"),
    (check(level="decode", outcome="break", stage="compiled generation",
           record=record("UserError", "transformers/generation/logits_process.py", 1099, "sampling")), "only"),
    (check(stage="build", message="model 'x' failed to build: ValueError: no"), "build"),
    (check(level="mine"), "not built in"),
    (check(level="hf_et_helper", stage="compiled generation"),
     "--fullgraph-levels=hf_et_helper --fullgraph-models=cpmant"),
    (check(level="hf_onnx", outcome="mismatch", stage="compiled generation"),
     "hf_onnx: the check shows it (`pytest --fullgraph-levels=hf_onnx --fullgraph-models=cpmant -k greedy`)"),
])
def test_failures_a_script_cannot_show_say_why(result: CheckResult, words: str) -> None:
    reason = plan_for(result)
    assert isinstance(reason, str) and words in reason


def test_a_found_failure_matches_by_kind_type_and_site() -> None:
    expected = Expected("error", "IndexError", "transformers/cache_utils.py:487")
    assert expected.differs({"status": "bug", **expected.as_found()}) == ""
    assert "KeyError" in expected.differs({"status": "other", "kind": "error", "type": "KeyError", "where": "x.py:1"})
    assert "ran without failing" in expected.differs({"status": "fixed"})
    assert expected.differs({"status": "bug", "kind": "error", "type": "IndexError", "where": "elsewhere.py:1"})
    site_only = Expected("break", "", "transformers/x.py:3")  # a higher-order op given up: its site says it
    assert site_only.differs({"kind": "break", "type": "GB", "where": "transformers/x.py:3"}) == ""


def test_a_project_file_is_matched_by_its_end_on_the_recorded_line() -> None:
    """A conftest's file is relative to the run's directory in the report, absolute in a script's output."""
    expected = Expected("break", "Data-dependent branching", "conftest.py:9")
    found = {"kind": "break", "type": "Data-dependent branching", "where": "/home/me/project/conftest.py:9"}
    assert expected.differs(found) == ""
    assert expected.differs({**found, "where": "/home/me/project/conftest.py:12"})
    assert expected.differs({**found, "where": "/home/me/project/myconftest.py:9"})


DEFAULT_OFF = ("the default cache (DynamicCache) is off at step 1: its logits are 0.0206 off float64 (row 1), where "
               "float32's own recompute is 1.12e-05 off (tolerance 0.000179); first off at layer 0 (linear_attention, "
               "LinearAttentionLayer); its tokens still equal recompute's over 16 steps: that cache path of the model "
               "or transformers is wrong")
STATIC_FAILS = ("generate with the static cache fails at transformers/cache_utils.py:487: IndexError: index_copy_(): "
                "index 23 is out of bounds for dimension 2 with size 23 (the default cache works: that path of the "
                "model or transformers is wrong)")


@pytest.mark.parametrize(("message", "static"), [
    (DEFAULT_OFF, False),
    (DEFAULT_OFF.replace("the default cache (DynamicCache)", "the static cache (StaticCache)"), True),
    (f"{STATIC_FAILS}; {DEFAULT_OFF}", False),  # a divergence is shown before a static cache that fails
])
def test_a_cache_path_off_float64_is_shown_by_that_path_against_float64(message: str, static: bool) -> None:
    plan = plan_for(check(model="zamba2", level="cache", outcome="mismatch", stage="compiled generation",
                          message=message))
    assert isinstance(plan, Plan) and plan.templates == ("cache_divergence",) and plan.static is static
    assert plan.expected.kind == "mismatch"


def test_a_cache_levels_failing_static_cache_alone_is_shown_as_the_static_error_and_a_flip_gets_no_script() -> None:
    plan = plan_for(check(level="cache", outcome="error", stage="compiled generation", message=STATIC_FAILS))
    assert isinstance(plan, Plan) and plan.templates == ("static_error",)
    assert plan.expected.as_found() == {"kind": "error", "type": "IndexError",
                                        "where": "transformers/cache_utils.py:487"}
    flip = plan_for(check(level="cache", outcome="mismatch", stage="compiled generation",
                          message="the static cache (StaticCache) differs from the default cache at row 0, position 9 "
                                  "(new token 1): 3 vs 4, with every path's logits within rounding of float64 up to "
                                  "it: a rounding flip"))
    assert isinstance(flip, str) and "a rounding flip is nobody's bug" in flip


def test_a_divergence_float64_could_not_judge_gets_the_script_without_float64() -> None:
    """reformer: float64 cannot run it, so its check and its script bound rounding by rounding steps alone."""
    message = DEFAULT_OFF.replace("where float32's own recompute is 1.12e-05 off",
                                  "where float64 could not run the model, so the tolerance is 1024 float32 rounding "
                                  "steps")
    assert message != DEFAULT_OFF
    plan = plan_for(check(model="reformer", level="cache", outcome="mismatch", stage="compiled generation",
                          message=message))
    assert isinstance(plan, Plan) and not plan.float64
    assert plan_for(check(model="zamba2", level="cache", outcome="mismatch", stage="compiled generation",
                          message=DEFAULT_OFF)).float64  # type: ignore[union-attr]
