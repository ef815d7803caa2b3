"""How a transformers model type becomes a tiny causal LM with seeded weights: the generic shrink applied to its
full-size config (keys under the fields they reach, ``SHRINK_RULES``, per-layer lists, sub-configs), the type's
record over it, a size check on the meta device, then the build. The data is in ``tiny``; this is the code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.models.shrink import DROP, GENERIC_SHRINK, SHRINK_RULES, SLIDING_WINDOW
from pytest_fullgraph.models.tags import config_value, default_config, holds
from pytest_fullgraph.models.tiny import RECORDS
from pytest_fullgraph.models.variants import variant_overrides

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

DEFAULT_SEED = 0
#: A tiny build with more parameters than this means the shrink did not reach part of the config (a new
#: transformers' sub-config, say): building it could exhaust memory and kill the worker, so it is refused with
#: the count, which is measured on the meta device without allocating anything.
MAX_TINY_PARAMETERS = 50_000_000


class TooLargeToBuild(RuntimeError):
    """A tiny build that would allocate more than ``MAX_TINY_PARAMETERS`` parameters."""


def _knows(default: Any, key: str) -> bool:
    """Whether a config has ``key`` (``attribute_map`` included), without tripping the guard of a heterogeneous
    config (Gemma 4's per-layer ``head_dim`` raises on plain attribute access)."""
    probe = getattr(default, "_hasattr_without_heterogeneous_validation", None)
    try:
        return bool(probe(key)) if probe is not None else hasattr(default, key)
    except Exception:
        return False


def _field_name(default: Any, key: str) -> str | None:
    """The constructor field a key reaches: its ``attribute_map`` target, since transformers sets aliased kwargs
    only after ``__post_init__`` (whose derived values would then come from the defaults); ``None`` for a
    read-only property the config derives itself (mamba's ``layer_types``, bamba's ``layers_block_type``)."""
    name = (getattr(type(default), "attribute_map", {}) or {}).get(key, key)
    return None if isinstance(getattr(type(default), name, None), property) else name


def _under_field_names(default: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` keyed by the fields they reach; a key's own field wins over another key aliased to it."""
    fields: dict[str, Any] = {}
    for key, value in values.items():
        name = _field_name(default, key)
        if name is not None and (name == key or name not in values):
            fields[name] = value
    return fields


def _per_layer_types(default: Any) -> dict[str, Any]:
    """``layer_types`` cut to the shrunk depth, keeping one layer of each kind the full model has (so a
    hybrid or sliding-window model stays one), and the depth that takes. Where layers share key/value caches
    (``num_kv_shared_layers``), each kind gets one layer that stores its cache and one that reuses it."""
    layer_types = config_value(default, "layer_types")
    if _field_name(default, "layer_types") is None or not isinstance(layer_types, list) or not layer_types:
        return {}  # no list, or one the config derives itself from other fields
    kinds = list(dict.fromkeys(layer_types))
    depth = max(GENERIC_SHRINK["num_hidden_layers"], len(kinds))
    result: dict[str, Any] = {}
    shared = config_value(default, "num_kv_shared_layers")
    if isinstance(shared, int) and not isinstance(shared, bool) and shared > 0:
        depth = 2 * len(kinds)
        result["num_kv_shared_layers"] = len(kinds)
    return {**result, "num_hidden_layers": depth, "layer_types": (kinds * depth)[:depth]}


def _shrunk(default: Any) -> dict[str, Any]:
    """The generic shrink for one config (the keys it knows, under their field names), ``SHRINK_RULES``, its
    per-layer list, and each sub-config's shrink (text, vision, audio towers of composite configs)."""
    values: dict[str, Any] = {key: value for key, value in GENERIC_SHRINK.items() if _knows(default, key)}
    window = config_value(default, "sliding_window")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        values["sliding_window"] = min(window, SLIDING_WINDOW)
    for rule in SHRINK_RULES:
        if holds(rule.applies, default):
            values.update(rule.values(default))
    values.update(_per_layer_types(default))
    kwargs = _under_field_names(default, values)
    for name in getattr(type(default), "sub_configs", {}) or {}:
        sub_config = getattr(default, name, None)
        if sub_config is not None and hasattr(sub_config, "to_diff_dict"):
            kwargs[name] = _shrunk_sub_config(sub_config)
    return kwargs


def _shrunk_sub_config(sub_config: Any) -> dict[str, Any]:
    """A sub-config's kwargs: what differs from its class's defaults (a value it derives itself, a conv-state
    count from its layer list say, is then derived again from the shrunk values), its shrink, and every other
    per-layer list of the full depth cut like ``layer_types`` (a vision tower's per-layer widths)."""
    shrunk = _shrunk(sub_config)
    kwargs = {key: value for key, value in sub_config.to_diff_dict().items() if key != "per_layer_config"}
    depth, new_depth = config_value(sub_config, "num_hidden_layers"), shrunk.get(
        _field_name(sub_config, "num_hidden_layers") or "num_hidden_layers")
    if isinstance(depth, int) and isinstance(new_depth, int) and depth > new_depth:
        for key, value in sub_config.to_dict().items():
            if key not in shrunk and isinstance(value, list) and len(value) == depth:
                kinds = list(dict.fromkeys(map(_hashable, value)))
                kwargs[key] = [_unhashable(kind) for kind in (kinds * new_depth)[:new_depth]]
    return {**kwargs, **shrunk}


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _unhashable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def tiny_config_kwargs(model_type: str) -> dict[str, Any]:
    """The constructor kwargs of the tiny config of ``model_type``: the generic shrink (sub-configs and
    per-layer lists included) with the type's record's overrides over it."""
    from transformers import CONFIG_MAPPING

    record = RECORDS.get(model_type)
    return _merged(_shrunk(default_config(CONFIG_MAPPING[model_type])), record.overrides if record else {})


def _merged(kwargs: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` over ``kwargs``; a dict over a sub-config's dict merges into it (a record changes one key of
    ``text_config`` without restating the rest); ``DROP`` removes a key at any depth."""
    merged = dict(kwargs)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return {key: value for key, value in merged.items() if value is not DROP}


def tiny_config(model_type: str, variant: str = "") -> PretrainedConfig:
    """The tiny config of a transformers model type, for building your own model class on it; ``variant``: a
    scenario's variant of it (``variants.VARIANTS``)."""
    from transformers import CONFIG_MAPPING

    kwargs = tiny_config_kwargs(model_type)
    config = CONFIG_MAPPING[model_type](**kwargs)
    if variant and (overrides := variant_overrides(variant, config)):
        config = CONFIG_MAPPING[model_type](**_merged(kwargs, overrides))
    return config


def _model_class(model_type: str, model_class: Callable[[PretrainedConfig], PreTrainedModel] | None) -> Any:
    import transformers

    if model_class is not None:
        return model_class
    record = RECORDS.get(model_type)
    if record is not None and record.model_class:
        return getattr(transformers, record.model_class)
    return transformers.AutoModelForCausalLM.from_config


def count_parameters(model_type: str,
                     model_class: Callable[[PretrainedConfig], PreTrainedModel] | None = None) -> int:
    """The tiny build's parameter count, measured on the meta device (nothing allocated)."""
    import torch

    with torch.device("meta"):
        model = _model_class(model_type, model_class)(tiny_config(model_type))
    return sum(parameter.numel() for parameter in model.parameters())


def build_tiny(model_type: str, seed: int = DEFAULT_SEED,
               model_class: Callable[[PretrainedConfig], PreTrainedModel] | None = None,
               variant: str = "") -> PreTrainedModel:
    """Build a tiny causal LM with seeded random weights (no hub access), in eval mode.

    ``model_class`` (default: the type's ``AutoModelForCausalLM`` class) lets a conftest build a subclass;
    ``variant`` builds a scenario's variant of the tiny config (``variants.VARIANTS``).
    Raises ``TooLargeToBuild`` (before allocating) when the build would exceed ``MAX_TINY_PARAMETERS``.
    """
    import torch

    parameters = count_parameters(model_type, model_class)
    if parameters > MAX_TINY_PARAMETERS:
        raise TooLargeToBuild(f"the tiny {model_type} would have {parameters:,} parameters, over the "
                              f"{MAX_TINY_PARAMETERS:,} a tiny build may have: the shrink does not reach part of "
                              "its config; give the type a record in pytest_fullgraph/models/tiny.py")
    config = tiny_config(model_type, variant)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _model_class(model_type, model_class)(config)
    return model.eval()


@functools.cache
def class_facts(model_type: str) -> tuple[str, bool | None]:
    """The causal-LM class name of a transformers model type and its ``_can_compile_fullgraph`` flag, without
    building a model; ("", None) when the installed transformers does not map the type."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    record = RECORDS.get(model_type)
    name = (record.model_class if record else "") or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type, "")
    if not isinstance(name, str) or not name:
        return "", None
    model_class = getattr(transformers, name, None)
    flag = getattr(model_class, "_can_compile_fullgraph", None)
    return name, flag if isinstance(flag, bool) else None


@functools.cache
def installed_model_types() -> tuple[str, ...]:
    """Every model type of the installed transformers that has a causal-LM class, sorted."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return tuple(sorted(model_type for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
                        if model_type in CONFIG_MAPPING))
