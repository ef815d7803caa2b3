"""The check's decision tree with fake levels and a scripted model (``tests/check/scripted.py``): each branch
of ``run_check`` reached on purpose, its outcome and message known in advance."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import pytest
import torch

from pytest_fullgraph import run_check
from pytest_fullgraph.check.run import failed_build
from pytest_fullgraph.core.results import BreakRecord, Stage, add_note
from pytest_fullgraph.levels.base import AT_LEAST_ONE_GRAPH, GRAPHS_NOT_COUNTED
from pytest_fullgraph.report import Report, markdown
from tests.check.scripted import DIFFERENT, EAGER, NEW_TOKENS, PLANTED, PROMPT_WIDTH, FakeLevel, ScriptedModel, check
from tests.factories import a_break


def test_equal_tokens_in_one_graph_pass() -> None:
    result = check(ScriptedModel(), FakeLevel())
    assert (result.outcome, result.graph_count, result.message) == ("pass", 1, "1 graph(s), tokens equal to eager")
    assert result.device == "cpu"


def test_nondeterministic_eager_stops_before_compiling() -> None:
    level = FakeLevel()
    result = check(ScriptedModel(second=DIFFERENT), level)
    assert result.outcome == "nondeterministic"
    assert result.mismatch is not None and (result.mismatch.row, result.mismatch.step) == (0, 2)
    assert result.message.startswith("eager generation differs from itself: row 0, position 10 (new token 2)")
    assert level.compiled_runs == 0


def test_more_than_one_graph_breaks_the_one_graph_rule() -> None:
    result = check(ScriptedModel(), FakeLevel(graphs=3))
    assert result.outcome == "break" and result.graph_count == 3
    assert result.message == "expected one graph, got 3 (recompiles: none)"
    assert result.breaks == [] and result.first_break is None
    page = markdown(Report({}, [result]))
    assert "⛔ 3 graphs" in page and "breaks" not in page.split("|")[-2]


def test_nothing_compiled_is_an_error_where_graphs_are_counted() -> None:
    result = check(ScriptedModel(), FakeLevel(rule=AT_LEAST_ONE_GRAPH, graphs=0))
    assert result.outcome == "error"
    assert result.message.startswith("nothing was compiled: transformers ran level 'fake' eagerly (model type "
                                     "'scripted'")


def test_graphs_not_counted_pass_on_tokens_alone() -> None:
    result = check(ScriptedModel(), FakeLevel(rule=GRAPHS_NOT_COUNTED, graphs=0))
    assert (result.outcome, result.graph_count, result.graph_ops) == ("pass", None, [])
    assert result.message == "tokens equal to eager"


def test_compiled_difference_is_a_mismatch_with_the_eager_logit_gap() -> None:
    result = check(ScriptedModel(), FakeLevel(compiled=DIFFERENT))
    assert result.outcome == "mismatch" and result.mismatch is not None
    assert (result.mismatch.position, result.mismatch.eager_token, result.mismatch.compiled_token) == (10, 12, 99)
    assert result.mismatch.eager_logit_gap == pytest.approx(0.25)
    assert result.message == ("compiled tokens differ from eager at row 0, position 10 (new token 2): eager 12, "
                              "compiled 99; eager top-1/top-2 logit gap there 0.25; rounding is not judged: the "
                              "float64 reference failed (TypeError: 'ScriptedModel' object is not callable)")


def test_graph_break_under_fullgraph_is_a_break_with_every_diagnosed_break() -> None:
    from torch._dynamo.exc import Unsupported

    level = FakeLevel(raises=Unsupported("planted", gb_type="Data-dependent branching"),
                      diagnosed=[a_break(*PLANTED), a_break(*PLANTED, root_cause=False)])
    result = check(ScriptedModel(), level)
    assert result.outcome == "break"
    assert result.first_break is not None and result.first_break.gb_type == "Data-dependent branching"
    assert len(result.breaks) == 2 and result.graph_count == 2  # the diagnostic run's graphs
    assert "diagnose_s" in result.timings
    skipped = check(ScriptedModel(), level, diagnose=False)
    assert skipped.outcome == "break" and skipped.breaks == [] and "diagnose_s" not in skipped.timings


def crash_at(file: str, line: int, *callers: tuple[str, int]) -> Exception:
    """dynamo's internal error, raised while tracing ``file:line`` (called from ``callers``, outermost first)."""
    from torch._dynamo.exc import InternalTorchDynamoError

    error = InternalTorchDynamoError("PendingUnbackedSymbolNotFound")
    frames = [(where, number, "forward", "x") for where, number in (*callers, (file, line))]
    error.real_stack = traceback.StackSummary.from_list(frames)  # type: ignore[attr-defined]
    return error


@pytest.mark.parametrize(("crash", "diagnosed", "outcome"), [
    (crash_at("mine/model.py", 12), [a_break(*PLANTED)], "break"),  # the break's own frame
    (crash_at("mine/helper.py", 3, ("mine/model.py", 12)), [a_break(*PLANTED)], "break"),  # the call under it
    (crash_at("mine/loop.py", 30), [a_break(*PLANTED)], "error"),  # elsewhere: the loop calling the model
    (crash_at("mine/model.py", 12), [a_break(*PLANTED, root_cause=False)], "error"),
    (crash_at("mine/model.py", 12), [], "error"),
])
def test_compiler_crash_is_the_break_only_at_the_breaks_site(crash: Exception, diagnosed: list[BreakRecord],
                                                             outcome: str) -> None:
    result = check(ScriptedModel(), FakeLevel(raises=crash, diagnosed=diagnosed))
    assert result.outcome == outcome
    if outcome == "break":
        assert result.first_break == diagnosed[0]
        assert result.message.startswith("Data-dependent branching [GB0170] at mine/model.py:12 in forward (user)")
        assert "(with fullgraph=True the compiler crashed instead: InternalTorchDynamoError" in result.message
        return
    assert result.first_break is not None and result.first_break.gb_type == "InternalTorchDynamoError"
    assert result.first_break.origin == "torch"  # dynamo's internal error, whichever frame it traced
    also = " (also breaks at mine/model.py:12: Data-dependent branching (user))"
    assert result.message.endswith(also) is (diagnosed == [a_break(*PLANTED)])


@pytest.mark.parametrize(("static", "verdict"), [
    (EAGER, "; model.generate with a static cache gives the default tokens, so the loop is at fault"),
    (DIFFERENT, "; model.generate with a static cache differs from the default too (row 0, position 10: 12 vs "
                "99): the model's static-cache path is wrong, not the loop"),
    (RuntimeError("no static cache here"), " (model.generate with a static cache failed: RuntimeError: no static "
                                           "cache here)"),
])
def test_own_loop_mismatch_names_the_static_cache_verdict(static: torch.Tensor | Exception, verdict: str) -> None:
    level = FakeLevel(own_loop=DIFFERENT)
    result = check(ScriptedModel(static=static), level)
    assert result.outcome == "mismatch" and level.compiled_runs == 0
    assert result.message.startswith("scripted_loop run eagerly differs from model.generate at row 0, position 10 "
                                     "(new token 2): eager 12, scripted_loop 99; eager top-1/top-2 logit gap there "
                                     "0.25")
    assert result.message.endswith(verdict)


def test_a_beam_mismatch_past_the_prompts_rows_is_explained_without_judging_rounding() -> None:
    """Beam search returns num_return_sequences rows per prompt: a difference in row 2 (of 2 prompts) is a
    mismatch, not a crash of the rounding judge, which judges top-1 steps only (a beam's token is not one)."""
    returned = torch.cat([EAGER, EAGER])
    ours = returned.clone()
    ours[2, PROMPT_WIDTH + 1] = 99
    model: Any = ScriptedModel(returned, static=returned)
    result = run_check(model, "scripted", "beam_eos", FakeLevel(own_loop=ours), "eager", NEW_TOKENS, diagnose=False)
    assert result.outcome == "mismatch", result.message
    assert result.mismatch is not None and (result.mismatch.row, result.mismatch.step) == (2, 1)
    assert result.mismatch.precision is None and result.mismatch.eager_logit_gap is None
    assert result.message.endswith("so the loop is at fault")


def test_own_loop_that_agrees_goes_on_to_the_compiled_run() -> None:
    level = FakeLevel(own_loop=EAGER)
    assert check(ScriptedModel(), level).outcome == "pass" and level.compiled_runs == 1


def test_failures_outside_the_compiler_are_errors_naming_the_stage() -> None:
    result = check(ScriptedModel(crash=ValueError("bad config")), FakeLevel())
    assert result.outcome == "error" and result.message.startswith("eager generation failed")
    assert result.stage == "eager generation"  # the flag audit reads it: an eager failure says nothing of a compile
    built = failed_build("scripted", "greedy", "fake", "eager", NEW_TOKENS, "float32", RuntimeError("no weights"))
    assert (built.outcome, built.stage, built.message) == (
        "error", "build", "model 'scripted' failed to build: RuntimeError: no weights")


@pytest.mark.parametrize("stage", list(Stage))
def test_every_stage_reads_back_from_its_label(stage: Stage) -> None:
    assert Stage.of(stage.label("fullgraph_generate(loop='while')")) is stage
    assert Stage.of("") is None and Stage.of("eager generationally") is None


def test_compiled_run_crashing_outside_torch_is_an_error_of_the_compiled_stage() -> None:
    result = check(ScriptedModel(), FakeLevel(raises=KeyError("lost")))
    assert result.outcome == "error" and result.message.startswith("compiled generation failed")
    assert result.stage == "compiled generation"


def test_a_note_our_code_put_on_someone_elses_exception_is_in_the_message_after_its_first_line() -> None:
    """A runner's error whose first line ends in a dump keeps its site and type; our diagnosis follows it."""
    error = ValueError("Trying to flatten user inputs with exported input tree spec:\nTreeSpec(...)")
    add_note(error, "the decode program's input spec holds the cache's Python values as they were at export")
    result = check(ScriptedModel(), FakeLevel(raises=error))
    assert result.outcome == "error"
    assert result.message.endswith(": ValueError: Trying to flatten user inputs with exported input tree spec; the "
                                   "decode program's input spec holds the cache's Python values as they were at export")
    dump = RuntimeError(f"Real spec TreeSpec(StaticCache, {'x' * 500}) of the input does not match")
    add_note(dump, "the decode program's input spec ...")
    message = check(ScriptedModel(), FakeLevel(raises=dump)).message
    kept = f"{str(dump)[:160]} ...; the decode program's input spec ..."
    assert f"RuntimeError: {kept}" in message  # a dump cut where the note explains it


def test_a_level_object_is_judged_without_the_check_knowing_its_name() -> None:
    """``run_check`` asks the level; renaming a level changes nothing but the result's name."""
    outcomes: dict[str, str] = {}
    for name in ("decode", "export", "anything"):
        renamed: Callable[..., FakeLevel] = type("Renamed", (FakeLevel,), {"name": name})
        outcomes[name] = check(ScriptedModel(), renamed(graphs=2)).outcome
    assert outcomes == {"decode": "break", "export": "break", "anything": "break"}
