"""Prompt-lookup decoding in the loop: ``generate``'s tokens, eager and compiled, both forms, with drafts really
accepted; refusals name what they refuse."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny
from pytest_fullgraph.core.generation import generate_fn
from pytest_fullgraph.loop.decode import UnsupportedGeneration, fullgraph_generate
from pytest_fullgraph.models.oracle import build_oracle
from tests.loop.modes import learned_positions, upstream

ORACLE = build_oracle()
#: the oracle repeats itself after this prompt, so lookup drafts are accepted (7 forwards for 12 tokens)
REPEATING = torch.tensor([[5, 6, 7, 5, 6, 2, 5, 6]])


def _forwards(model: Any, run: Any) -> tuple[Any, int]:
    calls: list[int] = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        return run(), len(calls)
    finally:
        handle.remove()


@pytest.mark.parametrize(("ids", "draft", "eos"), [
    (REPEATING.tolist(), 3, None), (REPEATING.tolist(), 5, [7, 2]), ([[3, 4, 3, 4, 3, 4]], 2, [4]),
    ([[0, 0, 7, 6, 7, 6]], 3, None),  # left padding
])
def test_the_eager_loop_gives_generates_tokens(ids: list[list[int]], draft: int, eos: list[int] | None) -> None:
    ids_ = torch.tensor(ids)
    mask = (ids_ != 0).long()
    config = GenerationConfig(max_new_tokens=8, pad_token_id=0, eos_token_id=eos, prompt_lookup_num_tokens=draft)
    expected = generate_fn(ORACLE)(input_ids=ids_, attention_mask=mask, generation_config=config)
    for loop in ("unrolled", "while"):
        assert torch.equal(fullgraph_generate(ORACLE, ids_, mask, config, loop=loop), expected)


SAMPLING = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}


@pytest.mark.parametrize("eos", [None, [3]])
def test_sampling_draws_what_generate_draws(eos: list[int] | None) -> None:
    """With do_sample, generate draws the model's token after the last one and each drafted one in one multinomial
    over as many rows: the same seed gives its tokens and leaves the generator where it leaves it, both forms,
    with drafts kept on some seeds (fewer forwards than tokens)."""
    config = GenerationConfig(max_new_tokens=12, pad_token_id=0, eos_token_id=eos, prompt_lookup_num_tokens=3,
                              **SAMPLING)
    kept = False
    for seed in range(6):
        torch.manual_seed(seed)
        expected, forwards = _forwards(ORACLE, lambda: generate_fn(ORACLE)(input_ids=REPEATING,
                                                                           generation_config=config))
        after = torch.rand(3)
        kept |= forwards < expected.shape[1] - REPEATING.shape[1]
        for loop in ("unrolled", "while"):
            torch.manual_seed(seed)
            assert torch.equal(fullgraph_generate(ORACLE, REPEATING, None, config, loop=loop), expected), seed
            assert torch.equal(torch.rand(3), after), seed
    assert kept


@pytest.mark.breadth  # inductor compiles: the workflow's plugin job runs them on every pull request
@pytest.mark.parametrize("loop", ["unrolled", "while"])
@pytest.mark.parametrize("sample", [False, True])
def test_compiled_prompt_lookup_accepts_drafts_and_gives_generates_tokens(loop: str, sample: bool) -> None:
    config = GenerationConfig(max_new_tokens=12, pad_token_id=0, eos_token_id=None, prompt_lookup_num_tokens=3,
                              **(SAMPLING if sample else {}))
    torch.manual_seed(0)
    expected, forwards = _forwards(ORACLE, lambda: generate_fn(ORACLE)(input_ids=REPEATING,
                                                                       generation_config=config))
    assert forwards < 12  # drafts were accepted: fewer forwards than tokens
    torch._dynamo.reset()
    torch.manual_seed(0)
    with torch._inductor.config.patch(fallback_random=True):  # inductor's own generator draws other numbers
        compiled = fullgraph_generate(ORACLE, REPEATING, None, config, loop=loop,
                                      compiler=lambda f: torch.compile(f, fullgraph=True, backend="inductor"))
    assert torch.equal(compiled, expected)


def test_llama_with_repeated_ngrams_gives_generates_tokens() -> None:
    model = build_tiny("llama")
    ids = torch.tensor([[5, 6, 7, 5, 6, 9, 5, 6]])
    config = GenerationConfig(max_new_tokens=8, pad_token_id=0, eos_token_id=None, prompt_lookup_num_tokens=3)
    expected = generate_fn(model)(input_ids=ids, generation_config=config)
    for loop in ("unrolled", "while"):
        assert torch.equal(fullgraph_generate(model, ids, None, config, loop=loop), expected)


@pytest.mark.parametrize(("ids", "settings", "named"), [
    ([[5, 6], [7, 8]], {}, "takes one prompt"),
    ([[5, 6]], {"repetition_penalty": 1.5}, "RepetitionPenaltyLogitsProcessor"),
])
def test_what_prompt_lookup_cannot_do_is_refused_by_name(ids: list[list[int]], settings: dict[str, Any],
                                                         named: str) -> None:
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0, prompt_lookup_num_tokens=2, **settings)
    with pytest.raises(UnsupportedGeneration, match=named):
        fullgraph_generate(ORACLE, torch.tensor(ids), None, config)


def test_a_cache_that_cannot_roll_back_is_refused_by_name() -> None:
    from pytest_fullgraph.loop.decode import export_generate

    config = GenerationConfig(max_new_tokens=3, pad_token_id=0, prompt_lookup_num_tokens=2)
    for run in (fullgraph_generate, export_generate):  # both refuse before any graph
        with pytest.raises(UnsupportedGeneration, match="cannot roll back cache layer"):
            run(build_tiny("mamba"), torch.tensor([[5, 6, 5]]), None, config)


def test_a_generation_that_fills_a_learned_position_table_gives_greedys_tokens() -> None:
    """transformers' prompt lookup drafts past ``max_length`` and so fails on gpt2 when the generation fills its
    position table (docs/upstream/prompt_lookup_past_max_length.py); the loop drafts what it drafts, but the slots
    past ``max_length`` read the last position (``drafting.chunk_positions``), and its tokens are greedy's, which
    prompt lookup keeps whatever it drafts."""
    model = learned_positions.table_model()
    greedy = generate_fn(model)(input_ids=learned_positions.PROMPT, generation_config=learned_positions.filling())
    config = learned_positions.filling(prompt_lookup_num_tokens=3)
    with pytest.raises(IndexError):  # transformers 5.24's generate: the standalone script says BUG while it holds
        generate_fn(model)(input_ids=learned_positions.PROMPT, generation_config=config)
    for loop in ("unrolled", "while"):
        assert torch.equal(fullgraph_generate(model, learned_positions.PROMPT, None, config, loop=loop), greedy), loop


@pytest.mark.breadth
def test_the_transformers_bug_past_max_length_has_a_standalone_reproducer() -> None:
    """docs/upstream/prompt_lookup_past_max_length.py, with torch and transformers alone in a fresh process, says
    BUG (transformers 5.24, measured) or FIXED, and never fails otherwise."""
    upstream.assert_bug_or_fixed("prompt_lookup_past_max_length.py")
