"""The built-in registry builds tiny, seeded models; third parties register theirs from a conftest."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytest_fullgraph.core.generation import generate_fn
from pytest_fullgraph.models import build_tiny, tiny

REQUIRED = (
    "llama", "gemma", "gemma2", "gemma3_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
    "qwen3_moe", "phi", "phi3", "gpt2", "gpt_neox", "falcon", "opt", "olmo2", "starcoder2", "granite",
    "cohere", "stablelm", "gpt_oss", "mpt", "gpt_neo", "mamba",
)


@pytest.mark.parametrize("model_type", REQUIRED)
def test_builtin_model_is_tiny_seeded_and_generates(model_type: str) -> None:
    assert model_type in tiny.RECORDS
    model = build_tiny(model_type)
    assert not model.training
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    again = build_tiny(model_type)
    for (name, first), (_, second) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(first, second), f"{model_type}: {name} differs between two builds"
    output = generate_fn(model)(torch.tensor([[5, 6, 7]]), max_new_tokens=2, do_sample=False, pad_token_id=0)
    assert output.shape == (1, 5)


def test_register_model_function_and_hook(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "from pytest_fullgraph import build_tiny, register_model\n"
        "register_model('by_function', lambda: build_tiny('llama'), family='mine', tags=['popular'])\n"
        "def pytest_fullgraph_register_models(registry):\n"
        "    registry.register('by_hook', lambda: build_tiny('gpt2'))\n"
    )
    pytester.makepyfile(
        "def test_model(fullgraph_model_name, fullgraph_model):\n"
        "    assert fullgraph_model.config.model_type == {'by_function': 'llama', 'by_hook': 'gpt2'}"
        "[fullgraph_model_name]\n"
    )
    result = pytester.runpytest(str(pytester.path), "--fullgraph-models=by_function,by_hook", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_model[[]by_function[]] PASSED*", "*test_model[[]by_hook[]] PASSED*"])


def test_registering_a_builtin_name_needs_replace(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from pytest_fullgraph import register_model\nregister_model('llama', lambda: None)\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret != 0
    assert "model 'llama' is already registered; pass replace=True" in result.stdout.str() + result.stderr.str()


OLD_STYLE_CONFTEST = """\
from transformers import LlamaForCausalLM
from pytest_fullgraph import build_tiny, register_model


class OldStyleLM(LlamaForCausalLM):
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               **kwargs)


def build():
    model = build_tiny("llama")
    model.__class__ = OldStyleLM
    return model


register_model("oldstyle", build)
"""


def test_a_forward_without_cache_is_a_skip_naming_the_class_its_code_and_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(OLD_STYLE_CONFTEST)
    pytester.makepyfile(test_mine="def test_decode(fullgraph_check):\n    fullgraph_check('oldstyle', 'greedy', "
                                  "'decode')\n")
    result = pytester.runpytest(str(pytester.path), "-rs", "--fullgraph-models=oldstyle", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    # -rs points at the test's own call and the model's forward, not into the plugin
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_mine.py:2: oldstyle: unsupported by fullgraph_generate: "
                                 "OldStyleLM.forward (conftest.py:6) takes no `cache` argument, only the older "
                                 "`past_key_values`: the loop passes its static cache as forward(..., cache=...)*"])
    assert "pytest_fullgraph" not in next(line for line in result.outlines if line.startswith("SKIPPED"))


def test_plugin_listed_twice_is_registered_once(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("pytest_plugins = ['pytest_fullgraph.plugin']\n")
    pytester.makepyfile("def test_x(fullgraph_settings):\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "pytest_fullgraph.plugin")
    result.assert_outcomes(passed=1)


def test_layer_types_keep_one_layer_of_each_kind() -> None:
    """Cut to two layers by the config itself, gemma3's 5:1 sliding/full pattern left two sliding layers:
    the tiny model had no full-attention layer at all."""
    from pytest_fullgraph.models import tiny_config

    config = tiny_config("gemma3_text")
    assert (config.num_hidden_layers, config.layer_types) == (2, ["sliding_attention", "full_attention"])


def test_sub_configs_of_composite_models_are_shrunk_too() -> None:
    from pytest_fullgraph.models import tiny_config

    config = tiny_config("gemma3")
    assert (config.text_config.hidden_size, config.text_config.num_hidden_layers) == (32, 2)
    assert (config.vision_config.hidden_size, config.vision_config.num_hidden_layers) == (32, 2)


def test_a_model_is_settled_by_one_forward_before_its_checks() -> None:
    """big_bird switches its attention type on its first forward, so its first generation differed from every
    later one and the first of its checks to run read "eager generation differs from itself"; the cache runs the
    forward once after the build, drawing nothing from torch's generator, so no check's verdict depends on order."""
    from pytest_fullgraph.models import builtin_registry
    from pytest_fullgraph.plugin.built_models import Built, ModelCache

    built: Any = build_tiny("big_bird")
    assert built.bert.attention_type == "block_sparse"  # as built
    state = torch.get_rng_state()
    entry = ModelCache(builtin_registry()).get("big_bird")
    settled: Any = entry.model if isinstance(entry, Built) else None
    assert settled is not None and settled.bert.attention_type == "original_full"
    assert torch.equal(state, torch.get_rng_state())
