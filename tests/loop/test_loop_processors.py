"""The loop's device forms of transformers' processors equal transformers' own on any sequence: the n-gram ban,
the sequence bias and bad words over a fixed-width tail window, and the exponential length penalty."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import (
    ExponentialDecayLengthPenalty,
    LogitsProcessorList,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    SequenceBiasLogitsProcessor,
)

from pytest_fullgraph.loop.processors import banned_ngrams, check_processors, process, process_unrolled

VOCAB = 6  # small, so that n-grams and biased sequences repeat


@st.composite
def sequences(draw: st.DrawFn) -> tuple[torch.Tensor, int, int]:
    """(a (2, width) buffer, the valid length, the buffer's spare width past it) with tokens from VOCAB."""
    length = draw(st.integers(1, 12))
    spare = draw(st.integers(0, 4))
    tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=2 * (length + spare), max_size=2 * (length + spare)))
    return torch.tensor(tokens).reshape(2, length + spare), length, spare


def _scores(seed: int) -> torch.Tensor:
    return torch.randn(2, VOCAB, generator=torch.Generator().manual_seed(seed))


@settings(max_examples=150, deadline=None)
@given(sequences(), st.integers(1, 4), st.integers(0, 1000))
def test_the_device_ngram_ban_equals_transformers(drawn: tuple[torch.Tensor, int, int], size: int,
                                                  seed: int) -> None:
    buffer, length, _ = drawn
    scores = _scores(seed)
    expected = NoRepeatNGramLogitsProcessor(size)(buffer[:, :length], scores.clone())
    assert torch.equal(banned_ngrams(size, buffer, torch.tensor(length), scores), expected)  # while: a buffer
    assert torch.equal(banned_ngrams(size, buffer[:, :length], length, scores), expected)  # unrolled: the sequence


@settings(max_examples=100, deadline=None)
@given(sequences(), st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=3), min_size=1, max_size=4,
                             unique_by=tuple),
       st.integers(0, 1000), st.booleans())
def test_sequence_bias_and_bad_words_over_the_tail_window_equal_transformers(
        drawn: tuple[torch.Tensor, int, int], biased: list[list[int]], seed: int, bad_words: bool) -> None:
    buffer, length, _ = drawn

    def processor() -> SequenceBiasLogitsProcessor:
        if bad_words:
            return NoBadWordsLogitsProcessor(biased)
        return SequenceBiasLogitsProcessor([[sequence, -2.5 + index] for index, sequence in enumerate(biased)])

    scores = _scores(seed)
    expected = processor()(buffer[:, :length], scores.clone())
    processors = LogitsProcessorList([processor()])
    check_processors(processors)
    assert torch.equal(process(processors, buffer, torch.tensor(length), scores.clone()), expected)


@settings(max_examples=60, deadline=None)
@given(sequences(), st.integers(0, 6), st.sampled_from([1.0, 1.5, 8.0, 0.9]), st.integers(0, 1000))
def test_the_length_penalty_with_a_tensor_length_equals_transformers(drawn: tuple[torch.Tensor, int, int],
                                                                     start: int, factor: float, seed: int) -> None:
    buffer, length, _ = drawn
    scores = _scores(seed)
    penalty = ExponentialDecayLengthPenalty((start, factor), torch.tensor([2, 4]), input_ids_seq_length=1)
    expected = penalty(buffer[:, :length], scores.clone())
    processors = LogitsProcessorList([penalty])
    assert torch.equal(process(processors, buffer, torch.tensor(length), scores.clone()), expected)


def test_the_unrolled_loop_runs_transformers_processors_as_they_are_but_the_ngram_ban() -> None:
    sequence = torch.tensor([[1, 2, 1, 2, 1], [3, 3, 3, 3, 3]])
    scores = _scores(0)
    processors = LogitsProcessorList([NoRepeatNGramLogitsProcessor(2), SequenceBiasLogitsProcessor([[[2], -1.0]])])
    expected = processors(cast(torch.LongTensor, sequence), scores.clone())
    assert torch.equal(process_unrolled(processors, sequence, scores.clone()), expected)


def test_a_processor_that_rebinds_its_tensors_at_prefill_compiles_in_the_while_body() -> None:
    """ExponentialDecayLengthPenalty re-assigns ``self.eos_token_id = self.eos_token_id.to(device)`` when called;
    called at prefill inside the compiled loop, it handed the body a second name for the EOS tensor, which
    ``while_loop`` refused as input aliasing. The prefill now runs copies of the processors."""
    from transformers import GenerationConfig

    from pytest_fullgraph import build_tiny
    from pytest_fullgraph.core.generation import generate_fn
    from pytest_fullgraph.loop.decode import fullgraph_generate

    model = build_tiny("llama")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    model.generation_config.eos_token_id = 50
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=50,
                              exponential_decay_length_penalty=(0, 8.0))
    expected = generate_fn(model)(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    compiled = fullgraph_generate(model, ids, torch.ones_like(ids), config, loop="while",
                                  compiler=lambda loop: torch.compile(loop, fullgraph=True, backend="eager"))
    assert torch.equal(compiled, expected)


@pytest.mark.parametrize("loop", ["unrolled", "while"])
def test_stop_strings_stop_rows_in_the_graph_as_generate_stops_them(loop: str) -> None:
    """StopStringCriteria is tensor work on the last tokens: the loop runs it on the device, in both forms."""
    from transformers import GenerationConfig

    from pytest_fullgraph import build_tiny
    from pytest_fullgraph.check.inputs import tiny_tokenizer
    from pytest_fullgraph.core.generation import generate_fn
    from pytest_fullgraph.loop.decode import UnsupportedGeneration, fullgraph_generate

    model = build_tiny("llama")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    mask = torch.ones_like(ids)
    plain = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    model.generation_config.eos_token_id = None
    free = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=plain)
    tokenizer = tiny_tokenizer(int(model.config.vocab_size))
    # the texts of the rows' second new tokens: both rows stop there, so the output is cut short
    stops = [tokenizer.convert_ids_to_tokens(int(free[row, 7])) for row in (0, 1)]
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None,
                              stop_strings=stops)
    expected = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config, tokenizer=tokenizer)
    assert expected.shape[1] < free.shape[1]
    assert torch.equal(fullgraph_generate(model, ids, mask, config, loop=loop, tokenizer=tokenizer), expected)
    with pytest.raises(UnsupportedGeneration, match=r"stop_strings need tokenizer=\.\.\., as generate needs it"):
        fullgraph_generate(model, ids, mask, config, loop=loop)


@pytest.mark.parametrize("loop", ["unrolled", "while"])
def test_min_new_tokens_wins_over_min_length_as_in_generate(loop: str) -> None:
    """With both set, generate lets min_new_tokens decide (min_length = min_new_tokens + prompt length). Found by
    the property suite: the loop kept min_length=10, so EOS stayed banned where generate let the length penalty
    pick it at the fourth new token."""
    from transformers import GenerationConfig

    from pytest_fullgraph import build_tiny
    from pytest_fullgraph.check.inputs import left_padded_prompts, model_generation_defaults
    from pytest_fullgraph.core.generation import generate_fn
    from pytest_fullgraph.loop.decode import fullgraph_generate

    model = build_tiny("llama")
    prompt = left_padded_prompts([3], 7, int(model.config.vocab_size))
    config = GenerationConfig(max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=3, min_length=10,
                              min_new_tokens=2, exponential_decay_length_penalty=(0, 4.0))
    with torch.no_grad(), model_generation_defaults(model, 3):
        expected = generate_fn(model)(**prompt, generation_config=config)
        ours = fullgraph_generate(model, prompt["input_ids"], prompt["attention_mask"], config, loop=loop)
    assert int(expected[0, -1]) == 3 and expected.shape[1] < 3 + 5  # generate stopped on EOS early
    assert torch.equal(ours, expected)
