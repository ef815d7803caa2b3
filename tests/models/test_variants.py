"""A scenario's config variant: past_window builds the models that compute in chunks with chunks as short as the
window, so its prompt crosses one; every other model, and every other scenario, keeps its one build."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fullgraph.check.scenarios import PAST_WINDOW_PROMPT, SCENARIOS
from pytest_fullgraph.models import Registry, builtin_registry
from pytest_fullgraph.models.build import tiny_config
from pytest_fullgraph.models.registry import ModelSpec
from pytest_fullgraph.models.shrink import SLIDING_WINDOW
from pytest_fullgraph.models.variants import SHORT_CHUNKS, describe, variant_overrides
from pytest_fullgraph.plugin.built_models import Built, ModelCache, Unavailable


@pytest.mark.parametrize(("model_type", "cut"), [
    ("mamba2", ["chunk_size=16"]),  # a chunked scan of 256
    ("llama4", ["text_config.attention_chunk_size=16"]),  # chunked attention of 8192, in the text sub-config
    ("bamba", ["mamba_chunk_size=16"]),
    ("minimax", ["block_size=16"]),  # lightning attention's blocks
    ("llama", []),
    ("big_bird", []),  # its block_size is sparse attention's, not a chunk
])
def test_short_chunks_cut_every_chunk_field_longer_than_the_window(model_type: str, cut: list[str]) -> None:
    config = tiny_config(model_type)
    assert describe(variant_overrides(SHORT_CHUNKS, config)) == cut
    assert SCENARIOS["past_window"].model_variant == SHORT_CHUNKS and PAST_WINDOW_PROMPT > SLIDING_WINDOW
    if cut:
        text = tiny_config(model_type, SHORT_CHUNKS).get_text_config()
        field = cut[0].split("=")[0].split(".")[-1]
        assert getattr(text, field) == SLIDING_WINDOW != getattr(config.get_text_config(), field)


def test_an_unknown_variant_is_named_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown config variant 'long'; valid: short_chunks"):
        variant_overrides("long", tiny_config("llama"))


def test_the_cache_builds_a_variant_only_where_it_changes_the_config() -> None:
    """mamba2's past_window model is its own build with chunks of 16, its basic scenarios' model the plain one;
    llama's variant changes nothing, so both lookups give the one build."""
    cache = ModelCache(builtin_registry())
    plain, short = cache.get("mamba2"), cache.get("mamba2", variant=SHORT_CHUNKS)
    assert isinstance(plain, Built) and isinstance(short, Built)
    assert (plain.model.config.chunk_size, short.model.config.chunk_size) == (256, SLIDING_WINDOW)
    assert cache.get("llama", variant=SHORT_CHUNKS) is cache.get("llama")
    # a model with a known reason is never built, its variant neither: the same skip, not a failed build
    assert isinstance(cache.get("gemma4_assistant", variant=SHORT_CHUNKS), Unavailable)


def test_a_registered_model_is_built_as_given_for_every_variant() -> None:
    """A conftest's model has no tiny config to vary: past_window runs it as registered."""
    calls: list[str] = []

    def build() -> Any:
        calls.append("build")
        return tiny_model()

    registry = Registry([ModelSpec("mine", build)])
    cache = ModelCache(registry)
    assert cache.get("mine", variant=SHORT_CHUNKS) is cache.get("mine") and calls == ["build"]


def tiny_model() -> Any:
    from pytest_fullgraph import build_tiny

    return build_tiny("llama")
