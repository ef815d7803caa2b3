"""What the body of the ``while_loop`` form carries from step to step: the cache's tensors, and logits
processors that see a full-size sequence buffer with its valid length.

A ``while_loop`` body is traced once and may not mutate tensors it captured. So the cache is split in two: its
tensors are loop state, and its layer objects are templates. Each step copies the templates, gives the copies
clones of the carried tensors (which the layers' own ``update`` code then changes in place, as in eager
generation) and returns the updated tensors. Whatever a layer keeps in Python must not change between decode
steps: transformers' static sliding-window layer counts its fill in a Python int and rolls its buffer once
full, so before prefill it is replaced by a full-length layer of the same kind that lets the sliding-window
attention mask do the windowing (keys outside the window are masked out instead of evicted).

Processors are traced once too, on the loop's full-size sequence buffer: those that read only the scores run
unchanged, those that read which tokens occurred see the unused tail filled with the last valid token (a
token already present, so the set they read is unchanged), and those that read the sequence's length are
re-expressed with the loop's length tensor. Anything else raises ``UnsupportedGeneration`` naming it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import LinearAttentionAndStaticFullAttentionLayer, StaticLayer

from pytest_fullgraph.generation import UnsupportedGeneration


class WholeSlidingLayer(StaticLayer):
    """A sliding-window layer that keeps every position: the mask, not eviction, limits attention to the window.

    Its Python state is constant (no fill counter, no roll), so one traced ``while_loop`` body serves every step.
    """

    is_sliding = True


class WholeHybridSlidingLayer(LinearAttentionAndStaticFullAttentionLayer):
    """``WholeSlidingLayer`` for hybrid layers that carry linear-attention states beside sliding attention."""

    is_sliding = True


#: Replacements made before prefill, by the name of transformers' layer class.
WHOLE_LAYERS: dict[str, type] = {
    "StaticSlidingWindowLayer": WholeSlidingLayer,
    "LinearAttentionAndStaticSlidingWindowAttentionLayer": WholeHybridSlidingLayer,
}
#: Layer classes whose Python state stays constant across decode steps (what changes is in tensors).
CARRIED_LAYERS = frozenset({
    "StaticLayer", "StaticIndexedLayer", "LinearAttentionLayer", "LinearAttentionAndStaticFullAttentionLayer",
    "DummyLayer", *(whole.__name__ for whole in WHOLE_LAYERS.values()),
})


def loop_cache(model: Any, max_cache_len: int) -> Any:
    """The static cache ``generate`` would build, with each layer that keeps Python counters replaced (see
    ``WHOLE_LAYERS``); any layer class not known to be carriable raises ``UnsupportedGeneration``."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    layers = []
    for layer in cache.layers:
        name = type(layer).__name__
        if name in WHOLE_LAYERS:
            kwargs = {"number_of_states": layer.number_of_states} if hasattr(layer, "number_of_states") else {}
            layer = WHOLE_LAYERS[name](max_cache_len=max_cache_len, **kwargs)
        elif name not in CARRIED_LAYERS:
            raise UnsupportedGeneration(f"loop='while' cannot carry cache layer {name} of {type(model).__name__} "
                                        f"as loop state (carried: {', '.join(sorted(CARRIED_LAYERS))})")
        layers.append(layer)
    cache.layers = layers
    return cache


@dataclass(frozen=True)
class _Slot:
    """Where one carried tensor lives in a layer: ``layer.attribute``, or ``layer.attribute[key]`` for the
    dicts of linear-attention states."""

    layer: int
    attribute: str
    key: Any = None
    in_dict: bool = False


class CarriedCache:
    """A prefilled cache split into loop state (``tensors``) and templates that ``rebuild`` a cache from it."""

    def __init__(self, cache: Any) -> None:
        self.template = cache
        self.slots: list[_Slot] = []
        for index, layer in enumerate(cache.layers):
            for attribute, value in vars(layer).items():  # insertion order: the same for every layer object
                if isinstance(value, torch.Tensor):
                    self.slots.append(_Slot(index, attribute))
                elif isinstance(value, dict):
                    self.slots.extend(_Slot(index, attribute, key, True) for key, item in value.items()
                                      if isinstance(item, torch.Tensor))

    def tensors(self, cache: Any | None = None) -> tuple[torch.Tensor, ...]:
        """The carried tensors of ``cache`` (default: the prefilled template), in slot order."""
        layers = (cache if cache is not None else self.template).layers
        return tuple(_read(layers[slot.layer], slot) for slot in self.slots)

    def rebuild(self, tensors: tuple[torch.Tensor, ...]) -> Any:
        """A cache for one step: copies of the template layers holding clones of ``tensors`` (the layers update
        them in place; the clones belong to this step, so the loop's inputs stay untouched)."""
        layers = [copy.copy(layer) for layer in self.template.layers]
        for layer in layers:
            for attribute, value in vars(layer).items():
                if isinstance(value, dict):
                    setattr(layer, attribute, dict(value))  # the copy must not write into the template's dict
        for slot, tensor in zip(self.slots, tensors, strict=True):
            if slot.in_dict:
                getattr(layers[slot.layer], slot.attribute)[slot.key] = tensor.clone()
            else:
                setattr(layers[slot.layer], slot.attribute, tensor.clone())
        cache = copy.copy(self.template)
        cache.layers = layers
        return cache


def _read(layer: Any, slot: _Slot) -> torch.Tensor:
    value = getattr(layer, slot.attribute)
    return value[slot.key] if slot.in_dict else value


#: Processors that read only the scores: traced once, they do in every step what they do in ``generate``.
SCORE_ONLY = frozenset({
    "TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "TopHLogitsWarper", "MinPLogitsWarper",
    "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "InfNanRemoveLogitsProcessor",
    "LogitNormalization", "SuppressTokensLogitsProcessor",
})
#: Processors that read which tokens the sequence holds, not its length or order.
TOKEN_SET = frozenset({"RepetitionPenaltyLogitsProcessor"})


def _masked(scores: torch.Tensor, token_ids: torch.Tensor, when: torch.Tensor) -> torch.Tensor:
    """``scores`` with ``token_ids`` set to -inf where ``when`` holds (``generate``'s EOS suppression)."""
    vocab = torch.arange(scores.shape[-1], device=scores.device)
    return torch.where(torch.isin(vocab, token_ids.to(scores.device)) & when, -math.inf, scores)


def _forced(scores: torch.Tensor, token_ids: Any, when: torch.Tensor) -> torch.Tensor:
    """Every token -inf but ``token_ids`` (0) where ``when`` holds (``generate``'s forced BOS/EOS)."""
    forced = torch.full_like(scores, -math.inf)
    forced[:, token_ids] = 0
    return torch.where(when, forced, scores)


#: Processors that read the sequence's length, given the length (a 0-d tensor) instead of a sequence of it.
LENGTH_RULES: dict[str, Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "MinLengthLogitsProcessor": lambda p, length, scores: _masked(scores, p.eos_token_id, length < p.min_length),
    "MinNewTokensLengthLogitsProcessor": lambda p, length, scores: _masked(
        scores, p.eos_token_id, length - p.prompt_length_to_skip < p.min_new_tokens),
    "SuppressTokensAtBeginLogitsProcessor": lambda p, length, scores: _masked(
        scores, p.begin_suppress_tokens, length == p.begin_index),
    "ForcedEOSTokenLogitsProcessor": lambda p, length, scores: _forced(scores, p.eos_token_id,
                                                                       length == p.max_length - 1),
    "ForcedBOSTokenLogitsProcessor": lambda p, length, scores: _forced(scores, p.bos_token_id, length == 1),
}


def check_processors(processors: Any) -> None:
    """Refuse, naming it, a processor the loop cannot trace once for every step."""
    for processor in processors:
        name = type(processor).__name__
        if name not in SCORE_ONLY | TOKEN_SET | set(LENGTH_RULES):
            raise UnsupportedGeneration(f"loop='while' does not support {name}: it reads the growing sequence in "
                                        "a way one traced step cannot repeat; use loop='unrolled'")


def process(processors: Any, buffer: torch.Tensor, length: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """``processors(sequence, scores)`` where the sequence is ``buffer[:, :length]``, without slicing to a
    data-dependent shape."""
    view: torch.Tensor | None = None
    for processor in processors:
        name = type(processor).__name__
        if name in SCORE_ONLY:
            scores = processor(buffer, scores)
        elif name in TOKEN_SET:
            if view is None:
                last = buffer.index_select(1, (length - 1).reshape(1))
                view = torch.where(torch.arange(buffer.shape[1], device=buffer.device) < length, buffer, last)
            # a copy made in the step: the processor's no-op device moves (attribute writes) stay in the step
            scores = copy.copy(processor)(view, scores)
        else:
            scores = LENGTH_RULES[name](processor, length, scores)
    return scores
