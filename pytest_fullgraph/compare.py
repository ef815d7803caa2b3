"""Comparing token tensors exactly, and explaining a difference: where, how close eager's choice was, and
whether ``generate``'s own static-cache path is to blame."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.generation import generate, static_cache_config
from pytest_fullgraph.results import Mismatch, first_line

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel


def first_difference(eager: torch.Tensor, compiled: torch.Tensor, prompt_width: int) -> Mismatch:
    """The first (row, position) where two token tensors differ, shapes allowed to differ."""
    rows = min(eager.shape[0], compiled.shape[0])
    length = min(eager.shape[1], compiled.shape[1])
    for position in range(length):
        for row in range(rows):
            if int(eager[row, position]) != int(compiled[row, position]):
                return Mismatch(row, position, position - prompt_width, int(eager[row, position]),
                                int(compiled[row, position]), None, list(eager.shape), list(compiled.shape))
    longer = eager if eager.shape[1] > length else compiled
    token = int(longer[0, length]) if longer.shape[1] > length else None
    return Mismatch(0, length, length - prompt_width, token if longer is eager else None,
                    token if longer is compiled else None, None, list(eager.shape), list(compiled.shape))


def eager_logit_gap(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                    mismatch: Mismatch) -> float | None:
    """Top-1 minus top-2 logit of the eager step at the mismatch: tiny gaps mean a float-order flip."""
    config = copy.deepcopy(config)
    config.output_logits = True
    config.return_dict_in_generate = True
    output: Any = generate(model, inputs, config, seed)
    logits = getattr(output, "logits", None)
    if not logits or not 0 <= mismatch.step < len(logits):
        return None
    top = logits[mismatch.step][mismatch.row].float().topk(2).values
    return float(top[0] - top[1])


def static_cache_verdict(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                         eager: torch.Tensor) -> str:
    """Whether ``generate`` itself changes its tokens with a static cache, which our loop must use.

    Measured: gpt_neo's local attention slices its band mask by the key length, so with a static cache
    longer than ``window_size`` its own ``generate(cache_implementation="static")`` differs from the default.
    That is the model's bug, not the loop's; the message says which.
    """
    import torch

    try:
        static = generate(model, inputs, static_cache_config(config), seed)
    except Exception as error:  # the note is best effort; the mismatch stands
        return f" (model.generate with a static cache failed: {type(error).__name__}: {first_line(error)})"
    if torch.equal(static, eager):
        return "; model.generate with a static cache gives the default tokens, so the difference is the loop's"
    where = first_difference(eager, static, int(inputs["input_ids"].shape[1]))
    return (f"; model.generate with a static cache differs from the default too (row {where.row}, position "
            f"{where.position}: {where.eager_token} vs {where.compiled_token}): the model's static-cache path "
            "is wrong, not the loop")
