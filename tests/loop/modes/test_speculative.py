"""Speculative sampling's acceptance over a fixed draft buffer: transformers' ``_speculative_sampling`` exactly
(its tokens, how many it keeps, and the random numbers it draws), and what the algorithm must do by hand."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.utils import _speculative_sampling

from pytest_fullgraph.loop.modes.speculative import speculative_selection, uniform_draws
from tests.loop.modes import upstream

RUNNING = torch.tensor(True)


def transformers_step(tokens: torch.Tensor, count: int, draft_scores: torch.Tensor,
                      logits: torch.Tensor) -> torch.Tensor:
    """What ``_assisted_decoding`` keeps from a draft of ``count`` tokens: ``_speculative_sampling``, or with no
    draft its plain draw from the target's next-token distribution."""
    if count == 0:
        return torch.multinomial(logits[0, :1].softmax(dim=-1), num_samples=1)[:, 0]
    candidates = torch.cat([torch.tensor([5, 6]), tokens[:count]])[None]  # a two-token prefix, then the draft
    valid, _ = _speculative_sampling(candidates, draft_scores[None, :count], count, logits[:, :count + 1])
    return valid[0]


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 5), vocab=st.integers(3, 24), data=st.data(), seed=st.integers(0, 2**16))
def test_the_selection_keeps_and_draws_what_transformers_does(size: int, vocab: int, data: st.DataObject,
                                                              seed: int) -> None:
    count = data.draw(st.integers(0, size))
    generator = torch.Generator().manual_seed(seed)
    sharpness = data.draw(st.sampled_from([0.5, 2.0, 6.0]))  # flat to peaked: drafts kept whole to cut at once
    draft_scores = sharpness * torch.randn(size, vocab, generator=generator)
    logits = sharpness * torch.randn(1, size + 1, vocab, generator=generator)
    tokens = torch.randint(vocab, (size,), generator=generator)
    torch.manual_seed(seed)
    expected = transformers_step(tokens, count, draft_scores, logits)
    after_expected = torch.rand(3)
    torch.manual_seed(seed)
    selected, valid = speculative_selection(tokens, torch.tensor(count), logits, draft_scores, RUNNING)
    assert torch.equal(selected[:int(valid)], expected)
    assert torch.equal(torch.rand(3), after_expected)  # as many draws, in the same order


def test_a_draft_the_target_agrees_with_is_kept_whole_and_one_it_rules_out_never() -> None:
    """By hand: with p = q every ratio is 1 and a uniform draw in [0, 1) accepts it, so the step keeps the whole
    draft and draws its last token from the target; where the target gives a drafted token probability 0, the
    draft is cut there and the drawn token comes from p - q clipped at 0, which excludes it."""
    scores = torch.tensor([[3.0, 1.0, 0.0, -1.0], [0.0, 2.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    tokens = torch.tensor([0, 2, 1])
    logits = torch.cat([scores, torch.tensor([[0.0, 0.0, 9.0, 0.0]])])[None]
    for seed in range(20):
        torch.manual_seed(seed)
        selected, valid = speculative_selection(tokens, torch.tensor(3), logits, scores, RUNNING)
        assert int(valid) == 4 and torch.equal(selected[:3], tokens)
    ruled_out = logits.clone()
    ruled_out[0, 0, 0] = float("-inf")  # the target never emits the first drafted token
    for seed in range(20):
        torch.manual_seed(seed)
        selected, valid = speculative_selection(tokens, torch.tensor(3), ruled_out, scores, RUNNING)
        assert int(valid) == 1 and int(selected[0]) != 0


def test_nothing_is_drawn_once_generation_has_ended() -> None:
    """The unrolled loop runs steps past the end: they must leave the generator as generate leaves it."""
    scores, tokens = torch.zeros(2, 5), torch.tensor([1, 2])
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    speculative_selection(tokens, torch.tensor(2), torch.zeros(1, 3, 5), scores, torch.tensor(False))
    assert torch.equal(torch.rand(2), expected)


@pytest.mark.parametrize("count", [0, 1, 3])
def test_uniform_draws_are_one_call_of_the_drafts_length(count: int) -> None:
    torch.manual_seed(3)
    expected = torch.rand(count)
    torch.manual_seed(3)
    draws = uniform_draws(torch.tensor(count), 3, torch.device("cpu"))
    assert torch.equal(draws[:count], expected) and not draws[count:].any()


@pytest.mark.breadth  # a reproducer run in a fresh process, as the other verified reproducers
def test_the_dynamo_bug_behind_initialize_before_draws_has_a_standalone_reproducer() -> None:
    """``assisted.initialize_before_draws`` works around a dynamo bug; docs/upstream/dynamo_attribute_after_cond.py
    is what PyTorch would be handed: with torch alone, in a fresh process, it says BUG (torch 2.13, measured) or
    FIXED (then the workaround can go), and never fails otherwise."""
    upstream.assert_bug_or_fixed("dynamo_attribute_after_cond.py")
