"""The ``while_loop`` form does what the unrolled form does: every kind of cache layer carried as loop state,
processors that read the growing sequence, EOS lists, left padding, batch 1; what it cannot do is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny, run_check
from pytest_fullgraph.core.generation import generate_fn, static_cache_config
from pytest_fullgraph.loop.decode import UnsupportedGeneration, fullgraph_generate
from pytest_fullgraph.loop.state import CarriedCache, WholeSlidingLayer, loop_cache

#: more new tokens than the tiny configs' sliding window (16): the window fills and slides inside the loop
PAST_THE_WINDOW = 20


def both_forms_equal_generate(name: str, ids: torch.Tensor, mask: torch.Tensor | None, *,
                              static_cache: bool = False, **settings: Any) -> torch.Tensor:
    """Both loop forms give ``generate``'s tokens (with a static cache, as the loops use, if ``static_cache``)."""
    model = build_tiny(name)
    config = GenerationConfig(pad_token_id=0, **settings)
    torch.manual_seed(3)
    reference = static_cache_config(config) if static_cache else config
    expected = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=reference)
    for loop in ("unrolled", "while"):
        torch.manual_seed(3)
        got = fullgraph_generate(model, ids, mask, config, loop=loop)
        assert torch.equal(got, expected), f"{name} loop={loop}: {got.tolist()} != {expected.tolist()}"
    return expected


PROMPTS = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14], [15, 16, 17, 18, 19, 20]])


@pytest.mark.parametrize("name", ["gemma2", "mamba", "qwen3_next", "falcon_h1"])
def test_sliding_recurrent_and_hybrid_layers_are_carried(name: str) -> None:
    """gemma2 (sliding and full layers, past its window), mamba (conv and SSM states), qwen3_next (linear
    attention beside full attention), falcon_h1 (hybrid layers carrying both)."""
    both_forms_equal_generate(name, PROMPTS, (PROMPTS != 0).long(), max_new_tokens=PAST_THE_WINDOW,
                              do_sample=False, eos_token_id=None)


@pytest.mark.parametrize("settings", [
    {"repetition_penalty": 1.5},
    {"min_new_tokens": 6, "eos_token_id": [1, 2, 3]},
    {"do_sample": True, "top_k": 12, "temperature": 0.8, "repetition_penalty": 1.2},
    {"forced_eos_token_id": 7, "min_length": 12},
    {"begin_suppress_tokens": [5, 6], "suppress_tokens": [9]},
], ids=["repetition_penalty", "min_new_tokens", "sampled_with_penalty", "forced_eos_min_length", "suppressed"])
def test_processors_that_read_the_sequence_see_its_valid_part(settings: dict[str, Any]) -> None:
    settings = {"do_sample": False, "eos_token_id": None, **settings}
    both_forms_equal_generate("llama", PROMPTS, (PROMPTS != 0).long(), max_new_tokens=10, **settings)


def test_repetition_penalty_really_changes_the_tokens() -> None:
    """Otherwise the test above could pass with the penalty ignored."""
    plain = both_forms_equal_generate("llama", PROMPTS, None, max_new_tokens=10, do_sample=False, eos_token_id=None)
    penalised = both_forms_equal_generate("llama", PROMPTS, None, max_new_tokens=10, do_sample=False,
                                          eos_token_id=None, repetition_penalty=3.0)
    assert not torch.equal(plain, penalised)


def test_min_new_tokens_holds_eos_back_and_eos_lists_stop_rows() -> None:
    model = build_tiny("llama")
    ids = PROMPTS[1:]
    free = generate_fn(model)(input_ids=ids, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    eos = [int(free[0, 7]), int(free[1, 9])]  # tokens the rows really emit: both stop early
    stopped = both_forms_equal_generate("llama", ids, None, max_new_tokens=8, do_sample=False, eos_token_id=eos)
    held = both_forms_equal_generate("llama", ids, None, max_new_tokens=8, do_sample=False, eos_token_id=eos,
                                     min_new_tokens=5)
    assert stopped.shape[1] < held.shape[1] or not torch.equal(stopped, held[:, :stopped.shape[1]])


def test_batch_of_one() -> None:
    both_forms_equal_generate("gemma2", PROMPTS[1:2], None, max_new_tokens=PAST_THE_WINDOW, do_sample=False,
                              eos_token_id=None)


def test_a_processor_one_traced_step_cannot_repeat_is_named() -> None:
    model = build_tiny("llama")
    # every decoder-only processor is supported; this one reads the prompt as an encoder input
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0, encoder_repetition_penalty=1.5)
    with pytest.raises(UnsupportedGeneration,
                       match=r"^loop='while' does not support EncoderRepetitionPenaltyLogitsProcessor"):
        fullgraph_generate(model, PROMPTS, None, config, loop="while")


def test_a_cache_layer_it_cannot_carry_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING, StaticLayer

    class CountsInPython(StaticLayer):
        pass

    monkeypatch.setitem(STATIC_LAYER_TYPE_MAPPING, "full_attention", CountsInPython)
    with pytest.raises(UnsupportedGeneration, match=r"cannot carry cache layer CountsInPython of LlamaForCausalLM"):
        loop_cache(build_tiny("llama"), 8)


def test_sliding_layers_keep_every_position_and_every_tensor_is_carried() -> None:
    model = build_tiny("gemma2")
    cache = loop_cache(model, 40)
    assert {type(layer).__name__ for layer in cache.layers} == {"StaticLayer", "WholeSlidingLayer"}
    assert all(layer.max_cache_len == 40 for layer in cache.layers if isinstance(layer, WholeSlidingLayer))
    model(input_ids=PROMPTS, cache=cache, use_cache=True)
    carried = CarriedCache(cache)
    assert {slot.attribute for slot in carried.slots} == {"keys", "values", "cumulative_length"}
    rebuilt = carried.rebuild(carried.tensors())
    assert rebuilt.layers[0] is not cache.layers[0] and rebuilt.layers[0].keys is not cache.layers[0].keys
    assert all(torch.equal(a, b) for a, b in zip(carried.tensors(rebuilt), carried.tensors(), strict=True))


def test_conv_states_beside_sliding_attention_with_a_relative_position_bias_are_carried() -> None:
    """inkling_text reads its layers' length for its position bias before updating the cache and uses it after,
    so the loop's sliding layer must answer as transformers' does (see the next test). Compared with a static
    cache: inkling's full static layer answers with its live counter, so its ``generate`` differs between the
    static and the default cache for these prompts (transformers' bug; the loops must use the static one).
    Within the window: past it, inkling's static-cache ``generate`` fails in its attention (its own bug too)."""
    both_forms_equal_generate("inkling_text", PROMPTS, (PROMPTS != 0).long(), static_cache=True,
                              max_new_tokens=8, do_sample=False, eos_token_id=None)


def test_a_replaced_sliding_layer_reports_its_length_as_it_was_when_asked() -> None:
    """As transformers' sliding layer does (a Python int): a model that reads the length, updates the cache and
    then uses the length (inkling's query offset) must not see the update."""
    model = build_tiny("gemma2")
    cache = loop_cache(model, 40)
    model(input_ids=PROMPTS, cache=cache, use_cache=True)
    sliding: Any = next(layer for layer in cache.layers if isinstance(layer, WholeSlidingLayer))
    asked = sliding.get_seq_length()
    sliding.update(sliding.keys[:, :, :1].clone(), sliding.values[:, :, :1].clone())
    assert (int(asked), int(sliding.get_seq_length())) == (PROMPTS.shape[1], PROMPTS.shape[1] + 1)


def test_the_while_level_is_one_graph_with_generates_tokens_past_the_window() -> None:
    result = run_check(build_tiny("gemma2"), "gemma2", "padded", "while", "eager", PAST_THE_WINDOW)
    assert (result.outcome, result.graph_count) == ("pass", 1), result.message


@pytest.mark.breadth
def test_a_model_that_breaks_is_a_break_located_in_the_model_not_an_eager_failure(toy_project: pytest.Pytester,
                                                                                  tmp_path: Path) -> None:
    """Run uncompiled, the while form runs in Python, so a model that breaks generates eagerly and its check says
    ``break`` at the compiled stage, located at the model's line: in its prefill as dynamo meets it, and inside
    the ``while_loop`` body as the higher-order op's cause (its own message ends in a colon; the break inside it
    is the news). Every break is found by the unrolled form's diagnostic pass, as the decode level does."""
    from tests.conftest import PLANTED_BREAK_LINE, STEP_BREAK_LINE, checks_by_id, read_report

    result = toy_project.runpytest("--fullgraph-models=toy_break,toy_step_break,toy", "-k", "greedy-while",
                                   "-p", "no:cacheprovider", "-rx", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, xfailed=2)
    checks = checks_by_id(read_report(tmp_path))
    for name, line in (("toy_break", PLANTED_BREAK_LINE), ("toy_step_break", STEP_BREAK_LINE)):
        check = checks[f"{name}-greedy-while"]
        assert (check["outcome"], check["stage"]) == ("break", "compiled generation")
        assert [(b["file"], b["line"]) for b in check["breaks"] if b["root_cause"]] == [("conftest.py", line)]
    prefill = checks["toy_break-greedy-while"]["first_break"]
    assert (prefill["exception"], prefill["gb_id"]) == ("torch._dynamo.exc.Unsupported", "GB0170")
    assert (prefill["file"], prefill["line"], prefill["origin"]) == ("conftest.py", PLANTED_BREAK_LINE, "user")
    body = checks["toy_step_break-greedy-while"]["first_break"]
    inside = body["cause"]
    assert body["exception"].endswith("UncapturedHigherOrderOpError") and inside is not None
    assert (inside["gb_id"], inside["file"], inside["line"]) == ("GB0170", "conftest.py", STEP_BREAK_LINE)
    assert inside["message"].startswith("Detected data-dependent branching")
    result.stdout.fnmatch_lines([f"*inside it: Data-dependent branching [[]GB0170[]] at conftest.py:"
                                 f"{STEP_BREAK_LINE} in forward (user): Detected data-dependent branching*"])


def test_a_model_that_fails_eagerly_is_its_own_failure_at_the_while_level() -> None:
    """cpmant's static cache writes one slot past its end, in generate too: an error of the eager stage, blamed
    on the model's static-cache path, not a break."""
    result = run_check(build_tiny("cpmant"), "cpmant", "greedy", "while", "eager", 4)
    assert (result.outcome, result.stage) == ("error", "eager generation by fullgraph_generate(loop='while')")
    assert "IndexError" in result.message
    assert result.message.endswith("the model's static-cache path, not the loop")


class _RoutingState:
    """What the ``kernels`` package's context variable does while compiling: a global object's attribute written
    around every call of a decorated module."""

    def __init__(self) -> None:
        self.active: dict[str, Any] | None = None


class _ReferenceFunction:
    """A kernel function of a module, not kernelized: its instance has no ``forward`` of its own."""


def _compiled(function: Any) -> Any:
    """The while form captured by dynamo (uncompiled, its body runs in Python), from a fresh dynamo: a worker's
    earlier compiles of other shapes would make this one's sizes dynamic, and the ``while_loop`` then takes the
    attention scale as a ``SymFloat`` input, which it refuses (a second request's recompile: issue #45)."""
    torch._dynamo.reset()
    return torch.compile(function, fullgraph=True, backend="eager")


def _route_like_kernels(monkeypatch: pytest.MonkeyPatch, model: Any) -> Any:
    """Decorate llama's attention as transformers 5.25 does with ``kernels.use_kernelized_func``: a ``forward``
    named ``new_forward`` that writes the routing state around the real one, and ``_kernel_funcs`` per instance."""
    import functools

    from transformers.models.llama.modeling_llama import LlamaAttention

    state = _RoutingState()
    original = LlamaAttention.forward

    def new_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        previous, state.active = state.active, {"rotary": self}
        try:
            return original(self, *args, **kwargs)
        finally:
            state.active = previous

    monkeypatch.setattr(LlamaAttention, "forward", functools.wraps(original)(new_forward))
    for module in model.modules():
        if isinstance(module, LlamaAttention):
            vars(module).setdefault("_kernel_funcs", {})["rotary"] = _ReferenceFunction()  # 5.25 has some
    return LlamaAttention


def test_a_kernel_routing_wrapper_is_lifted_for_the_while_form_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers 5.25's attention wrapper broke every model's while form (an unsafe side effect in the body)."""
    model = build_tiny("llama")
    attention = _route_like_kernels(monkeypatch, model)
    wrapper = attention.forward
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    expected = generate_fn(model)(input_ids=PROMPTS, generation_config=config)
    assert torch.equal(fullgraph_generate(model, PROMPTS, None, config, loop="while", compiler=_compiled), expected)
    assert attention.forward is wrapper


def test_without_lifting_the_routing_wrapper_the_while_form_cannot_capture_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake above reproduces 5.25's failure, so the test before it can fail."""
    import contextlib

    from pytest_fullgraph.loop import tracing as loop_tracing

    model = build_tiny("llama")
    _route_like_kernels(monkeypatch, model)
    monkeypatch.setattr(loop_tracing, "kernel_routing_lifted", lambda model, loop: contextlib.nullcontext())
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=None)
    with pytest.raises(Exception, match="side effect"):
        fullgraph_generate(model, PROMPTS, None, config, loop="while", compiler=_compiled)


def test_a_kernelized_function_is_named_not_silently_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    model = build_tiny("llama")
    _route_like_kernels(monkeypatch, model)
    for module in model.modules():
        if "_kernel_funcs" in vars(module):
            vars(module)["_kernel_funcs"]["rotary"].forward = lambda *args: args  # what kernels.kernelize() sets
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=None)
    with pytest.raises(UnsupportedGeneration, match=r"cannot run LlamaAttention with kernels.kernelize\(\)'d "
                                                    r"functions \(rotary\)"):
        fullgraph_generate(model, PROMPTS, None, config, loop="while")


#: One model per layer class the while form carries (the scan of every model type's static cache, 5.24).
CARRIED_LAYER_MODELS = ("llama", "gemma2", "glm_moe_dsa", "mamba", "falcon_h1", "inkling_text", "nemotron_h")


def test_the_carried_attribute_lists_cover_every_tensor_a_layer_holds_after_prefill() -> None:
    """The loop state names what it carries (torch 2.11's dynamo cannot list an object's attributes): a tensor
    or dict a transformers release adds to a layer must be named too, or this fails."""
    from pytest_fullgraph.loop import state as loop_state

    named_tensors = set(loop_state.CARRIED_TENSORS)
    named_dicts = set(loop_state.CARRIED_TENSOR_DICTS) | set(loop_state.STEP_DICTS)
    seen: set[str] = set()
    for name in CARRIED_LAYER_MODELS:
        model = build_tiny(name)
        cache = loop_cache(model, max_cache_len=12)
        with torch.no_grad():
            model(input_ids=PROMPTS, attention_mask=torch.ones_like(PROMPTS), cache=cache, use_cache=True)
        for layer in cache.layers:
            seen.add(type(layer).__name__)
            for attribute, value in vars(layer).items():
                holds_tensors = isinstance(value, dict) and any(isinstance(v, torch.Tensor) for v in value.values())
                if isinstance(value, torch.Tensor):
                    assert attribute in named_tensors, f"{name}: {type(layer).__name__}.{attribute} is not carried"
                elif holds_tensors:
                    assert attribute in loop_state.CARRIED_TENSOR_DICTS, f"{name}: {attribute} is not carried"
                elif isinstance(value, dict):
                    assert attribute in named_dicts, f"{name}: {type(layer).__name__}.{attribute} is shared"
    assert seen == set(loop_state.CARRIED_LAYERS), f"a carried layer class has no model here: {seen}"


def test_a_stand_in_reads_through_and_writes_to_itself() -> None:
    """What ``copy.copy`` gave the step, in a form torch 2.11 can trace: the original is never written."""
    from pytest_fullgraph.loop import tracing as loop_tracing

    original = WholeSlidingLayer(max_cache_len=4)
    stand_in = loop_tracing.view(original)
    stand_in.max_cache_len = 9
    assert (stand_in.max_cache_len, original.max_cache_len) == (9, 4)
    assert isinstance(stand_in, WholeSlidingLayer) and type(stand_in).__name__ == "WholeSlidingLayer"
    assert stand_in.get_seq_length() == 0  # a method, and a read through to the original's state


def test_the_idle_collector_writes_nothing_unless_outputs_are_asked_for() -> None:
    """torch 2.11 refuses the collector's writes inside the while body; an empty collection needs none."""
    from transformers.utils import output_capturing

    from pytest_fullgraph.loop import tracing as loop_tracing

    original = output_capturing._active_collector
    with loop_tracing.output_collector_idle("while"):
        idle = output_capturing._active_collector
        token = idle.set({})
        assert (idle.get(), original.global_var, original.compiling) == (None, None, False)
        idle.reset(token)
        asked = idle.set({"hidden_states": []})  # a forward that collects goes to the real collector
        assert original.get() == {"hidden_states": []}
        idle.reset(asked)
        assert original.get() is None
    assert output_capturing._active_collector is original
    with loop_tracing.output_collector_idle("unrolled"):
        assert output_capturing._active_collector is original


@pytest.mark.parametrize("shim", [True, False], ids=["python_min_max", "without_it"])
def test_an_export_that_replaces_min_still_exports_the_while_form(monkeypatch: pytest.MonkeyPatch, shim: bool) -> None:
    """torch 2.9's non-strict export swaps builtins.min/max for a wrapper dynamo refuses inside the while body
    (top-k calls ``min``). Emulated here with a wrapper dynamo cannot trace; without the shim it breaks."""
    import builtins
    import contextlib

    from pytest_fullgraph.loop import tracing as loop_tracing
    from pytest_fullgraph.loop.decode import export_generate

    if not shim:
        monkeypatch.setattr(loop_tracing, "python_min_max", contextlib.nullcontext)
    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=4, do_sample=True, top_k=12, pad_token_id=0, eos_token_id=None)
    torch.manual_seed(3)
    expected = generate_fn(model)(input_ids=PROMPTS, attention_mask=(PROMPTS != 0).long(), generation_config=config)
    monkeypatch.setattr(builtins, "min", torch._dynamo.disable(builtins.min))  # what the body must not meet
    if not shim:
        with pytest.raises(Exception, match="captured completely"):
            export_generate(model, PROMPTS, (PROMPTS != 0).long(), config, loop="while")
        return
    program = export_generate(model, PROMPTS, (PROMPTS != 0).long(), config, loop="while")
    monkeypatch.undo()
    torch.manual_seed(3)
    assert torch.equal(program(PROMPTS, (PROMPTS != 0).long()), expected)
