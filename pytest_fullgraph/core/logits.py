"""Recomputing a generation's next-token logits without a cache, in the model's dtype or in float64: the reference
that a mismatch's rounding verdict (``check.compare``) and the cache level's per-step comparison (``levels.cache``)
both measure against, computed one way.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.model_facts import forward_parameters, initial_positions

if TYPE_CHECKING:
    import torch


def next_token_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      hidden_states: bool = False) -> Any:
    """The model's output for the token after ``input_ids`` (one full forward, no cache), positions derived from
    the left-padded mask as ``generate`` derives them: the logits (batch, vocab), or with ``hidden_states`` the
    model output itself (``hidden_states`` per layer, embeddings first)."""
    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False}
    if "position_ids" in forward_parameters(model):
        kwargs["position_ids"] = initial_positions(attention_mask)
    if hidden_states:
        return model(**kwargs, output_hidden_states=True)
    return model(**kwargs).logits[:, -1]


def float64_copy(model: Any) -> Any:
    """A float64 copy of the model: the reference its own dtype's rounding is measured against."""
    import torch

    reference: Any = copy.deepcopy(model)
    if hasattr(reference, "set_experts_implementation"):
        # grouped_mm, the default for mixture-of-experts layers, has no float64 kernel
        with contextlib.suppress(Exception):  # a model without experts refuses the setting
            reference.set_experts_implementation("eager")
    return reference.to(torch.float64)


def rounding_step(dtype: str, magnitude: float) -> float:
    """One unit in the last place of ``dtype`` at ``magnitude``: the smallest change rounding can make there."""
    import torch

    info = torch.finfo(getattr(torch, dtype))
    if magnitude < info.tiny:
        return float(info.tiny)
    return float(info.eps) * 2.0 ** math.floor(math.log2(magnitude))


@dataclass
class StepOutputs:
    """One generation step recomputed from its prefix: the next-token logits (batch, vocab) and the last position's
    hidden state after each layer (embeddings first; empty where the model does not return them)."""

    logits: torch.Tensor
    hidden: list[torch.Tensor]


def recompute_steps(model: Any, sequences: torch.Tensor, attention_mask: torch.Tensor,
                    prompt_width: int) -> list[StepOutputs]:
    """Every step of a generation whose tokens are ``sequences`` recomputed from its own prefix (teacher forced, no
    cache) as ``generate(use_cache=False)`` feeds the model: the padded batch, the mask extended with ones, positions
    from the mask where the forward takes them; logits and hidden states in float64."""
    import torch

    steps = []
    for step in range(int(sequences.shape[1]) - prompt_width):
        mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], step))], dim=-1)
        output = next_token_logits(model, sequences[:, :prompt_width + step], mask, hidden_states=True)
        layers = getattr(output, "hidden_states", None) or ()
        steps.append(StepOutputs(output.logits[:, -1].double(), [layer[:, -1].double() for layer in layers]))
    return steps
