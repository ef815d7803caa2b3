"""Tags derived from a model type's full-size config, for selections such as ``tag:moe`` or ``tag:sliding``.

They are read from the defaults of the config class (the full-size model, not the tiny one), so a model type
that a newer transformers adds is tagged without a record. Each rule is a row of ``TAG_RULES``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

#: Layer kinds (``layer_types`` and its per-family spellings) that are attention over the whole past or a window.
ATTENTION_KINDS = frozenset({"full_attention", "sliding_attention", "chunked_attention", "attention",
                             "indexed_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                             "hybrid", "hybrid_sliding"})
#: Layer kinds that carry a recurrent state instead of (or beside) a key/value cache.
RECURRENT_KINDS = frozenset({"linear_attention", "mamba", "mamba2", "conv", "recurrent", "rglru", "ssm", "m"})
_LAYER_LISTS = ("layer_types", "layers_block_type", "block_types", "layers_block_types")
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_STATE_SIZES = ("state_size", "ssm_state_size", "mamba_d_state", "d_state")
_TOWER_WORDS = ("vision", "audio", "speech", "image", "video", "depth")
#: Fields that cut a sequence into chunks computed apart (chunked attention, a state-space model's chunked scan), in
#: every config that has them, and those that do so in one model type only (``block_size`` is big_bird's sparse
#: attention's block elsewhere).
CHUNK_FIELDS = ("attention_chunk_size", "chunk_size", "mamba_chunk_size")
CHUNK_FIELDS_OF_TYPE: dict[str, tuple[str, ...]] = {"minimax": ("block_size",)}


def _layer_kinds(config: Any) -> set[str]:
    kinds: set[str] = set()
    for name in _LAYER_LISTS:
        try:
            value = getattr(config, name, None)
        except Exception:  # derived properties of some configs raise on a default instance
            continue
        if isinstance(value, (list, tuple)):
            kinds.update(str(kind) for kind in value)
    return kinds


def _positive(config: Any, names: tuple[str, ...]) -> int:
    values = [getattr(config, name, None) for name in names]
    return max((value for value in values if isinstance(value, int) and not isinstance(value, bool)), default=0)


def _has_window(config: Any) -> bool:
    """A sliding window (gpt_neo's local layers call it ``window_size``)."""
    return _positive(config, ("sliding_window", "window_size")) > 0 or "sliding_attention" in _layer_kinds(config)


def chunk_fields(config: Any) -> tuple[str, ...]:
    """The fields of this config's type that cut a sequence into chunks."""
    return CHUNK_FIELDS + CHUNK_FIELDS_OF_TYPE.get(str(getattr(config, "model_type", "")), ())


def _has_chunks(config: Any) -> bool:
    return _positive(config, chunk_fields(config)) > 0


def _is_recurrent_only(config: Any) -> bool:
    kinds = _layer_kinds(config)
    if kinds:
        return not kinds & ATTENTION_KINDS and bool(kinds & RECURRENT_KINDS)
    return _positive(config, _STATE_SIZES) > 0


def _is_hybrid(config: Any) -> bool:
    kinds = _layer_kinds(config)
    return bool(kinds & ATTENTION_KINDS) and bool(kinds & RECURRENT_KINDS)


def _has_towers(config: Any) -> bool:
    return any(word in name for name in getattr(type(config), "sub_configs", {}) or {} for word in _TOWER_WORDS)


#: (tag, what it means, rule over the full-size config, or over its text sub-config for composite models)
TAG_RULES: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("moe", "mixture-of-experts layers", lambda config: _positive(config, _EXPERT_COUNTS) > 1),
    ("mla", "multi-head latent attention (low-rank keys and values)",
     lambda config: _positive(config, ("kv_lora_rank",)) > 0),
    ("sliding", "sliding-window attention layers", _has_window),
    ("chunked", "attention or a state-space scan computed in chunks", _has_chunks),
    ("ssm", "recurrent / state-space layers only, no attention", _is_recurrent_only),
    ("hybrid", "attention layers mixed with recurrent, linear-attention or state-space layers", _is_hybrid),
    ("multimodal", "vision, audio or other towers beside the language model", _has_towers),
    ("encoder-decoder", "the causal LM is the decoder of an encoder-decoder family",
     lambda config: bool(getattr(config, "is_encoder_decoder", False))),
)
#: Tags that records give by hand; ``popular`` is the curated list of ``tiny.POPULAR``.
RECORD_TAGS = {"popular": "a curated list of widely used families"}
TAG_MEANINGS = {**{tag: meaning for tag, meaning, _ in TAG_RULES}, **RECORD_TAGS}


def default_config(config_class: Any) -> Any:
    """A default instance, which tells which generic keys a config understands (attribute_map included)."""
    transformers_logger = logging.getLogger("transformers")
    previous_level = transformers_logger.level
    transformers_logger.setLevel(logging.ERROR)  # default configs of some types warn about their own ids
    try:
        return config_class()
    finally:
        transformers_logger.setLevel(previous_level)


def _text_config(config: Any) -> Any | None:
    sub_configs = getattr(type(config), "sub_configs", {}) or {}
    return getattr(config, "text_config", None) if "text_config" in sub_configs else None


@functools.cache
def derived_tags(model_type: str) -> frozenset[str]:
    """The ``TAG_RULES`` tags of a transformers model type; none when its default config cannot be made."""
    from transformers import CONFIG_MAPPING

    try:
        config = default_config(CONFIG_MAPPING[model_type])
    except Exception:  # e.g. gemma4_assistant: its own defaults fail its validation in 5.24
        return frozenset()
    configs = [config, *filter(None, [_text_config(config)])]
    return frozenset(tag for tag, _, rule in TAG_RULES if any(holds(rule, each) for each in configs))


def holds(rule: Callable[[Any], bool], config: Any) -> bool:
    """A rule over a config, False where reading the config raises (a property that needs fields a default
    instance lacks, a heterogeneous config's guard)."""
    try:
        return bool(rule(config))
    except Exception:
        return False


def config_value(config: Any, key: str) -> Any:
    """A config value read past the guard of heterogeneous (per-layer) configs; ``None`` when unreadable."""
    getter = getattr(config, "_getattr_without_heterogeneous_validation", None)
    try:
        return getter(key, None) if getter is not None else getattr(config, key, None)
    except Exception:
        return None
