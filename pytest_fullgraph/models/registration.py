"""Where the registry's models come from: every transformers model type as a tiny model (its record in
``tiny.RECORDS``, else the generic shrink), and the models registered from conftest files (``register_model``),
merged into each session's registry until collection closes registrations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.models import build as _build
from pytest_fullgraph.models.build import build_tiny, tiny_config
from pytest_fullgraph.models.registry import REGISTRATION_HINT, ModelSpec, Registry
from pytest_fullgraph.models.tiny import RECORDS
from pytest_fullgraph.models.variants import variant_overrides

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def tiny_spec(model_type: str) -> ModelSpec:
    """A registry entry for a transformers model type: its record in ``tiny.RECORDS``, else the generic shrink."""

    def build() -> PreTrainedModel:
        return build_tiny(model_type)

    def config() -> Any:
        return tiny_config(model_type)

    @functools.cache  # asked once to choose the build and again to build: the config is made once
    def variant_build(variant: str) -> Callable[[], PreTrainedModel] | None:
        if not variant_overrides(variant, tiny_config(model_type)):
            return None
        return functools.partial(build_tiny, model_type, variant=variant)

    record = RECORDS.get(model_type)
    if record is None:
        return ModelSpec(model_type, build, model_type=model_type, config=config, variant_build=variant_build)
    return ModelSpec(model_type, build, record.family_name, record.tags, record.known_reason, model_type, config,
                     variant_build)


def builtin_registry() -> Registry:
    """The records' model types now; every other installed transformers type on first need."""
    return Registry([tiny_spec(model_type) for model_type in RECORDS],
                    more=lambda: [tiny_spec(model_type) for model_type in _build.installed_model_types()])


#: Models registered by ``register_model`` from conftest files; merged into each session's registry.
_external = Registry()
#: True while a session collects: a conftest loaded then registers too late for the session to see it.
_registrations_closed = False


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
