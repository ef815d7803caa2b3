"""Scenarios: the inputs and generation settings of a check, as a table, plus prompts, configs and EOS picking."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.models.tiny import FIRST_PROMPT_ID, PAD_TOKEN_ID

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel


@dataclass(frozen=True)
class Scenario:
    """Inputs and generation settings of a check; every value is fixed so runs are reproducible."""

    name: str
    description: str
    prompt_lengths: tuple[int, ...] = (8, 8)
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    uses_eos: bool = False
    seed: int = 1234


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("greedy", "greedy decoding, batch 2, prompts of 8 tokens, no EOS"),
        Scenario("sample", "do_sample with temperature 0.7, top-k 20, top-p 0.9 and a fixed seed",
                 do_sample=True, temperature=0.7, top_k=20, top_p=0.9),
        Scenario("eos", "greedy with an EOS id the model emits mid-generation; finished rows are padded",
                 uses_eos=True),
        Scenario("padded", "left-padded batch of prompts of lengths 8 and 5 with an attention mask",
                 prompt_lengths=(8, 5)),
    )
}


def vocab_size(model: PreTrainedModel) -> int:
    return int(model.config.get_text_config().vocab_size)


def left_padded_prompts(lengths: Sequence[int], seed: int, vocab: int) -> dict[str, torch.Tensor]:
    """Seeded prompts of the given lengths, left-padded with the pad id, with their attention mask."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), PAD_TOKEN_ID, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        input_ids[row, width - length:] = torch.randint(FIRST_PROMPT_ID, vocab, (length,), generator=generator)
        attention_mask[row, width - length:] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def make_inputs(model: PreTrainedModel, scenario: Scenario) -> dict[str, torch.Tensor]:
    """The scenario's prompts for this model's vocabulary, on the model's device."""
    inputs = left_padded_prompts(scenario.prompt_lengths, scenario.seed, vocab_size(model))
    device = model_device(model)
    return {name: tensor.to(device) for name, tensor in inputs.items()}


def model_device(model: Any) -> str:
    """Where the model's parameters live (the checks put their inputs there); "cpu" for parameterless fakes."""
    parameters = getattr(model, "parameters", None)
    first = next(iter(parameters()), None) if callable(parameters) else None
    return str(first.device) if first is not None else "cpu"


@contextlib.contextmanager
def moved_to(model: Any, device: str) -> Iterator[Any]:
    """The model on ``device`` for the block, then back where it was, even when the block fails: a model is
    built once per worker and shared by the tests that follow."""
    original = model_device(model)
    model.to(device)
    try:
        yield model
    finally:
        model.to(original)


def model_dtype(model: Any) -> str:
    """The dtype of the model's floating-point parameters ("float32", "bfloat16"); float32 for parameterless
    fakes."""
    parameters = getattr(model, "parameters", None)
    for parameter in (parameters() if callable(parameters) else ()):
        if parameter.is_floating_point():
            return str(parameter.dtype).removeprefix("torch.")
    return "float32"


def generation_config(scenario: Scenario, max_new_tokens: int, eos_token_id: int | None) -> GenerationConfig:
    from transformers import GenerationConfig

    sampling: dict[str, Any] = {}
    if scenario.do_sample:
        sampling = {"temperature": scenario.temperature, "top_k": scenario.top_k, "top_p": scenario.top_p}
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=scenario.do_sample,
                            eos_token_id=eos_token_id, pad_token_id=PAD_TOKEN_ID, **sampling)


@contextlib.contextmanager
def model_generation_defaults(model: PreTrainedModel, eos_token_id: int | None) -> Iterator[None]:
    """Make the model's own generation defaults agree with the scenario.

    transformers fills an unset ``eos_token_id`` from ``model.generation_config``, so "no EOS" is only
    honoured when the model's default says so too.
    """
    defaults = model.generation_config
    saved = (defaults.eos_token_id, defaults.pad_token_id)
    defaults.eos_token_id = eos_token_id
    defaults.pad_token_id = PAD_TOKEN_ID
    try:
        yield
    finally:
        defaults.eos_token_id, defaults.pad_token_id = saved


def pick_eos_token(greedy_tokens: torch.Tensor, prompt_width: int) -> int:
    """An EOS id the model emits mid-generation: row 0's first new token from step 2 on not seen before.

    Preferring a token the other rows never emit makes rows finish at different steps, so padding
    after EOS is exercised.
    """
    new_tokens = greedy_tokens[:, prompt_width:].tolist()
    first_row, other_rows = new_tokens[0], {t for row in new_tokens[1:] for t in row}
    candidates = [token for step, token in enumerate(first_row) if step >= 1 and token not in first_row[:step]]
    preferred = [token for token in candidates if token not in other_rows]
    if preferred or candidates:
        return int((preferred or candidates)[0])
    return int(first_row[min(1, len(first_row) - 1)])
