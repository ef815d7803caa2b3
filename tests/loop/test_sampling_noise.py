"""Sampling with the noise as a program input (``export_generate(noise_input=True)``): exactly ``generate``'s
tokens for the same seed, because ``torch.multinomial`` is the arg-max (top-k) of ``probs / Exp(1) noise``."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch

from pytest_fullgraph import build_tiny
from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate
from pytest_fullgraph.loop.sampling_noise import draws, multinomial, noise_from


@pytest.mark.parametrize("num_samples", [1, 5])
@pytest.mark.parametrize("seed", range(8))
def test_multinomial_is_the_top_of_probs_over_its_own_exponential_draws(seed: int, num_samples: int) -> None:
    """The fact the noise input rests on, checked on the installed torch: same seed, same picks, also where
    processors left zeros (top-k)."""
    logits = torch.randn(3, 300, generator=torch.Generator().manual_seed(seed)) * 3
    logits[:, 100:] = -float("inf")  # zero probabilities, as top_k leaves them
    probs = torch.softmax(logits, dim=-1)
    torch.manual_seed(seed)
    drawn = torch.multinomial(probs, num_samples)
    torch.manual_seed(seed)
    with noise_from(draws(1, probs.shape, probs.dtype, "cpu")):
        assert torch.equal(multinomial(probs, num_samples), drawn)


def test_without_noise_it_draws_as_torch_does_and_runs_out_in_one_line() -> None:
    probs = torch.full((2, 10), 0.1)
    torch.manual_seed(3)
    expected = torch.multinomial(probs, 1)
    torch.manual_seed(3)
    assert torch.equal(multinomial(probs, 1), expected)
    with noise_from(draws(1, probs.shape, probs.dtype, "cpu")), pytest.raises(
            UnsupportedGeneration, match="the noise input holds fewer steps than the program samples"):
        multinomial(probs, 1)
        multinomial(probs, 1)


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(3, 100, (2, 8), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0
    return input_ids, attention_mask


@pytest.mark.parametrize("settings", [{"top_k": 20}, {"num_beams": 3, "eos_token_id": None}],
                         ids=["sample-top_k", "beam_sample"])
def test_a_program_taking_its_noise_gives_generates_tokens_for_each_seed(settings: dict[str, Any]) -> None:
    from transformers import GenerationConfig

    model = cast(Any, build_tiny("llama"))
    input_ids, attention_mask = prompts()
    config = GenerationConfig(max_new_tokens=5, do_sample=True, pad_token_id=0, **settings)
    program = export_generate(model, input_ids, attention_mask, config, noise_input=True)
    width = 128 * settings.get("num_beams", 1)  # the tiny llama's vocabulary, times the beams
    assert program.artifact_metadata["noise"] == {"per_step": [width], "dtype": "torch.float32"}
    assert program.artifact_metadata["inputs"]["noise"]["shape"] == [[5, 5], [2, 2], [width, width]]
    outputs = []
    for seed in range(3):
        torch.manual_seed(seed)
        expected = model.generate(input_ids, attention_mask=attention_mask, generation_config=config)
        torch.manual_seed(seed)
        outputs.append(program(input_ids, attention_mask))
        assert torch.equal(outputs[-1], expected), seed
    assert not all(torch.equal(outputs[0], other) for other in outputs[1:])  # the noise does steer the tokens


@pytest.mark.parametrize(("settings", "loop", "message"), [
    ({"do_sample": False}, "unrolled", r"noise_input=True is for programs that sample \(do_sample=True\)"),
    ({"do_sample": True}, "while", r"takes the unrolled loop of sampling or beam sampling, not loop='while'"),
])
def test_what_has_no_such_noise_is_refused(settings: dict[str, Any], loop: str, message: str) -> None:
    from transformers import GenerationConfig

    input_ids, attention_mask = prompts()
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0, **settings)
    with pytest.raises(UnsupportedGeneration, match=message):
        export_generate(build_tiny("llama"), input_ids, attention_mask, config, loop=loop, noise_input=True)


def test_speculative_sampling_has_no_fixed_noise_and_is_refused() -> None:
    from transformers import GenerationConfig

    from pytest_fullgraph.models.draft import build_draft

    target, prompt = build_tiny("llama"), torch.tensor([[5, 9, 14, 3]])
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0, do_sample=True, top_k=0)
    with pytest.raises(UnsupportedGeneration, match=r"not speculative sampling: its draws .* vary in number"):
        export_generate(target, prompt, torch.ones_like(prompt), config, noise_input=True,
                        assistant_model=build_draft(target))
