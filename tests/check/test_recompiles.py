"""The second request (``check.variations``): a passing check's compiled object called again, each call's recompile
named by its guard and where that guard was installed; a recompile the level promises not to make fails the check.

Dynamo's words are read from what torch 2.13 says (``core.guards``); the decision tree runs on the scripted model;
one pytester run plants a model that branches on the prompt length under a level that promises every prompt length.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import torch
from transformers import LlamaForCausalLM

from pytest_fullgraph import report
from pytest_fullgraph.check.run import run_check
from pytest_fullgraph.core.guards import guards_from_refusal, is_recompile_refusal
from pytest_fullgraph.core.recompiles import Guard, Variation
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.levels.base import has_sliding_cache
from pytest_fullgraph.levels.builtin import LOOP_REQUESTS
from pytest_fullgraph.models.build import build_tiny
from pytest_fullgraph.report.html import html
from tests.check.scripted import DIFFERENT, EAGER, FakeLevel, ScriptedModel, check
from tests.conftest import TOY_CONFTEST, checks_by_id, read_report

HEADER = ("Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: '/x/loop.py', function "
          "name: 'decode_while_loop', line number: 125\n    triggered by the following guard failure(s):\n")
#: A value guard: its condition's site after the source, then the user stack (torch 2.13's words, stack cut).
VALUE_GUARD = HEADER + (
    "    - 0/0: cache.layers[0].max_cache_len == 11                      # if (padding_length := kv_length + "
    "kv_offset - attention_mask.shape[-1]) > 0:  # transformers/masking_utils.py:229 in prepare_padding_mask\n"
    "    - User stack trace:\n"
    '    -   File "/x/loop.py", line 142, in decode_while_loop\n'
    "    -     logits = model(input_ids=input_ids)\n")
#: A shape guard of two conditions: torch's 0/1 specialization where the size was first used, then the model's own
#: branch (its path cut to its last characters, and its own comment inside the source).
SHAPE_GUARD = HEADER + (
    "    - 0/0: 2 <= kwargs['input_ids'].size()[1] <= 9  # if len(attention_mask.shape) == 4:  # "
    "transformers/masking_utils.py:818 in _preprocess_mask_arguments (user code shown is first use of this value--"
    "the guard itself is not due user code but due to 0/1 specialization in the framework; to avoid specialization "
    "try torch._dynamo.decorators.mark_unbacked(tensor, dim)) and if kwargs[\"input_ids\"].shape[1] > 9:  # planted "
    "# mine/model.py:10 in forward (_dynamo/variables/tensor.py:2606 in evaluate_expr)\n")
#: Guards on the frame's inputs, one per cache entry (the same guard twice), and one on a cache passed in.
INPUT_GUARDS = HEADER + ("    - 0/1: tensor 'input_ids' size mismatch at index 0. expected 2, actual 3\n"
                         "    - 0/0: tensor 'input_ids' size mismatch at index 0. expected 2, actual 3\n"
                         "    - 0/0: tensor 'kwargs['cache'].layers[0].keys' size mismatch at index 2. expected 11, "
                         "actual 14\n")


def test_a_value_guard_is_located_where_the_value_was_read_and_blamed_by_that_code() -> None:
    [guard] = guards_from_refusal(VALUE_GUARD)
    assert (guard.guard, guard.where(), guard.function, guard.origin, guard.on_input) == (
        "cache.layers[0].max_cache_len == 11", "transformers/masking_utils.py:229", "prepare_padding_mask", "masking",
        False)
    assert "padding_length" in guard.source  # the statement, read from the installed transformers


def test_a_shape_guard_is_located_at_the_codes_own_condition_not_torchs_specialization() -> None:
    [guard] = guards_from_refusal(SHAPE_GUARD)
    assert (guard.guard, guard.file, guard.line, guard.function) == (
        "2 <= kwargs['input_ids'].size()[1] <= 9", "mine/model.py", 10, "forward")
    assert guard.origin == "user" and not guard.on_input


def test_an_input_guard_is_located_at_the_compiled_frame_once_and_a_cache_input_is_the_caches() -> None:
    found = guards_from_refusal(INPUT_GUARDS)
    assert [(guard.guard, guard.where(), guard.on_input) for guard in found] == [
        ("tensor 'input_ids' size mismatch at index 0. expected 2, actual 3", "/x/loop.py:125", True),
        ("tensor 'kwargs['cache'].layers[0].keys' size mismatch at index 2. expected 11, actual 14", "/x/loop.py:125",
         True)]
    assert found[1].origin == "cache"


def test_a_refusal_that_names_no_guard_keeps_its_first_line() -> None:
    [guard] = guards_from_refusal(HEADER.splitlines()[0])
    assert guard.guard.startswith("Detected recompile") and guard.where() == "/x/loop.py:125"
    assert is_recompile_refusal(RuntimeError(VALUE_GUARD)) and not is_recompile_refusal(ValueError(VALUE_GUARD))


class AgainLevel(FakeLevel):
    """A scripted level with second requests: ``answers`` says what each variation's call gives."""

    variations = ("same_shape", "prompt_length", "batch_size")
    no_recompile = ("same_shape",)

    def __init__(self, answers: dict[int, torch.Tensor | Exception], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answers, self.calls = answers, 0

    def run_again(self, model: Any, inputs: dict[str, Any], config: Any, backend: Any) -> torch.Tensor:
        answer = self.answers.get(int(inputs["input_ids"].shape[1]) * 10 + int(inputs["input_ids"].shape[0]), EAGER)
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


SAME, LONGER, WIDER = 82, 112, 83  # prompt width * 10 + batch: same shapes, 3 tokens longer, one more row


def test_a_recompile_the_level_does_not_promise_against_is_reported_and_the_pass_stands() -> None:
    result = check(ScriptedModel(), AgainLevel({LONGER: RuntimeError(VALUE_GUARD), WIDER: ValueError("no kernel")}))
    assert result.outcome == "pass"
    assert [(v.name, v.result, v.promised) for v in result.variations] == [
        ("same_shape", "equal", True), ("prompt_length", "recompiled", False), ("batch_size", "failed", False)]
    assert result.variations[1].guards[0].where() == "transformers/masking_utils.py:229"
    assert result.variations[2].detail == "ValueError: no kernel"
    assert result.message.endswith("; called again 3 time(s): 1 would recompile")


def test_a_promised_variation_that_recompiles_fails_the_check_as_a_break_at_its_guard() -> None:
    result = check(ScriptedModel(), AgainLevel({SAME: RuntimeError(SHAPE_GUARD)}))
    assert result.outcome == "break"
    assert result.message.startswith("recompiles on same_shape (other prompt tokens, same shapes), which level 'fake' "
                                     "promises to serve without recompiling: `2 <= kwargs['input_ids'].size()[1] "
                                     "<= 9` (installed at mine/model.py:10, user)")
    assert result.first_break is not None and (result.first_break.where(), result.first_break.origin) == (
        "mine/model.py:10", "user")


def test_tokens_that_differ_without_a_recompile_are_a_mismatch_naming_the_call() -> None:
    result = check(ScriptedModel(), AgainLevel({LONGER: DIFFERENT}))
    assert result.outcome == "mismatch" and result.mismatch is not None
    assert result.message.startswith("called again with prompt width 8 -> 11 (no recompile), the compiled fake gives "
                                     "tokens that differ from eager at row 0, position 10")


class LoopDiffersAgain(AgainLevel):
    """A loop of its own that gives eager's tokens on the check's inputs, and other tokens on any later inputs."""

    def run_own_loop_eagerly(self, model: Any, inputs: dict[str, Any], config: Any) -> torch.Tensor | None:
        self.eager_runs = getattr(self, "eager_runs", 0) + 1
        return EAGER if self.eager_runs == 1 else DIFFERENT


def test_a_second_requests_difference_says_whether_the_loop_run_eagerly_gives_it_too() -> None:
    """As a first call's mismatch: the level's loop run eagerly on the second request's inputs tells the compiled
    program's difference from the loop's (or the model's cache path's)."""
    compiled_only = check(ScriptedModel(), AgainLevel({SAME: DIFFERENT}, own_loop=EAGER)).message
    assert "(no recompile), the compiled fake gives tokens that differ from eager at row 0, position 10 (new token " \
           "2): eager 12, compiled 99" in compiled_only
    assert compiled_only.endswith("; scripted_loop run eagerly on these inputs gives model.generate's tokens: the "
                                  "compiled program differs from the loop it compiled")
    the_loops = check(ScriptedModel(static=EAGER), LoopDiffersAgain({SAME: DIFFERENT}, own_loop=EAGER)).message
    assert "; scripted_loop run eagerly on these inputs differs too, at row 0, position 10 (new token 2): eager 12, " \
           "scripted_loop 99" in the_loops
    assert the_loops.endswith("; model.generate with a static cache gives the default tokens, so the loop is at fault")
    without_a_loop = check(ScriptedModel(), AgainLevel({SAME: DIFFERENT})).message
    assert "compiled 99" in without_a_loop and "run eagerly" not in without_a_loop


def test_with_recompiles_off_and_after_a_failure_the_object_is_not_called_again() -> None:
    level = AgainLevel({})
    assert check(ScriptedModel(), level, recompiles=False).variations == [] and level.calls == 0
    assert check(ScriptedModel(), AgainLevel({}, compiled=DIFFERENT)).variations == []


def test_variations_travel_in_the_report_and_are_listed_by_guard_site(tmp_path: Path) -> None:
    guard = Guard("cache.layers[0].max_cache_len == 11", "transformers/masking_utils.py", 229, "prepare_padding_mask",
                  "if padding:", "masking")
    results = [CheckResult(model, "greedy", "while", "eager", 4, "pass", variations=[
        Variation("same_shape", "other prompt tokens, same shapes", "equal", promised=True),
        Variation("prompt_length", "prompt width 8 -> 11", "recompiled", guards=[guard])]) for model in ("a", "b")]
    written = report.Report({"recompiles": "on"}, results)
    report.write(written, tmp_path)
    read = report.load(tmp_path / report.JSON_NAME)
    assert read.checks[0].variations == results[0].variations
    page = report.markdown(read)
    assert "| same_shape | 2 equal |" in page and "| prompt_length | 2 recompiled |" in page
    assert ("| `transformers/masking_utils.py:229` (prepare_padding_mask)<br>`if padding:` | "
            "`cache.layers[0].max_cache_len == 11` | masking | prompt_length | a, b | 2 |") in page
    assert "  transformers/masking_utils.py:229 [masking] `cache.layers[0].max_cache_len == 11` on prompt_length " \
           "in 2 check(s): a, b" in report.terminal_lines(read)
    assert "<h2>Recompiles</h2>" in html(read)


def test_a_loop_levels_second_requests_name_the_guards_of_transformers_and_of_the_loop() -> None:
    result = run_check(build_tiny("llama"), "llama", "greedy", "decode", "eager", 2)
    assert result.outcome == "pass", result.message
    found = {variation.name: variation for variation in result.variations}
    assert list(found) == list(LOOP_REQUESTS)
    assert (found["same_shape"].result, found["same_shape"].promised) == ("equal", True)
    assert [(guard.where(), guard.origin) for guard in found["prompt_length"].guards] == [
        ("transformers/masking_utils.py:229", "masking")]
    assert found["settings"].guards[0].origin == "loop"  # the plan's EOS id is a Python value of the loop's
    assert found["batch_size"].guards[0].on_input


def test_the_while_level_serves_a_longer_prompt_without_recompiling_as_it_promises() -> None:
    result = run_check(build_tiny("llama"), "llama", "padded", "while", "eager", 2)
    assert result.outcome == "pass", result.message
    found = {variation.name: variation for variation in result.variations}
    assert (found["prompt_length"].result, found["prompt_length"].promised) == ("equal", True)
    assert found["batch_size"].result == "recompiled" and not found["batch_size"].promised


class CountsSteps(LlamaForCausalLM):
    """Keeps a Python counter of its forwards and reads it: transformers' compiled forward recompiles every step."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.steps = getattr(self, "steps", 0) + 1  # planted: a Python counter the compiled forward is guarded on
        out = super().forward(*args, **kwargs)
        if self.steps > 1000:
            out.logits = out.logits * 1.0
        return out


def test_hitting_dynamos_recompile_limit_is_an_error_located_at_the_last_guard() -> None:
    model = build_tiny("llama", model_class=cast(Any, CountsSteps))
    with torch._dynamo.config.patch(recompile_limit=2):
        result = run_check(model, "counts", "greedy", "forward", "eager", 6)
    assert result.outcome == "error"
    assert result.message.startswith("dynamo's recompile limit (torch._dynamo.config.recompile_limit=2) was hit with "
                                     "fullgraph=True after ")
    assert "the last guard that failed: `self.steps == " in result.message
    assert result.first_break is not None and result.first_break.where().endswith(
        f"tests/check/test_recompiles.py:{_line_of('planted: a Python counter')}")
    assert result.first_break.origin == "user"


def test_a_recompile_within_the_forward_levels_own_generation_breaks_it_at_the_guard_as_transformers_test() -> None:
    result = run_check(build_tiny("llama", model_class=cast(Any, CountsSteps)), "counts", "greedy", "forward",
                       "eager", 3, recompiles=False)
    assert result.outcome == "break", result.message
    assert result.message.startswith("recompiled 1 time(s) within the generation, which transformers' compile test "
                                     "fails for a cache without sliding layers: `self.steps == ")
    assert result.first_break is not None and result.first_break.where().endswith(
        f"tests/check/test_recompiles.py:{_line_of('planted: a Python counter')}")


def test_a_cache_with_sliding_layers_may_recompile_in_the_forward_level_as_transformers_test_lets_it() -> None:
    assert has_sliding_cache(build_tiny("gemma2")) and not has_sliding_cache(build_tiny("llama"))
    result = run_check(build_tiny("gemma2"), "gemma2", "greedy", "forward", "eager", 4, recompiles=False)
    assert (result.outcome, result.recompiles > 0) == ("pass", True), result.message


def test_a_chunked_prefill_recompiles_the_forward_level_per_chunk_width_and_is_reported_not_failed() -> None:
    result = run_check(build_tiny("llama"), "llama", "prefill_chunk", "forward", "eager", 2, recompiles=False)
    assert (result.outcome, result.recompiles > 0) == ("pass", True), result.message
    assert "size mismatch at index 1" in result.recompile_reasons[0]


def _doubles(x: torch.Tensor) -> torch.Tensor:  # a frame compiled with static shapes
    return x * 2


def test_a_recompile_within_a_run_is_located_at_the_frame_dynamo_recompiled() -> None:
    from pytest_fullgraph.core.compile_events import capture_compile_events
    from pytest_fullgraph.core.guards import frame_at, guard_from_reason

    torch._dynamo.reset()
    compiled = torch.compile(_doubles, backend="eager", dynamic=False)
    with capture_compile_events() as trace:
        compiled(torch.ones(2))
        compiled(torch.ones(3))
    assert len(trace.recompile_reasons) == len(trace.recompile_frames) == 1
    assert trace.recompile_frames[0] == (__file__, _line_of("a frame compiled with static shapes"), "_doubles")
    frame = trace.recompile_frames[0]
    assert frame is not None
    guard = guard_from_reason(trace.recompile_reasons[0], frame_at(*frame))
    assert guard.on_input and guard.where().endswith(
        f"tests/check/test_recompiles.py:{_line_of('a frame compiled with static shapes')}")
    assert guard.origin == "user"


def _line_of(text: str) -> int:
    return next(number for number, line in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text in line and "_line_of" not in line)


#: A model that branches on its prompt's length, and a level that compiles the forward over the prompt with that
#: length dynamic and promises every length: the planted branch's guard breaks the promise.
PROMPT_BRANCH = '''

class BranchesOnPromptLength(LlamaForCausalLM):
    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        if kwargs["input_ids"].shape[1] > 9:  # planted: branches on the prompt length
            out.logits = out.logits * 1.0
        return out


register_model("toy_prompt_branch", lambda: build_tiny("llama", model_class=BranchesOnPromptLength))


from pytest_fullgraph.levels.base import Level


class PrefillLevel(Level):
    name = "prefill"
    description = "the forward over the prompt, its length dynamic, compiled: one new token"
    variations = ("same_shape", "prompt_length")
    no_recompile = ("same_shape", "prompt_length")

    def max_new_tokens(self, run_tokens):
        return 1

    def run_compiled(self, model, inputs, config, backend):
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        torch._dynamo.maybe_mark_dynamic(ids, 1)
        torch._dynamo.maybe_mark_dynamic(mask, 1)
        forward = torch.compile(model, fullgraph=True, backend=backend)
        logits = forward(input_ids=ids, attention_mask=mask, use_cache=False).logits
        return torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=-1)


def pytest_fullgraph_register_levels(levels):
    levels.add(PrefillLevel())
'''
PLANTED_LINE = next(number for number, line in enumerate((TOY_CONFTEST + PROMPT_BRANCH).splitlines(), 1)
                    if "planted: branches on the prompt length" in line)


def test_a_planted_branch_on_the_prompt_length_is_named_and_breaks_a_level_promising_every_length(
        pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The broken promise is a break of the user's code: an xfail, failed with --fullgraph-strict as any such break
    (``tests/plugin/test_verdict.py``)."""
    pytester.makeconftest(TOY_CONFTEST + PROMPT_BRANCH)
    result = pytester.runpytest("--fullgraph-models=toy,toy_prompt_branch", "--fullgraph-levels=prefill",
                                "--fullgraph-scenarios=greedy", "-k", "prefill", "-p", "no:cacheprovider",
                                f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, xfailed=1)
    checks = checks_by_id(read_report(tmp_path))
    kept = {variation["name"]: variation["result"] for variation in checks["toy-greedy-prefill"]["variations"]}
    assert kept == {"same_shape": "equal", "prompt_length": "equal"}  # the promise holds where nothing branches
    broken = checks["toy_prompt_branch-greedy-prefill"]
    assert broken["outcome"] == "break"
    assert broken["message"].startswith("recompiles on prompt_length (prompt width 8 -> 11), which level 'prefill' "
                                        "promises to serve without recompiling: `2 <= kwargs['input_ids'].size()[1] "
                                        f"<= 9` (installed at conftest.py:{PLANTED_LINE}, user)")
    assert broken["first_break"]["source"].endswith("# planted: branches on the prompt length")
    assert (f"  conftest.py:{PLANTED_LINE} [user] `2 <= kwargs['input_ids'].size()[1] <= 9` on prompt_length in 1 "
            "check(s): toy_prompt_branch") in result.stdout.lines
