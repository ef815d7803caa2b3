"""The check's decision tree with fake levels and a scripted model: no model, no compile, milliseconds each.

The fake model is an oracle: its ``generate`` returns scripted tokens (and logits), so every branch of
``run_check`` is reached on purpose and its outcome and message are known in advance.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_fullgraph import run_check
from pytest_fullgraph.check.run import failed_build
from pytest_fullgraph.core.compile_events import CountingBackend
from pytest_fullgraph.core.results import BreakRecord, CheckResult, Stage, add_note
from pytest_fullgraph.levels.base import AT_LEAST_ONE_GRAPH, GRAPHS_NOT_COUNTED, ONE_GRAPH, GraphRule, Level
from pytest_fullgraph.report import Report, markdown

PROMPT_WIDTH = 8  # the greedy scenario: two prompts of 8 tokens
NEW_TOKENS = 4


def tokens(*new_rows: list[int]) -> torch.Tensor:
    """Two rows: a fixed prompt, then the given new tokens."""
    prompt = torch.arange(3, 3 + PROMPT_WIDTH)
    return torch.stack([torch.cat([prompt, torch.tensor(row)]) for row in new_rows])


EAGER = tokens([10, 11, 12, 13], [20, 21, 22, 23])
DIFFERENT = tokens([10, 11, 99, 13], [20, 21, 22, 23])  # row 0, new token 2


class ScriptedModel:
    """Duck-types what a check uses of a causal LM; ``generate`` answers from a script."""

    def __init__(self, reference: torch.Tensor = EAGER, *, second: torch.Tensor | None = None,
                 static: torch.Tensor | Exception | None = None, crash: Exception | None = None) -> None:
        self.config = SimpleNamespace(model_type="scripted",
                                      get_text_config=lambda: SimpleNamespace(vocab_size=128))
        self.generation_config = SimpleNamespace(eos_token_id=None, pad_token_id=0)
        self.reference, self.second, self.static, self.crash = reference, second, static, crash
        self.calls = 0

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generation_config: Any) -> Any:
        """Scripted tokens; with ``output_logits``, logits whose step 2 puts 12 just ahead of 99."""
        if self.crash is not None:
            raise self.crash
        if getattr(generation_config, "output_logits", False):
            # step 2 (the scripted mismatch): top-1 beats top-2 by 0.25
            logits = [torch.zeros(2, 128) for _ in range(NEW_TOKENS)]
            logits[2][0, 12], logits[2][0, 99] = 1.0, 0.75
            return SimpleNamespace(sequences=self.reference, logits=logits)
        if getattr(generation_config, "cache_implementation", None) == "static" and self.static is not None:
            if isinstance(self.static, Exception):
                raise self.static
            return self.static
        self.calls += 1
        return self.second if self.calls == 2 and self.second is not None else self.reference


class FakeLevel(Level):
    """A level whose runs are scripted: the compiled tokens, the graphs it makes, what it raises."""

    name = "fake"
    description = "a scripted level"

    def __init__(self, *, rule: GraphRule = ONE_GRAPH, compiled: torch.Tensor = EAGER, graphs: int = 1,
                 raises: Exception | None = None, own_loop: torch.Tensor | None = None,
                 diagnosed: list[BreakRecord] | None = None) -> None:
        self.graph_rule, self.compiled, self.graphs, self.raises = rule, compiled, graphs, raises
        self.own_loop = "scripted_loop" if own_loop is not None else ""
        self.own_loop_tokens, self.diagnosed = own_loop, diagnosed or []
        self.compiled_runs = 0

    def run_own_loop_eagerly(self, model: Any, inputs: dict[str, Any], config: Any) -> torch.Tensor | None:
        return self.own_loop_tokens

    def run_compiled(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> torch.Tensor:
        self.compiled_runs += 1
        backend.trace.graph_ops.extend([7] * self.graphs)
        if self.raises is not None:
            raise self.raises
        return self.compiled

    def diagnose(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> None:
        backend.trace.breaks.extend(self.diagnosed)
        backend.trace.graph_ops.extend([3, 4])


def a_break(root_cause: bool = True) -> BreakRecord:
    return BreakRecord("torch._dynamo.exc.Unsupported", "Data-dependent branching", "GB0170", "planted",
                       "mine/model.py", 12, "forward", "if x.sum() > 0:", "user", root_cause=root_cause)


def check(model: Any, level: Level, **kwargs: Any) -> CheckResult:
    return run_check(model, "scripted", "greedy", level, "eager", NEW_TOKENS, **kwargs)


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
                      diagnosed=[a_break(), a_break(root_cause=False)])
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
    (crash_at("mine/model.py", 12), [a_break()], "break"),  # the break's own frame
    (crash_at("mine/helper.py", 3, ("mine/model.py", 12)), [a_break()], "break"),  # the call under it
    (crash_at("mine/loop.py", 30), [a_break()], "error"),  # elsewhere: the loop calling the model
    (crash_at("mine/model.py", 12), [a_break(root_cause=False)], "error"),
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
    assert result.message.endswith(also) is (diagnosed == [a_break()])


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


class ScriptedForward(ScriptedModel):
    """Also runs a forward: its next-token logits make tokens 12 and 99 tied (in float64) or far apart."""

    def __init__(self, *, tied: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tied, self.dtype = tied, torch.float32

    def to(self, dtype: torch.dtype) -> ScriptedForward:
        self.dtype = dtype
        return self

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, use_cache: bool) -> Any:
        logits = torch.zeros(1, input_ids.shape[1], 128, dtype=torch.float64)
        logits[0, -1, 12], logits[0, -1, 99] = 5.0, 5.0 if self.tied else 1.0
        return SimpleNamespace(logits=logits.to(self.dtype))


@pytest.mark.parametrize(("tied", "kind", "verdict"), [
    (True, "rounding", "in float32 the two caches round differently, which shows neither the model's static-cache "
                       "path nor the loop wrong"),
    (False, "divergence", "the model's static-cache path is wrong, not the loop"),
])
def test_static_cache_is_blamed_only_for_a_divergence(tied: bool, kind: str, verdict: str) -> None:
    result = check(ScriptedForward(tied=tied, static=DIFFERENT), FakeLevel(own_loop=DIFFERENT))
    assert result.outcome == "mismatch" and result.mismatch is not None
    assert result.mismatch.kind == kind and result.message.endswith(verdict)
    assert f"float64 reference logits 5 vs {5 if tied else 1}" in result.message


def test_a_compiled_difference_gets_its_float64_class() -> None:
    result = check(ScriptedForward(tied=True), FakeLevel(compiled=DIFFERENT))
    assert result.mismatch is not None and result.mismatch.precision is not None
    assert (result.mismatch.kind, result.mismatch.precision.reference_gap) == ("rounding", 0.0)
    assert result.message.endswith("gap 0 = 0 float32 rounding steps there (float32 off float64 by up to 0): "
                                   "rounding")


def test_no_kernel_for_the_dtype_is_a_skip_not_an_error() -> None:
    model = ScriptedModel(crash=RuntimeError("\"addmm_impl_cpu_\" not implemented for 'BFloat16'"))
    result = check(model, FakeLevel())
    assert result.outcome == "skip"
    assert result.message.startswith("float32 cannot run here") and "not implemented for 'BFloat16'" in result.message


@pytest.mark.parametrize("refusal", [
    "assisted generation is not supported with stateful models, such as BambaForCausalLM",
    "cannot use beam search with a cache currently, as the cache cannot be reordered. ...",
    "Assisted decoding requires a cache",  # generate builds no cache for minimax's own cache class
])
def test_transformers_refusing_the_mode_for_the_model_is_a_skip_naming_it(refusal: str) -> None:
    """No reference to compare with, by transformers' own decision: no verdict, and not the check's error."""
    result = check(ScriptedModel(crash=ValueError(refusal)), FakeLevel())
    assert result.outcome == "skip"
    assert result.message.startswith("transformers' generate refuses this mode for this model")
    assert result.message.endswith(f"ValueError: {refusal.splitlines()[0]}")


def test_another_eager_failure_stays_an_error() -> None:
    result = check(ScriptedModel(crash=ValueError("beam search is broken here")), FakeLevel())
    assert result.outcome == "error" and result.message.startswith("eager generation failed")


class SlowLevel(FakeLevel):
    """Compiles forever (or breaks, then diagnoses forever)."""

    def __init__(self, *, slow_in: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slow_in = slow_in

    def run_compiled(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> torch.Tensor:
        if self.slow_in == "compile":
            time.sleep(30)
        return super().run_compiled(model, inputs, config, backend)

    def diagnose(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> None:
        backend.trace.breaks.append(a_break())
        time.sleep(30)


def test_a_check_past_its_timeout_is_an_error_naming_the_stage() -> None:
    started = time.monotonic()
    result = check(ScriptedModel(), SlowLevel(slow_in="compile"), timeout=0.3)
    assert (result.outcome, result.message) == ("error", "timeout after 0.3 s, during compiled generation")
    assert time.monotonic() - started < 10


def test_a_break_stays_a_break_when_only_its_diagnostic_pass_times_out() -> None:
    from torch._dynamo.exc import Unsupported

    level = SlowLevel(slow_in="diagnose", raises=Unsupported("planted"))
    result = check(ScriptedModel(), level, timeout=0.3)
    assert result.outcome == "break"
    assert result.message.endswith("(the pass recording every break was stopped by the 0.3 s timeout)")


def test_time_limit_rearms_a_timer_that_was_already_set() -> None:
    import signal

    from pytest_fullgraph.core.timer import CheckTimeout, time_limit

    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        with pytest.raises(CheckTimeout), time_limit(0.1):
            time.sleep(5)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 3.0 < left < 5.0  # the outer timer runs on with what it had left
        with time_limit(0):  # no limit: nothing armed, nothing raised
            time.sleep(0.01)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == []


def test_a_timeout_waits_for_an_import_in_progress(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted half way, an import leaves a broken module (sympy without sympy.core.symbol, seen here)."""
    import importlib
    import sys

    from pytest_fullgraph.core import timer

    (tmp_path / "planted_import.py").write_text(
        "import sys\nfrom pytest_fullgraph.core.timer import importing\nSEEN = importing(sys._getframe())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.import_module("planted_import").SEEN is True
    assert timer.importing(sys._getframe()) is False


class StaticReference(FakeLevel):
    """A level whose eager reference runs transformers' static cache, as the forward level's does."""

    def reference_config(self, config: Any) -> Any:
        from pytest_fullgraph.core.generation import static_cache_config

        return static_cache_config(config)


class LoopCrashes(FakeLevel):
    def __init__(self) -> None:
        super().__init__(own_loop=EAGER)

    def run_own_loop_eagerly(self, model: Any, inputs: dict[str, Any], config: Any) -> torch.Tensor | None:
        raise IndexError("index_copy_(): index 11 is out of bounds for dimension 2 with size 11")


def test_an_eager_failure_of_the_static_cache_alone_blames_the_models_static_cache_path() -> None:
    model = ScriptedModel(static=IndexError("index 11 is out of bounds"))
    result = check(model, StaticReference())
    assert (result.outcome, result.stage) == ("error", "eager generation")
    assert result.message.endswith("; model.generate with the default cache works: the model's static-cache path "
                                   "fails (a bug of the model or transformers, not of the compiler)")
    assert "static-cache path" not in check(ScriptedModel(crash=ValueError("bad")), StaticReference()).message


@pytest.mark.parametrize(("static", "ending"), [
    (IndexError("index 11 is out of bounds"), "the model's static-cache path, not the loop"),
    (None, "; model.generate with a static cache works, so the loop is at fault"),
])
def test_our_loop_failing_eagerly_is_blamed_on_whichever_fails_alone(static: Exception | None, ending: str) -> None:
    result = check(ScriptedModel(static=static), LoopCrashes())
    assert result.stage == "eager generation by scripted_loop"
    assert result.message.startswith("eager generation by scripted_loop failed") and result.message.endswith(ending)


def test_a_loop_that_drives_someone_elses_code_blames_that_code() -> None:
    """hf_et_helper's own loop runs transformers' exportable module: when it fails and generate with a static
    cache works, the fault is the module's, not our loop's."""
    level = LoopCrashes()
    level.own_loop_blame = "transformers' exportable module (integrations/executorch.py)"
    result = check(ScriptedModel(), level)
    assert result.message.endswith("; model.generate with a static cache works, so transformers' exportable module "
                                   "(integrations/executorch.py) is at fault")


def test_a_loop_that_drives_someone_elses_code_blames_that_code_for_a_difference_too() -> None:
    """roberta's exportable module numbers positions from its input ids, so fed one token a step it differs from
    generate; the loop only drives it."""
    level = FakeLevel(own_loop=DIFFERENT)
    level.own_loop = "the exportable module (one position a step)"
    level.own_loop_blame = "transformers' exportable module (integrations/executorch.py)"
    result = check(ScriptedModel(static=EAGER), level)
    assert result.outcome == "mismatch"
    assert result.message.startswith("the exportable module (one position a step) run eagerly differs from "
                                     "model.generate at row 0")
    assert result.message.endswith("so transformers' exportable module (integrations/executorch.py) is at fault")
