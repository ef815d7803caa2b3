"""``fullgraph_generate(max_prompt_length=N)``: one compiled loop for every prompt width up to N (the cache sized for
the longest, the width dynamic), its tokens ``generate``'s at every width; refusals by name where one prompt sizes
the state."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny
from pytest_fullgraph.check.inputs import left_padded_prompts
from pytest_fullgraph.core.generation import generate_fn
from pytest_fullgraph.levels.builtin import WhileLevel
from pytest_fullgraph.loop.decode import UnsupportedGeneration, fullgraph_generate
from pytest_fullgraph.loop.planning import prepare
from pytest_fullgraph.loop.steps import per_width_reason, served_cache_length

CONFIG = GenerationConfig(max_new_tokens=3, do_sample=False, pad_token_id=0)


def _compiled(function: Any) -> Any:
    return torch.compile(function, fullgraph=True, backend="eager")


def test_one_compiled_while_loop_serves_every_width_up_to_the_bound_with_generates_tokens() -> None:
    model = build_tiny("llama")
    # the widest at the bound itself: transformers' mask takes another branch for a mask as wide as the cache
    widths = ([8, 5], [11, 8], [12, 3])
    torch._dynamo.reset()
    for index, lengths in enumerate(widths):
        prompts = left_padded_prompts(lengths, index, model.config.vocab_size)
        stance = "fail_on_recompile" if index else "default"  # the first call compiles; no later one may
        with torch.compiler.set_stance(stance), torch.no_grad():
            tokens = fullgraph_generate(model, prompts["input_ids"], prompts["attention_mask"], CONFIG,
                                        compiler=_compiled, loop="while", max_prompt_length=12)
        assert torch.equal(tokens, generate_fn(model)(**prompts, generation_config=CONFIG)), lengths


def test_the_cache_is_one_position_past_the_longest_prompts_need() -> None:
    model = build_tiny("llama")
    prompt = torch.tensor([[5, 6, 7, 8]])
    _, plan = prepare(model, prompt, None, CONFIG, None, None)
    assert served_cache_length(plan, prompt, None) == 4 + 3 - 1  # generate's own static cache
    assert served_cache_length(plan, prompt, 10) == 10 + 3 - 1 + 1


def test_a_bound_below_the_prompt_and_a_mode_of_one_prompt_are_refused_by_name() -> None:
    model = build_tiny("llama")
    prompt = torch.tensor([[5, 6, 7, 8, 9]])
    with pytest.raises(UnsupportedGeneration, match=r"max_prompt_length=4 is shorter than the prompt \(5 tokens"):
        fullgraph_generate(model, prompt, None, CONFIG, max_prompt_length=4)
    lookup = GenerationConfig(max_new_tokens=3, do_sample=False, pad_token_id=0, prompt_lookup_num_tokens=2)
    with pytest.raises(UnsupportedGeneration, match="max_prompt_length is refused where a dynamic export is"):
        fullgraph_generate(model, prompt, None, lookup, max_prompt_length=10)


@pytest.mark.parametrize(("settings", "reason"), [
    ({}, ""),
    ({"do_sample": True, "top_k": 5}, ""),
    ({"prefill_chunk_size": 3}, "prefill_chunk_size cuts the prompt"),
    ({"min_new_tokens": 2}, "min_new_tokens' processor counts the prompt's width"),
    ({"num_beams": 3}, "beam_search's while loop is promised one prompt width"),
])
def test_the_while_level_serves_every_width_for_greedy_and_sampling_only(settings: dict[str, Any],
                                                                         reason: str) -> None:
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0, **settings)
    inputs = {"input_ids": torch.zeros((2, 8), dtype=torch.long)}
    found = per_width_reason(config, inputs)
    assert found.startswith(reason) and bool(found) == bool(reason)
    level = WhileLevel()
    assert level.prompt_bound(inputs, config) == (None if reason else 16)
    assert level.recompile_excuse(build_tiny("llama"), config, "prompt_length") == found
