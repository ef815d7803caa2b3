"""The model registry: names mapped to ``ModelSpec``s that build tiny, seeded causal LMs without downloads.

The data behind the built-in models (the generic shrink and one record per model type) is in ``tiny``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.models.tiny import DROP, GENERIC_SHRINK, RECORDS

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

#: Selection keywords accepted beside model names.
KEYWORDS = ("all", "popular")
DEFAULT_SEED = 0


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model under test.

    ``build`` returns a causal LM in eval mode; it is called once per worker and cached, so it must be
    deterministic (seed inside it) for xdist workers and CI shards to test the same weights.
    """

    name: str
    build: Callable[[], PreTrainedModel]
    family: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)
    #: why this model cannot be checked; its checks are then xfail with this reason, not built
    known_reason: str = ""

    def __post_init__(self) -> None:
        if not self.name or "," in self.name or self.name in KEYWORDS or self.name != self.name.strip():
            raise ValueError(f"invalid model name {self.name!r}: must be non-empty, without commas or spaces "
                             f"around it, and not one of the keywords {', '.join(KEYWORDS)}")
        if not callable(self.build):
            raise TypeError(f"model {self.name!r}: build must be callable, got {type(self.build).__name__}")
        object.__setattr__(self, "tags", frozenset(self.tags))
        if not self.family:
            object.__setattr__(self, "family", self.name)


def _default_config(config_class: Any) -> Any:
    """A default instance, which tells which generic keys a config understands (attribute_map included)."""
    transformers_logger = logging.getLogger("transformers")
    previous_level = transformers_logger.level
    transformers_logger.setLevel(logging.ERROR)  # default configs of some types warn about their own ids
    try:
        return config_class()
    finally:
        transformers_logger.setLevel(previous_level)


def _per_layer_types(default: Any) -> dict[str, Any]:
    """``layer_types`` cut to the shrunk depth, keeping one layer of each kind the full model has (so a
    hybrid or sliding-window model stays one), and the depth that takes."""
    layer_types = getattr(default, "layer_types", None)
    if not isinstance(layer_types, list) or not layer_types or isinstance(getattr(type(default), "layer_types",
                                                                                  None), property):
        return {}  # no list, or one the config derives itself (mamba's is a read-only property)
    kinds = list(dict.fromkeys(layer_types))
    depth = max(GENERIC_SHRINK["num_hidden_layers"], len(kinds))
    return {"num_hidden_layers": depth, "layer_types": (kinds * depth)[:depth]}


def _shrunk(default: Any) -> dict[str, Any]:
    """The generic shrink for one config (the keys it knows), its per-layer list, and each sub-config's shrink
    (text, vision, audio towers of composite configs), as constructor kwargs."""
    kwargs: dict[str, Any] = {key: value for key, value in GENERIC_SHRINK.items() if hasattr(default, key)}
    kwargs.update(_per_layer_types(default))
    for name in getattr(type(default), "sub_configs", {}) or {}:
        sub_config = getattr(default, name, None)
        if sub_config is not None and hasattr(sub_config, "to_dict"):
            kwargs[name] = {**sub_config.to_dict(), **_shrunk(sub_config)}
    return kwargs


def tiny_config_kwargs(model_type: str) -> dict[str, Any]:
    """The constructor kwargs of the tiny config of ``model_type``: the generic shrink (sub-configs and
    per-layer lists included) with the type's record's overrides over it."""
    from transformers import CONFIG_MAPPING

    kwargs = _shrunk(_default_config(CONFIG_MAPPING[model_type]))
    record = RECORDS.get(model_type)
    kwargs.update(record.overrides if record else {})
    return {key: value for key, value in kwargs.items() if value is not DROP}


def tiny_config(model_type: str) -> PretrainedConfig:
    """The tiny config of a transformers model type, for building your own model class on it."""
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type](**tiny_config_kwargs(model_type))


def build_tiny(model_type: str, seed: int = DEFAULT_SEED,
               model_class: Callable[[PretrainedConfig], PreTrainedModel] | None = None) -> PreTrainedModel:
    """Build a tiny causal LM with seeded random weights (no hub access), in eval mode.

    ``model_class`` (default: the type's ``AutoModelForCausalLM`` class) lets a conftest build a subclass.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if model_class is not None:
            model = model_class(config)
        elif model_type in RECORDS and RECORDS[model_type].model_class:
            import transformers

            model = getattr(transformers, RECORDS[model_type].model_class)(config)
        else:
            model = AutoModelForCausalLM.from_config(config)
    return model.eval()


def tiny_spec(model_type: str) -> ModelSpec:
    """A registry entry for a built-in model type, from its record in ``tiny.RECORDS``."""

    def build() -> PreTrainedModel:
        return build_tiny(model_type)

    record = RECORDS[model_type]
    return ModelSpec(model_type, build, record.family_name, record.tags, record.known_reason)


class Registry:
    """An ordered name → ModelSpec mapping with selection by names and keywords."""

    def __init__(self, specs: Iterable[ModelSpec] = ()) -> None:
        self._specs: dict[str, ModelSpec] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: ModelSpec, *, replace: bool = False) -> None:
        if spec.name in self._specs and not replace:
            raise ValueError(f"model {spec.name!r} is already registered; pass replace=True to override it")
        self._specs[spec.name] = spec

    def register(
        self,
        name: str,
        build: Callable[[], PreTrainedModel],
        *,
        family: str = "",
        tags: Iterable[str] = (),
        known_reason: str = "",
        replace: bool = False,
    ) -> ModelSpec:
        spec = ModelSpec(name, build, family, frozenset(tags), known_reason)
        self.add(spec, replace=replace)
        return spec

    def __getitem__(self, name: str) -> ModelSpec:
        return self._specs[name]

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._specs.values())

    def names(self) -> list[str]:
        return sorted(self._specs)

    def select(self, expression: str) -> tuple[str, ...]:
        """Resolve a comma list of names and keywords into model names, in a deterministic order.

        Raises ``ValueError`` naming every unknown entry and every valid choice.
        """
        requested = [part.strip() for part in expression.split(",") if part.strip()]
        if not requested:
            raise ValueError(f"no model selected by {expression!r}; {self.describe_choices()}")
        unknown = [name for name in requested if name not in KEYWORDS and name not in self._specs]
        if unknown:
            raise ValueError(f"unknown model name(s): {', '.join(unknown)}; {self.describe_choices()} "
                             f"({REGISTRATION_HINT})")
        selected: dict[str, None] = {}  # insertion-ordered set
        for name in requested:
            if name == "all":
                selected.update(dict.fromkeys(self.names()))
            elif name == "popular":
                selected.update(dict.fromkeys(n for n in self.names() if "popular" in self._specs[n].tags))
            else:
                selected[name] = None
        return tuple(selected)

    def describe_choices(self) -> str:
        return f"valid: {', '.join(KEYWORDS)} (keywords), {', '.join(self.names())}"


def builtin_specs() -> list[ModelSpec]:
    return [tiny_spec(model_type) for model_type in RECORDS]


#: Models registered by ``register_model`` from conftest files; merged into each session's registry.
_external = Registry()
#: True while a session collects: a conftest loaded then registers too late for the session to see it.
_registrations_closed = False
#: Where models must be registered, for error messages about names the session does not know.
REGISTRATION_HINT = ("models are registered before collection: from the rootdir conftest.py (or one next to "
                     "the paths on the command line), a plugin, or the pytest_fullgraph_register_models hook; "
                     "a conftest.py in a sub-directory is loaded too late")


def register_model(
    name: str,
    build: Callable[[], PreTrainedModel],
    *,
    family: str = "",
    tags: Iterable[str] = (),
    known_reason: str = "",
    replace: bool = False,
) -> ModelSpec:
    """Register a model from a conftest.py (or any module imported before collection).

    A name that is already built in, or registered before, needs ``replace=True``. ``known_reason`` says why
    the model cannot be checked yet: its checks are then xfail with that reason and it is never built.
    """
    if _registrations_closed:
        raise RuntimeError(f"register_model({name!r}) ran after the session chose its models (during "
                           f"collection); {REGISTRATION_HINT}")
    if not replace and name in RECORDS:
        raise ValueError(f"model {name!r} is already registered; pass replace=True to override it")
    return _external.register(name, build, family=family, tags=tags, known_reason=known_reason, replace=replace)


def session_registry() -> Registry:
    """Built-in specs overlaid with the externally registered ones."""
    registry = Registry(builtin_specs())
    for spec in _external:
        registry.add(spec, replace=True)
    return registry


def close_registrations(closed: bool) -> None:
    """Called around collection: ``register_model`` then raises, naming where registration must happen."""
    global _registrations_closed
    _registrations_closed = closed


def forget_external_models() -> None:
    """Drop conftest registrations at session end (pytester runs many sessions in one process)."""
    global _external, _registrations_closed
    _external = Registry()
    _registrations_closed = False
