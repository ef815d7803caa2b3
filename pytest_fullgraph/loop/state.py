"""What the body of the ``while_loop`` form carries from step to step: the cache's tensors.

A ``while_loop`` body is traced once and may not mutate tensors it captured. So the cache is split in two: its
tensors are loop state, and its layer objects are templates. Each step copies the templates, gives the copies
clones of the carried tensors (which the layers' own ``update`` code then changes in place, as in eager
generation) and returns the updated tensors. Whatever a layer keeps in Python must not change between decode
steps: transformers' static sliding-window layer counts its fill in a Python int and rolls its buffer once
full, so before prefill it is replaced by a full-length layer of the same kind that lets the sliding-window
attention mask do the windowing (keys outside the window are masked out instead of evicted). The copies are
``loop_tracing.view`` stand-ins; the logits processors over the loop's buffer are ``loop_processors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# module-level: torch 2.11's dynamo refuses an import inside traced code (GB0022, "Bad import result"),
# and strict export traces the cache's construction
from transformers.cache_utils import LinearAttentionAndStaticFullAttentionLayer, StaticCache, StaticLayer

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.loop.tracing import prepare_views, view


def _length_when_asked(layer: Any) -> Any:
    """The sequence length as the sliding layer reports it: the value when asked, not a live counter.

    transformers' static sliding layer answers ``get_seq_length`` with a Python int, while the full static layer
    answers with its counter tensor, which its ``update`` then increments in place. A model that asks for the
    length before updating the cache and uses it after (inkling's query offset for its relative-position bias)
    sees the old length from the one and the new from the other, so the replacement must answer as the layer it
    replaces does: a copy, taken at the call.
    """
    if not layer.is_initialized:
        return 0
    return layer.cumulative_length.clone()


class WholeSlidingLayer(StaticLayer):
    """A sliding-window layer that keeps every position: the mask, not eviction, limits attention to the window.

    Its Python state is constant (no fill counter, no roll), so one traced ``while_loop`` body serves every step.
    """

    is_sliding = True
    get_seq_length = _length_when_asked


class WholeHybridSlidingLayer(LinearAttentionAndStaticFullAttentionLayer):
    """``WholeSlidingLayer`` for hybrid layers that carry linear-attention states beside sliding attention."""

    is_sliding = True
    get_seq_length = _length_when_asked


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
    prepare_views(cache, *layers)  # the stand-ins CarriedCache.rebuild makes in each step
    return cache


#: Attributes of transformers' cache layers that change while decoding, by name (older dynamo cannot list an
#: object's attributes): tensors, and dicts of per-state tensors (linear attention's conv and recurrent states).
#: ``tests/loop/test_loop_state.py`` checks that these cover every tensor each carried layer class holds after prefill.
CARRIED_TENSORS = ("keys", "values", "cumulative_length", "indexer_keys", "indexer_cumulative_length",
                   "indexer_position_ids")
CARRIED_TENSOR_DICTS = ("conv_states", "recurrent_states")
#: Python dicts a layer may write into during a step (linear attention's per-state flags): each step gets copies,
#: so the template's stay as prefill left them.
STEP_DICTS = ("is_conv_states_initialized", "is_recurrent_states_initialized", "has_previous_state",
              "conv_kernel_size")


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
            for attribute in CARRIED_TENSORS:
                if isinstance(getattr(layer, attribute, None), torch.Tensor):
                    self.slots.append(_Slot(index, attribute))
            for attribute in CARRIED_TENSOR_DICTS:
                states = getattr(layer, attribute, None)
                if isinstance(states, dict):
                    self.slots.extend(_Slot(index, attribute, key, True) for key, item in states.items()
                                      if isinstance(item, torch.Tensor))

    def tensors(self, cache: Any | None = None) -> tuple[torch.Tensor, ...]:
        """The carried tensors of ``cache`` (default: the prefilled template), in slot order."""
        layers = (cache if cache is not None else self.template).layers
        return tuple(_read(layers[slot.layer], slot) for slot in self.slots)

    def rebuild(self, tensors: tuple[torch.Tensor, ...]) -> Any:
        """A cache for one step: stand-ins for the template layers holding clones of ``tensors`` (the layers
        update them in place; the clones belong to this step, so the loop's inputs stay untouched)."""
        layers = [view(layer) for layer in self.template.layers]
        for layer in layers:
            for attribute in (*CARRIED_TENSOR_DICTS, *STEP_DICTS):
                values = getattr(layer, attribute, None)
                if isinstance(values, dict):
                    setattr(layer, attribute, dict(values))  # the step must not write into the template's dict
        for slot, tensor in zip(self.slots, tensors, strict=True):
            if slot.in_dict:
                getattr(layers[slot.layer], slot.attribute)[slot.key] = tensor.clone()
            else:
                setattr(layers[slot.layer], slot.attribute, tensor.clone())
        cache = view(self.template)
        cache.layers = layers
        return cache


def _read(layer: Any, slot: _Slot) -> torch.Tensor:
    value = getattr(layer, slot.attribute)
    return value[slot.key] if slot.in_dict else value
