"""Every causal-LM type of the installed transformers is registered: it builds tiny and generates eagerly, or it
carries the reason it cannot. A type a newer transformers adds is covered by the generic shrink (or fails here,
by name, until it gets a record)."""

from __future__ import annotations

import pytest
import torch

from pytest_fullgraph.models import (
    MAX_TINY_PARAMETERS,
    TooLargeToBuild,
    build_tiny,
    builtin_registry,
    installed_model_types,
    tiny,
    tiny_spec,
)
from pytest_fullgraph.models.shrink import GENERIC_SHRINK
from pytest_fullgraph.models.survey import survey

#: The issue's bar for breadth: at least this many types build and generate; each one under this many parameters.
MIN_BUILDABLE = 190
MAX_PARAMETERS = 2_000_000


@pytest.mark.parametrize("model_type", installed_model_types())
def test_every_installed_type_builds_and_generates_or_has_a_reason(model_type: str) -> None:
    registry = builtin_registry()
    row = survey(registry, model_type)
    if registry[model_type].known_reason:
        assert row["status"] == f"skipped: {registry[model_type].known_reason}"
        return
    assert row["status"] == "ok", f"{model_type}: {row['status']}"
    assert row["parameters"] < MAX_PARAMETERS, f"{model_type} has {row['parameters']:,} parameters"


def test_at_most_a_few_types_are_skipped_with_a_reason() -> None:
    registry = builtin_registry()
    skipped = [model_type for model_type in installed_model_types() if registry[model_type].known_reason]
    assert len(installed_model_types()) - len(skipped) >= MIN_BUILDABLE, skipped


def test_a_type_without_a_record_gets_the_generic_shrink() -> None:
    unrecorded = next(model_type for model_type in installed_model_types() if model_type not in tiny.RECORDS)
    spec = tiny_spec(unrecorded)
    assert (spec.name, spec.model_type, spec.known_reason) == (unrecorded, unrecorded, "")
    model = spec.build()
    assert model.config.num_hidden_layers == GENERIC_SHRINK["num_hidden_layers"]


def test_records_only_name_real_types_once() -> None:
    from transformers import CONFIG_MAPPING

    assert set(tiny.RECORDS) <= set(CONFIG_MAPPING), set(tiny.RECORDS) - set(CONFIG_MAPPING)
    assert all(record.known_reason or record.overrides or "popular" in record.tags
               for record in tiny.RECORDS.values()), "a record without overrides, reason or tag is noise"


def test_a_build_too_large_for_a_tiny_model_is_refused_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sub-config the shrink does not reach (llama4 was 108B parameters) must be an error, not an OOM kill."""
    from pytest_fullgraph.models import build

    monkeypatch.setattr(build, "MAX_TINY_PARAMETERS", 1000)
    with pytest.raises(TooLargeToBuild, match=r"the tiny llama would have 22,688 parameters, over the 1,000"):
        build_tiny("llama")


def test_the_full_size_of_a_type_is_counted_without_allocating_it() -> None:
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    with torch.device("meta"):
        full = AutoModelForCausalLM.from_config(CONFIG_MAPPING["llama"]())
    assert sum(parameter.numel() for parameter in full.parameters()) > MAX_TINY_PARAMETERS
