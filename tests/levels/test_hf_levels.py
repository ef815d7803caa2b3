"""transformers' own export paths as levels (opt-in, ``--fullgraph-levels=hf_*``): its exporters' programs in a
host loop fed as ``generate`` feeds the forward, and its ExecuTorch helper as users call it."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

from pytest_fullgraph import build_tiny, run_check
from pytest_fullgraph.check.inputs import generation_config, make_inputs
from pytest_fullgraph.check.scenarios import SCENARIOS
from pytest_fullgraph.core.generation import static_cache_config
from pytest_fullgraph.levels.hf_export import CheckedRunner, fresh_cache, generate_steps, host_loop, spec_differences


def test_the_host_loop_over_the_eager_forward_is_generates_and_a_wrong_step_shows() -> None:
    """The reference loop itself: fed as generate feeds the forward, the eager model gives generate's tokens;
    a forward that feeds one step wrongly (a position off by one) does not, so a passing level means something."""
    model = build_tiny("llama")
    scenario = SCENARIOS["padded"]
    inputs = make_inputs(model, scenario)
    config = static_cache_config(generation_config(scenario, 4, None, {}))
    recorded = generate_steps(model, inputs, config)
    assert torch.equal(host_loop(model, model, recorded, fresh_cache(recorded)), recorded.sequences)

    def off_by_one(**step: Any) -> Any:
        return model(**{**step, "position_ids": step["position_ids"] + 1})

    assert not torch.equal(host_loop(model, off_by_one, recorded, fresh_cache(recorded)), recorded.sequences)


def test_transformers_dynamo_exporter_gives_generates_tokens_on_a_padded_batch() -> None:
    result = run_check(build_tiny("llama"), "llama", "padded", "hf_dynamo", "aot_eager", 4)
    assert (result.outcome, result.message) == ("pass", "tokens equal to eager"), result.message


def test_the_executorch_helper_is_a_mismatch_blamed_on_its_position_feed() -> None:
    """TorchExportableModuleWithStaticCache.generate feeds the first new token one position past the prompt's
    last; the same exported program fed the right positions gives generate's tokens (transformers 5.24)."""
    result = run_check(build_tiny("llama"), "llama", "greedy", "hf_et_helper", "aot_eager", 4)
    assert result.outcome == "mismatch", result.message
    assert result.mismatch is not None and result.mismatch.position >= 1  # the first new token is still right
    assert "the helper's loop is at fault" in result.message and "cache_position P+1" in result.message


def test_a_helper_that_feeds_the_right_positions_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict above is the helper's, not the level's: a helper with the right positions passes."""
    from transformers.integrations import executorch

    from pytest_fullgraph.levels import hf as hf_levels

    def right(program: Any, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        return hf_levels._positions_loop(program.module(), prompt, new_tokens)

    monkeypatch.setattr(executorch.TorchExportableModuleWithStaticCache, "generate", staticmethod(right))
    result = run_check(build_tiny("llama"), "llama", "greedy", "hf_et_helper", "aot_eager", 4)
    assert result.outcome == "pass", result.message


@pytest.mark.parametrize(("model", "level", "scenario", "reason"), [
    ("llama", "hf_dynamo", "sample", "is checked with greedy decoding"),
    ("llama", "hf_dynamo", "repetition_penalty", "repetition_penalty would be the host loop's logits processing"),
    ("llama", "hf_et_helper", "padded", "takes no attention mask"),
    ("llama", "hf_et_helper", "eos", "has no EOS stop"),
    # no cache, so no prefill and decode to export (it read "the loop is at fault")
    ("openai-gpt", "hf_dynamo", "greedy", "OpenAIGPTLMHeadModel.forward (transformers/models/openai/"),
])
def test_what_a_path_cannot_do_is_a_skip_saying_why(model: str, level: str, scenario: str, reason: str) -> None:
    result = run_check(build_tiny(model), model, scenario, level, "aot_eager", 4)
    assert result.outcome == "skip" and reason in result.message, result.message


def test_an_exporter_that_makes_no_prefill_and_decode_programs_is_a_skip_naming_what_it_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """gemma3's multimodal class: transformers' exporters made other components, and the check read "KeyError:
    'prefill'" with no place."""
    from types import SimpleNamespace

    from transformers.exporters import AutoHfExporter

    exporter = SimpleNamespace(export_for_generation=lambda *args, **kwargs: SimpleNamespace(runners={"vision": None}))
    monkeypatch.setattr(AutoHfExporter, "from_config", classmethod(lambda cls, config: exporter))
    result = run_check(build_tiny("llama"), "llama", "greedy", "hf_dynamo", "aot_eager", 4)
    assert result.outcome == "skip", result.message
    assert result.message.endswith("transformers' exporter made no 'prefill' or 'decode' program for LlamaForCausalLM "
                                   "(it made: 'vision')")


@pytest.mark.parametrize(("level", "extra", "package"), [("hf_onnx", "onnx", "onnxscript"),
                                                         ("hf_executorch", "executorch", "executorch"),
                                                         ("hf_openvino", "openvino", "openvino")])
def test_without_its_extra_a_level_is_a_skip_naming_it(level: str, extra: str, package: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else found(name, *a))
    result = run_check(build_tiny("llama"), "llama", "greedy", level, "aot_eager", 4)
    assert result.outcome == "skip", result.message
    assert f"needs {package}" in result.message or package in result.message
    assert f"pip install 'pytest_fullgraph[{extra}]'" in result.message



HAS = {name: importlib.util.find_spec(name) is not None
       for name in ("onnxruntime", "onnxscript", "executorch", "openvino")}


@pytest.mark.skipif(not (HAS["onnxruntime"] and HAS["onnxscript"]), reason="needs pytest_fullgraph[onnx]")
def test_transformers_onnx_exporter_run_by_onnxruntime_gives_generates_tokens_on_a_padded_batch() -> None:
    result = run_check(build_tiny("llama"), "llama", "padded", "hf_onnx", "aot_eager", 4)
    assert (result.outcome, result.message) == ("pass", "tokens equal to eager"), result.message


@pytest.mark.breadth
@pytest.mark.skipif(not HAS["openvino"], reason="needs pytest_fullgraph[openvino]")
def test_transformers_openvino_exporter_run_by_openvino_gives_generates_tokens_on_a_padded_batch() -> None:
    """Converted with stateful=False (the cache in and out, as the host loop feeds it), about 10 s on 2 cores."""
    result = run_check(build_tiny("llama"), "llama", "padded", "hf_openvino", "aot_eager", 4)
    assert (result.outcome, result.message) == ("pass", "tokens equal to eager"), result.message


@pytest.mark.breadth
@pytest.mark.skipif(not HAS["executorch"], reason="needs pytest_fullgraph[executorch]")
def test_transformers_executorch_exporter_run_by_executorch_gives_generates_tokens() -> None:
    """XNNPACK-lowered prefill and decode programs in ExecuTorch's runtime, about 30 s to lower on 2 cores."""
    result = run_check(build_tiny("llama"), "llama", "eos", "hf_executorch", "aot_eager", 4)
    assert (result.outcome, result.message) == ("pass", "tokens equal to eager"), result.message


def test_the_exporters_cache_is_sized_by_a_fixed_length_layer_wherever_it_is() -> None:
    """A hybrid model's cache may start with a linear-attention layer (bailing_hybrid, bamba): our level, not the
    exporter, must find the length, or say in one line that there is none."""
    from types import SimpleNamespace

    from pytest_fullgraph.core.generation import UnsupportedGeneration
    from pytest_fullgraph.levels.hf import _cache_length

    class LinearAttentionLayer:
        pass

    hybrid = SimpleNamespace(layers=[LinearAttentionLayer(), SimpleNamespace(max_cache_len=12)])
    assert _cache_length(hybrid) == 12
    lacking = r"\(SimpleNamespace, layers LinearAttentionLayer\) has no layer of a fixed length"
    with pytest.raises(UnsupportedGeneration, match=lacking):
        _cache_length(SimpleNamespace(layers=[LinearAttentionLayer()]))


@pytest.mark.parametrize(("dynamo", "ending"), [
    ("same", "give generate's tokens in the same loop: the ONNX conversion or ONNX Runtime is at fault"),
    ("other", "differ in the same loop too: the exported program is at fault, before the ONNX conversion or ONNX "
              "Runtime"),
    (ValueError("Trying to flatten user inputs\nmore"), "fail in the same loop (ValueError: Trying to flatten user "
                                                          "inputs), so the ONNX conversion or ONNX Runtime cannot be "
                                                          "told from torch.export's program"),
])
def test_a_back_ends_mismatch_is_told_from_torch_exports_program_by_the_dynamo_back_ends_tokens(
        dynamo: str | Exception, ending: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same prefill and decode, exported by the dynamo back end and run in the same loop, say which is at fault."""
    from pytest_fullgraph.levels import hf as hf_levels

    eager = torch.tensor([[1, 2, 3]])

    def exported_loop(self: Any, model: Any, inputs: Any, config: Any, refit: bool = False) -> Any:
        assert refit  # fed as the converted programs are: the cache's tensors under the exported spec
        if isinstance(dynamo, Exception):
            raise dynamo
        return lambda: eager if dynamo == "same" else torch.tensor([[1, 2, 4]])

    monkeypatch.setattr(hf_levels.HfDynamoLevel, "exported_loop", exported_loop)
    assert hf_levels.HfOnnxLevel().mismatch_cause(None, {}, None, eager).endswith(ending)  # type: ignore[arg-type]
    assert hf_levels.HfDynamoLevel().mismatch_cause(None, {}, None, eager) == ""  # type: ignore[arg-type]


class Layer:
    """A cache layer as transformers' exporter flattens one: tensors as leaves, Python values in the context."""

    def __init__(self, keys: torch.Tensor, length: int) -> None:
        self.keys, self.length = keys, length


torch.utils._pytree.register_pytree_node(
    Layer, lambda layer: ([layer.keys], {"p": "tests:Layer", "s": {"keys": {"_t": "tensor", "i": 0},
                                                                     "length": layer.length}}),
    lambda leaves, context: Layer(next(iter(leaves)), context["s"]["length"]))


def a_spec(*lengths: int) -> Any:
    return torch.utils._pytree.tree_flatten([Layer(torch.zeros(1), n) for n in lengths])[1]


def test_spec_differences_name_each_changed_python_value_once_by_class_and_field() -> None:
    assert spec_differences(a_spec(8, 8), a_spec(8, 8)) == []
    assert spec_differences(a_spec(8, 8), a_spec(9, 9)) == ["Layer.length 8 at export, 9 now"]
    assert spec_differences(a_spec(8), a_spec(8, 8)) == ["2 children where 1 were exported"]


def test_a_runner_refusing_the_cache_gets_a_note_and_with_refit_is_fed_the_exported_spec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner checks the cache's spec as transformers' dynamo and ExecuTorch runners do; the refusal keeps its
    own exception (and site) with the differing values noted; refit feeds the same tensors under the exported spec."""
    from pytest_fullgraph.levels import hf_export

    exported = a_spec(8)
    monkeypatch.setattr(hf_export, "_exported_cache_spec", lambda runner: exported)

    def strict_runner(**kwargs: Any) -> Any:
        leaves, spec = torch.utils._pytree.tree_flatten(kwargs["cache"])
        if spec != exported:
            raise ValueError("Trying to flatten user inputs with exported input tree spec:\n...")
        return leaves[0]

    stepped = [Layer(torch.ones(1), 9)]
    with pytest.raises(ValueError) as refused:
        CheckedRunner(strict_runner, "decode")(cache=stepped)
    assert getattr(refused.value, "__notes__", None) == [
        "the decode program's input spec holds the cache's Python values as they were at export, and the cache the "
        "loop passes differs: Layer.length 8 at export, 9 now"]
    assert torch.equal(CheckedRunner(strict_runner, "decode", refit=True)(cache=stepped), torch.ones(1))
    exported = a_spec(1, 2, 3, 4)
    with pytest.raises(ValueError) as refused:
        CheckedRunner(strict_runner, "decode")(cache=[Layer(torch.ones(1), n) for n in (5, 6, 7, 8)])
    assert getattr(refused.value, "__notes__", [""])[0].endswith(
        "differs: Layer.length 1 at export, 5 now; Layer.length 2 at export, 6 now; Layer.length 3 at export, 7 now; "
        "and 1 more")


def test_a_decode_refused_after_a_prefill_that_returned_no_cache_says_the_loop_passed_the_unfilled_one() -> None:
    """recurrent_gemma's programs: the prefill's outputs hold no cache, so the loop can only pass on the cache it
    started with (the eager forward fills that one in place); the decode's refusal says so."""
    model = build_tiny("llama")
    scenario = SCENARIOS["greedy"]
    inputs = make_inputs(model, scenario)
    recorded = generate_steps(model, inputs, static_cache_config(generation_config(scenario, 3, None, {})))

    def prefill(**step: Any) -> Any:
        return type("Output", (), {"logits": model(**step).logits})()

    def decode(**step: Any) -> Any:
        raise ValueError("Trying to flatten user inputs with exported input tree spec:")

    with pytest.raises(ValueError) as refused:
        host_loop(prefill, decode, recorded, fresh_cache(recorded))
    assert getattr(refused.value, "__notes__", None) == [
        "the previous step's outputs hold no cache, so the loop passed on the cache it started with, as generate "
        "does (the eager forward fills it in place)"]
    with pytest.raises(ValueError) as refused:  # a prefill that fails is not said to have returned no cache
        host_loop(decode, decode, recorded, fresh_cache(recorded))
    assert not hasattr(refused.value, "__notes__")


def test_transformers_dynamo_runner_refuses_a_sliding_window_cache_naming_its_step_count() -> None:
    """transformers 5.24: a sliding-window layer's step count is a Python int in the exported decode program's input
    spec, so the next step's cache is refused; fed the same tensors under that spec, the programs are exact."""
    result = run_check(build_tiny("gemma2"), "gemma2", "greedy", "hf_dynamo", "aot_eager", 4)
    assert result.outcome == "error", result.message
    assert "StaticSlidingWindowLayer.cumulative_length_int 8 at export, 9 now" in result.message
    assert "runner_dynamo.py" in result.message  # the site is still transformers' runner, not our wrapper
    from pytest_fullgraph.levels.hf import HfDynamoLevel

    model = build_tiny("gemma2")
    scenario = SCENARIOS["greedy"]
    inputs = make_inputs(model, scenario)
    config = static_cache_config(generation_config(scenario, 4, None, {}))
    refit = HfDynamoLevel().exported_loop(model, inputs, config, refit=True)()
    assert torch.equal(refit, generate_steps(model, inputs, config).sequences)
