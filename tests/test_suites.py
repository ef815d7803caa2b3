"""The shipped suites' own decisions, with no catch-all: what the property suite leaves out is counted and named, and
what the dynamic-shape export suite xfails is only what torch.export says about code that is not ours."""

from __future__ import annotations

import traceback

import pytest

from pytest_fullgraph import build_tiny
from pytest_fullgraph.plugin.session import FullgraphSession
from suites import test_decode_properties as properties
from suites import test_export_shapes as export_shapes


def test_a_parts_draws_line_counts_every_draw_and_names_why_each_left_out_mode_is() -> None:
    assert properties.draws_line(2, {}, {}) == "2 of 2 draws checked"
    why = {properties.BEAMS: "generate's static cache gives other tokens than its default cache"}
    assert properties.draws_line(17, {properties.BEAMS: 3}, why) == (
        "17 of 20 draws checked; 3 left out: 3 beam search: generate's static cache gives other tokens than its "
        "default cache")


def test_a_stateful_models_draft_modes_are_left_out_naming_generates_refusal() -> None:
    why = properties._drafts_left_out(build_tiny("mamba"))
    assert why is not None and why.startswith("generate fails it (ValueError: ")
    assert properties._beams_left_out(build_tiny("llama")) is None
    assert properties._drafts_left_out(build_tiny("llama")) is None


def test_the_run_lists_the_property_tests_that_left_draws_out(monkeypatch: pytest.MonkeyPatch) -> None:
    session = FullgraphSession.__new__(FullgraphSession)
    session.baseline, session.baseline_line, session.recorded = None, "", {}
    session.draws = {"t.py::a[llama-part1of4]": "2 of 2 draws checked",
                     "t.py::a[mamba-part1of4]": "1 of 2 draws checked; 1 left out: 1 prompt lookup and assisted "
                                                "decoding: generate fails it (ValueError: ...)"}
    assert session.closing_lines() == ["property draws left out: t.py::a[mamba-part1of4]: 1 of 2 draws checked; 1 "
                                       "left out: 1 prompt lookup and assisted decoding: generate fails it "
                                       "(ValueError: ...)"]


def raised_at(error: Exception, file: str) -> Exception:
    """``error`` as if raised while tracing ``file`` (its innermost user frame)."""
    error.real_stack = traceback.StackSummary.from_list([(file, 7, "forward", "x")])  # type: ignore[attr-defined]
    return error


def test_the_export_suite_xfails_only_what_torch_export_says_about_code_not_ours() -> None:
    from torch._dynamo.exc import Unsupported, UserError, UserErrorType
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    in_model = "transformers/models/llama/modeling_llama.py"
    guard = raised_at(GuardOnDataDependentSymNode("Could not guard on data-dependent expression Eq(u0, 1)"), in_model)
    refusal = export_shapes.export_refusal(guard)
    assert refusal is not None and refusal.startswith(f"GuardOnDataDependentSymNode at {in_model}:7 in forward (model)")
    constraint = raised_at(UserError(UserErrorType.CONSTRAINT_VIOLATION, "Constraints violated (L['x'].size()[0])"),
                           in_model)
    assert export_shapes.export_refusal(constraint) is not None
    ours = raised_at(Unsupported("Data-dependent branching", gb_type="Data-dependent branching"),
                     "pytest_fullgraph/loop/decode.py")
    assert export_shapes.export_refusal(ours) is None  # a break in our loop is our bug
    assert export_shapes.export_refusal(raised_at(KeyError("cache_len"), in_model)) is None  # not export's words
