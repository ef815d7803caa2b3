"""transformers' ``generate`` as the checks call it: typed, seeded, and with the static-cache config.

The one place that knows how a check asks transformers for tokens; levels, comparison and the property suite
all go through it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

T = TypeVar("T")

#: transformers' generate refusing a mode for a kind of model (by name, or the cache it lacks: models that build
#: their own, use_cache=False): no reference, so no verdict (a skip)
GENERATE_REFUSES = re.compile(r"assisted generation is not supported with stateful models|"
                              r"cannot use beam search with a cache currently|Assisted decoding requires a cache|"
                              r"Cannot use prefill chunking without a cache|Chunked prefill cannot split")


class UnsupportedGeneration(ValueError):
    """A generation setting or model our loop does not implement; the message names it.

    Defined here, beside the calls into ``generate``, so both loop modules raise the same class; users import
    it from ``pytest_fullgraph.loop.decode``.
    """


def generate_fn(model: PreTrainedModel) -> Callable[..., torch.Tensor]:
    """``model.generate`` typed as it behaves (transformers' stubs make it ``Tensor | Module``)."""
    return cast("Callable[..., torch.Tensor]", cast(Any, model).generate)


def seeded(seed: int, run: Callable[[], T]) -> T:
    """Run after ``torch.manual_seed(seed)``: every sampled run of a check draws the same numbers."""
    import torch

    torch.manual_seed(seed)
    return run()


def generate(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int) -> torch.Tensor:
    """``model.generate(**inputs, generation_config=config)`` after seeding."""
    return seeded(seed, lambda: generate_fn(model)(**inputs, generation_config=config))


def recompute_config(config: GenerationConfig) -> GenerationConfig:
    """The config recomputing every step without a cache (``use_cache=False``): transformers PR #48289's reference
    for a cache path, which the cache level and a mismatch's note both run."""
    config = copy.deepcopy(config)
    config.use_cache, config.cache_implementation = False, None
    return config


def static_cache_config(config: GenerationConfig) -> GenerationConfig:
    """The config with transformers' static cache, run eagerly (transformers would auto-compile it)."""
    config = copy.deepcopy(config)
    config.cache_implementation = "static"
    config.disable_compile = True
    return config
