"""Variants of a tiny config that a scenario builds its models with: the same model type and weights' seed, one kind
of field changed so that the scenario reaches a path the default tiny config never runs.

``short_chunks`` (``past_window``): the fields that split a sequence into chunks computed apart (chunked attention,
a state-space model's chunked scan, lightning attention's blocks) cut to the sliding window's length, so that a
prompt longer than the window crosses a chunk boundary too. The default tiny configs keep the full-size chunks
(8192, 256, 128, 64): changing them would change every committed verdict of those models, where a variant built for
one scenario changes only that scenario's checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_fullgraph.models.shrink import SLIDING_WINDOW
from pytest_fullgraph.models.tags import chunk_fields, config_value

SHORT_CHUNKS = "short_chunks"
#: Each variant and what it changes, for the scenario's description and the listings.
VARIANTS: dict[str, str] = {
    SHORT_CHUNKS: f"chunk and block sizes cut to {SLIDING_WINDOW} tokens (attention_chunk_size, chunk_size, "
                  "mamba_chunk_size; minimax's block_size), so a prompt past the window crosses a chunk too",
}


def variant_overrides(variant: str, config: Any) -> dict[str, Any]:
    """The overrides ``variant`` puts over a tiny config (sub-configs as nested dicts, as records write them); empty
    when the variant changes nothing in it, so that the model is built once for both."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; valid: {', '.join(VARIANTS)}")
    return _short_chunks(config)


def _short_chunks(config: Any) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for name in chunk_fields(config):
        value = config_value(config, name)
        if isinstance(value, int) and not isinstance(value, bool) and value > SLIDING_WINDOW:
            overrides[name] = SLIDING_WINDOW
    for name in getattr(type(config), "sub_configs", {}) or {}:
        sub_config = getattr(config, name, None)
        if sub_config is not None and (nested := _short_chunks(sub_config)):
            overrides[name] = nested
    return overrides


def describe(overrides: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``overrides`` as ``field=value`` words, sub-configs' fields under their config's name."""
    words: list[str] = []
    for name, value in overrides.items():
        words += (describe(value, f"{prefix}{name}.") if isinstance(value, Mapping) else [f"{prefix}{name}={value}"])
    return words
