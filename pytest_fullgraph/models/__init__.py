"""The model registry: names mapped to ``ModelSpec``s that build tiny, seeded causal LMs without downloads.

The data behind the built-in models (the generic shrink and one record per model type) is in ``tiny``.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.models.tags import TAG_MEANINGS, default_config, derived_tags
from pytest_fullgraph.models.tiny import DROP, GENERIC_SHRINK, RECORDS, SHRINK_RULES, SLIDING_WINDOW

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

#: Selection keywords accepted beside model names, glob patterns and ``tag:NAME``.
KEYWORDS = ("all", "popular")
TAG_PREFIX = "tag:"
GLOB_CHARACTERS = "*?["
DEFAULT_SEED = 0
#: A tiny build with more parameters than this means the shrink did not reach part of the config (a new
#: transformers' sub-config, say): building it could exhaust memory and kill the worker, so it is refused with
#: the count, which is measured on the meta device without allocating anything.
MAX_TINY_PARAMETERS = 50_000_000


class TooLargeToBuild(RuntimeError):
    """A tiny build that would allocate more than ``MAX_TINY_PARAMETERS`` parameters."""


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
    #: why this model cannot be checked; its checks are then skipped with this reason, and it is never built
    known_reason: str = ""
    #: the transformers model type a built-in model is built from ("" for models registered by users): its
    #: config's defaults give the derived tags (``tag:moe``, ``tag:sliding``, ...)
    model_type: str = ""

    def __post_init__(self) -> None:
        if (not self.name or self.name in KEYWORDS or self.name != self.name.strip()
                or any(character in self.name for character in "," + GLOB_CHARACTERS)
                or self.name.startswith(TAG_PREFIX)):
            raise ValueError(f"invalid model name {self.name!r}: must be non-empty, without commas, glob "
                             f"characters ({GLOB_CHARACTERS}) or spaces around it, not start with "
                             f"{TAG_PREFIX!r}, and not be one of the keywords {', '.join(KEYWORDS)}")
        if not callable(self.build):
            raise TypeError(f"model {self.name!r}: build must be callable, got {type(self.build).__name__}")
        object.__setattr__(self, "tags", frozenset(self.tags))
        if not self.family:
            object.__setattr__(self, "family", self.name)


def _knows(default: Any, key: str) -> bool:
    """Whether a config has ``key`` (``attribute_map`` included), without tripping the guard of a heterogeneous
    config (Gemma 4's per-layer ``head_dim`` raises on plain attribute access)."""
    probe = getattr(default, "_hasattr_without_heterogeneous_validation", None)
    try:
        return bool(probe(key)) if probe is not None else hasattr(default, key)
    except Exception:
        return False


def _raw(default: Any, key: str) -> Any:
    """A config value read past the heterogeneous guard; ``None`` when unreadable."""
    getter = getattr(default, "_getattr_without_heterogeneous_validation", None)
    try:
        return getter(key, None) if getter is not None else getattr(default, key, None)
    except Exception:
        return None


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
    layer_types = _raw(default, "layer_types")
    if _field_name(default, "layer_types") is None or not isinstance(layer_types, list) or not layer_types:
        return {}  # no list, or one the config derives itself from other fields
    kinds = list(dict.fromkeys(layer_types))
    depth = max(GENERIC_SHRINK["num_hidden_layers"], len(kinds))
    result: dict[str, Any] = {}
    shared = _raw(default, "num_kv_shared_layers")
    if isinstance(shared, int) and not isinstance(shared, bool) and shared > 0:
        depth = 2 * len(kinds)
        result["num_kv_shared_layers"] = len(kinds)
    return {**result, "num_hidden_layers": depth, "layer_types": (kinds * depth)[:depth]}


def _rule_applies(rule: Any, default: Any) -> bool:
    try:
        return bool(rule.applies(default))
    except Exception:  # a heterogeneous config's guard, a property that needs fields a default lacks
        return False


def _shrunk(default: Any) -> dict[str, Any]:
    """The generic shrink for one config (the keys it knows, under their field names), ``SHRINK_RULES``, its
    per-layer list, and each sub-config's shrink (text, vision, audio towers of composite configs)."""
    values: dict[str, Any] = {key: value for key, value in GENERIC_SHRINK.items() if _knows(default, key)}
    window = _raw(default, "sliding_window")
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        values["sliding_window"] = min(window, SLIDING_WINDOW)
    for rule in SHRINK_RULES:
        if _rule_applies(rule, default):
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
    depth, new_depth = _raw(sub_config, "num_hidden_layers"), shrunk.get(
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


def tiny_config(model_type: str) -> PretrainedConfig:
    """The tiny config of a transformers model type, for building your own model class on it."""
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type](**tiny_config_kwargs(model_type))


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
               model_class: Callable[[PretrainedConfig], PreTrainedModel] | None = None) -> PreTrainedModel:
    """Build a tiny causal LM with seeded random weights (no hub access), in eval mode.

    ``model_class`` (default: the type's ``AutoModelForCausalLM`` class) lets a conftest build a subclass.
    Raises ``TooLargeToBuild`` (before allocating) when the build would exceed ``MAX_TINY_PARAMETERS``.
    """
    import torch

    parameters = count_parameters(model_type, model_class)
    if parameters > MAX_TINY_PARAMETERS:
        raise TooLargeToBuild(f"the tiny {model_type} would have {parameters:,} parameters, over the "
                              f"{MAX_TINY_PARAMETERS:,} a tiny build may have: the shrink does not reach part of "
                              "its config; give the type a record in pytest_fullgraph/models/tiny.py")
    config = tiny_config(model_type)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _model_class(model_type, model_class)(config)
    return model.eval()


def tiny_spec(model_type: str) -> ModelSpec:
    """A registry entry for a transformers model type: its record in ``tiny.RECORDS``, else the generic shrink."""

    def build() -> PreTrainedModel:
        return build_tiny(model_type)

    record = RECORDS.get(model_type)
    if record is None:
        return ModelSpec(model_type, build, model_type=model_type)
    return ModelSpec(model_type, build, record.family_name, record.tags, record.known_reason, model_type)


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


def installed_model_types() -> tuple[str, ...]:
    """Every model type of the installed transformers that has a causal-LM class, sorted."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return tuple(sorted(model_type for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
                        if model_type in CONFIG_MAPPING))


def _split(expression: str) -> list[str]:
    return [part.strip() for part in expression.split(",") if part.strip()]


class Registry:
    """A name → ModelSpec mapping with selection by names, keywords, glob patterns and tags.

    ``more`` supplies further specs on first need (every installed transformers type): resolving "llama,gemma"
    imports neither torch nor transformers, so the plugin stays light in projects that do not use it.
    """

    def __init__(self, specs: Iterable[ModelSpec] = (), *,
                 more: Callable[[], Iterable[ModelSpec]] | None = None) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._more: Callable[[], Iterable[ModelSpec]] | None = None
        for spec in specs:
            self.add(spec)
        self._more = more

    def _load_more(self) -> None:
        more, self._more = self._more, None
        for spec in more() if more is not None else ():
            self._specs.setdefault(spec.name, spec)  # what was registered explicitly wins

    def add(self, spec: ModelSpec, *, replace: bool = False) -> None:
        if not replace and spec.name not in self._specs and self._more is not None:
            self._load_more()  # a name that an installed type has needs replace=True too
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
        if name not in self._specs:
            self._load_more()
        return self._specs[name]

    def __contains__(self, name: object) -> bool:
        if name not in self._specs:
            self._load_more()
        return name in self._specs

    def __iter__(self) -> Iterator[ModelSpec]:
        self._load_more()
        return iter([self._specs[name] for name in sorted(self._specs)])

    def __len__(self) -> int:
        self._load_more()
        return len(self._specs)

    def names(self) -> list[str]:
        self._load_more()
        return sorted(self._specs)

    def tags_of(self, name: str) -> frozenset[str]:
        """The tags a spec was given and, for a built-in model type, those its config's defaults imply."""
        spec = self[name]
        return spec.tags | (derived_tags(spec.model_type) if spec.model_type else frozenset())

    def all_tags(self) -> list[str]:
        return sorted(set(TAG_MEANINGS) | {tag for name in self.names() for tag in self.tags_of(name)})

    def select(self, expression: str, exclude: str = "") -> tuple[str, ...]:
        """The sorted model names that ``expression`` selects, less those ``exclude`` selects.

        Both are comma lists of names, keywords (``all``, ``popular``), glob patterns (``qwen*``) and tags
        (``tag:moe``). Raises ``ValueError`` naming every entry that selects nothing and what is valid.
        """
        if not _split(expression):
            raise ValueError(f"no model selected by {expression!r}; {self.describe_choices()}")
        selected = self._resolve(_split(expression)) - self._resolve(_split(exclude))
        if not selected:
            raise ValueError(f"{expression!r} without {exclude!r} leaves no model")
        return tuple(sorted(selected))

    def _resolve(self, entries: list[str]) -> set[str]:
        selected: set[str] = set()
        problems: list[str] = []
        for entry in entries:
            matched = self._matches(entry)
            if matched is None:
                close = difflib.get_close_matches(entry, self.names(), n=3)
                problems.append(f"{entry} (did you mean {' or '.join(close)}?)" if close else entry)
            elif not matched:
                problems.append(f"{entry} (selects no model)")
            selected.update(matched or ())
        if problems:
            raise ValueError(f"unknown model name(s): {', '.join(problems)}; {self.describe_choices()} "
                             f"({REGISTRATION_HINT})")
        return selected

    def _matches(self, entry: str) -> set[str] | None:
        """The names one entry selects; ``None`` for a name that is not registered."""
        if entry == "all":
            return set(self.names())
        if entry == "popular" or entry.startswith(TAG_PREFIX):
            tag = entry.removeprefix(TAG_PREFIX)
            return {name for name in self.names() if tag in self.tags_of(name)}
        if any(character in entry for character in GLOB_CHARACTERS):
            return set(fnmatch.filter(self.names(), entry))
        return {entry} if entry in self else None

    def describe_choices(self) -> str:
        names = self.names()
        return (f"valid: {', '.join(KEYWORDS)} (keywords), glob patterns such as qwen*, "
                f"{', '.join(TAG_PREFIX + tag for tag in self.all_tags())}, or one of the {len(names)} "
                f"registered names: {', '.join(names)}")


def builtin_registry() -> Registry:
    """The records' model types now; every other installed transformers type on first need."""
    return Registry([tiny_spec(model_type) for model_type in RECORDS],
                    more=lambda: [tiny_spec(model_type) for model_type in installed_model_types()])


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
    if not replace and name in builtin_registry():
        raise ValueError(f"model {name!r} is already registered; pass replace=True to override it")
    return _external.register(name, build, family=family, tags=tags, known_reason=known_reason, replace=replace)


def session_registry() -> Registry:
    """Built-in specs overlaid with the externally registered ones."""
    registry = builtin_registry()
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
