"""A scenario made concrete for one model: its prompts, its ``GenerationConfig`` and the values it picks from the
model's own greedy run (an EOS id, tokens to forbid or force, stop strings with a tokenizer of the tiny vocabulary).

``scenarios`` says what a check runs, as data; this module turns that data into tensors and configs, which needs
the model (its vocabulary, device, a plain greedy run) and transformers.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.check.scenarios import DRAFT, TOKENIZER, GreedyToken, NewTokens, PickedEos, Scenario, TotalLength
from pytest_fullgraph.core.generation import generate
from pytest_fullgraph.core.model_facts import model_device, vocab_size
from pytest_fullgraph.models.tiny import FIRST_PROMPT_ID, PAD_TOKEN_ID

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel


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


def generation_config(scenario: Scenario, max_new_tokens: int, eos_token_id: int | None,
                      settings: Mapping[str, Any] | None = None) -> GenerationConfig:
    """The scenario's config; ``settings`` are its ``settings`` resolved for the model (``resolve``)."""
    from transformers import GenerationConfig

    values: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": scenario.do_sample,
                              "eos_token_id": eos_token_id, "pad_token_id": PAD_TOKEN_ID}
    if scenario.do_sample:
        values.update(temperature=scenario.temperature, top_k=scenario.top_k, top_p=scenario.top_p)
    values.update(settings or {})
    if "max_length" in values:
        values["max_new_tokens"] = None  # max_new_tokens would win over max_length
    if isinstance(values.get("watermarking_config"), dict):
        from transformers import WatermarkingConfig

        values["watermarking_config"] = WatermarkingConfig(**values["watermarking_config"])
    return GenerationConfig(**values)


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


def needs_greedy_tokens(scenario: Scenario) -> bool:
    """Whether resolving the scenario needs a plain greedy run of the model (an EOS or tokens to pick)."""
    return scenario.uses_eos or any(isinstance(value, GreedyToken) for value in _leaves(scenario.settings))


def plain_greedy(scenario: Scenario) -> Scenario:
    """The scenario's prompts with plain greedy decoding: the run its tokens are picked from."""
    return Scenario(f"{scenario.name}_plain", "plain greedy", prompt_lengths=scenario.prompt_lengths,
                    seed=scenario.seed)


def pick_eos_token(greedy_tokens: torch.Tensor, prompt_width: int) -> int:
    """An EOS id the model emits mid-generation, never one that ends every row at its first new token.

    Row 0's first new token from step 2 on not seen before in that row, preferring one the other rows never emit
    (rows then finish at different steps, so padding after EOS is exercised). A tiny random model often repeats
    one token: then row 0's first token, which ends row 0 at once while another row goes on; but when every row
    starts with that token it would end generation at the prefill, leaving nothing to decode (transformers then
    compiles nothing), so a token another row emits later is taken, else the smallest id no row emits (it never
    fires; the EOS handling still runs at every step).
    """
    new_tokens = greedy_tokens[:, prompt_width:].tolist()
    later_firsts = [[token for step, token in enumerate(row) if step >= 1 and token not in row[:step]]
                    for row in new_tokens]
    other_rows = {token for row in new_tokens[1:] for token in row}
    preferred = [token for token in later_firsts[0] if token not in other_rows]
    if preferred or later_firsts[0]:
        return int((preferred or later_firsts[0])[0])
    first_tokens = {row[0] for row in new_tokens if row}
    if len(first_tokens) > 1:
        return int(new_tokens[0][0])
    for candidates in later_firsts[1:]:
        if candidates:
            return int(candidates[0])
    emitted = {token for row in new_tokens for token in row}
    return next(token for token in range(len(emitted) + 1) if token not in emitted)


def resolve(scenario: Scenario, greedy_tokens: torch.Tensor | None, prompt_width: int, max_new_tokens: int,
            eos_token_id: int | None, vocab: int) -> dict[str, Any]:
    """The scenario's settings with every ``GreedyToken``, ``EOS`` and length replaced by its value for this
    model and run; stop strings become the tiny tokenizer's text of their tokens."""

    def value(item: Any, key: str) -> Any:
        if isinstance(item, GreedyToken):
            if greedy_tokens is None:
                raise ValueError(f"scenario {scenario.name!r}: {key} picks a greedy token but no greedy run was made")
            step = min(item.step, greedy_tokens.shape[1] - prompt_width - 1)
            token = int(greedy_tokens[item.row, prompt_width + step])
            return tiny_tokenizer(vocab).convert_ids_to_tokens(token) if key == "stop_strings" else token
        if isinstance(item, PickedEos):
            return eos_token_id
        if isinstance(item, NewTokens):
            return max_new_tokens + item.delta + (prompt_width if isinstance(item, TotalLength) else 0)
        if isinstance(item, list | tuple):
            return type(item)(value(part, key) for part in item)
        if isinstance(item, dict):
            return {name: value(part, key) for name, part in item.items()}
        return item

    return {key: value(item, key) for key, item in {**scenario.context, **scenario.settings}.items()}


def scenario_values(model: PreTrainedModel, inputs: dict[str, Any], scenario: Scenario,
                     max_new_tokens: int) -> tuple[int | None, dict[str, Any]]:
    """The scenario's EOS id (one the model really emits mid-generation) and its settings resolved for this
    model, from a plain greedy run of its prompts when it picks tokens."""
    prompt_width = int(inputs["input_ids"].shape[1])
    free = None
    if needs_greedy_tokens(scenario):
        with model_generation_defaults(model, None):
            free = generate(model, inputs, generation_config(plain_greedy(scenario), max_new_tokens, None),
                            scenario.seed)
    eos = pick_eos_token(free, prompt_width) if scenario.uses_eos and free is not None else None
    return eos, resolve(scenario, free, prompt_width, max_new_tokens, eos, vocab_size(model))


def generate_kwargs(scenario: Scenario, model: PreTrainedModel) -> dict[str, Any]:
    """The scenario's further ``generate`` arguments, ``TOKENIZER`` replaced by the tiny tokenizer of the model's
    vocabulary and ``DRAFT`` by a draft model for it (``models.draft``)."""
    def value(item: Any) -> Any:
        if item == TOKENIZER:
            return tiny_tokenizer(vocab_size(model))
        if item == DRAFT:
            from pytest_fullgraph.models.draft import build_draft

            return build_draft(model)
        return item

    return {key: value(item) for key, item in scenario.generate_kwargs.items()}


def _leaves(value: Any) -> Iterator[Any]:
    """Every plain value in nested settings: a ``GreedyToken`` may sit deep in a list of lists (``bad_words_ids``)."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


STOP_STRING_PROBE = "abcdef"


@functools.cache
def tiny_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer whose token ``i`` is the text ``<i>``: what stop strings need (the tiny models ship
    no tokenizer, and none can be downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"<{index}>": index for index in range(vocab)}
    # StopStringCriteria measures each token's text by decoding it after this word ("abcdef"), so it must be one
    words[STOP_STRING_PROBE] = vocab
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<0>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<0>", unk_token="<0>")
