"""Why ``generate`` compiled nothing where a level asked it to: read from the model and its generation config, else
seen by rerunning the generation with ``generate``'s compile decision watched. The ``AT_LEAST_ONE_GRAPH`` rule of
``base`` puts this in its verdict, so a level that relies on ``generate``'s own compile says whose choice it was.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.model_facts import defined_at, keeps_own_cache_class

if TYPE_CHECKING:
    from transformers import GenerationConfig

#: How a reason starts when ``generate`` would have compiled but ran only the uncompiled first forward.
PREFILL_ONLY = "transformers' assisted decoding runs the target's first forward"


def why_generate_compiled_nothing(model: Any, config: GenerationConfig | None,
                                  rerun: Callable[[], object] | None = None, mode: str = "") -> str:
    """``generate`` compiles the forward only on a compileable cache it built (5.24's
    ``_valid_auto_compile_criteria``) and through ``get_compiled_call``; which part was missing, where it can tell:
    the message named only the model type before, and mpt's cause was its config, not its code. What the model
    and config cannot say, a watched ``rerun`` can: the cache generate chose by, and how many forwards it ran."""
    if config is not None and hasattr(model, "_prepare_generation_config"):
        merged, _ = model._prepare_generation_config(copy.deepcopy(config))
        if merged.use_cache is False:
            return ("the generation config, merged with the model's, sets use_cache=False: generate builds no cache "
                    "and compiles only with one")
    if keeps_own_cache_class(model):
        return (f"generate builds {type(model).__name__} no cache, since it keeps one of its own class "
                "(_supports_default_dynamic_cache() is False), and compiles only with one")
    compiled_call = getattr(model, "get_compiled_call", None)
    if callable(compiled_call) and compiled_call(getattr(config, "compile_config", None)) == model.__call__:
        where = defined_at(type(model).get_compiled_call)
        return (f"transformers' get_compiled_call{f' ({where})' if where else ''} hands generate "
                f"{type(model).__name__}'s forward uncompiled (by model type)")
    seen = watch_auto_compile(model, rerun) if rerun is not None else None
    return (seen.why(mode, getattr(config, "max_new_tokens", None)) if seen is not None else None) or \
        f"model type {getattr(model.config, 'model_type', '?')!r} or its cache is not compiled by generate"


@dataclass
class AutoCompileWatch:
    """What ``generate`` decided about compiling in a rerun: the cache it judged, the layers of that cache which
    say they are not compileable, its verdict (None: it never asked) and how many times it ran the forward."""

    cache: str = ""
    uncompileable_layers: tuple[str, ...] = ()
    chose_compile: bool | None = None
    forwards: int = 0

    def why(self, mode: str, max_new_tokens: int | None) -> str | None:
        if self.chose_compile is False and self.uncompileable_layers:
            return (f"the {self.cache} generate built has layers that say they are not compileable "
                    f"({', '.join(self.uncompileable_layers)}), so _valid_auto_compile_criteria keeps the forward "
                    "uncompiled")
        if self.chose_compile is False:
            built = "no cache" if self.cache == "no cache" else f"a {self.cache}"
            return f"generate built {built}, with which _valid_auto_compile_criteria keeps the forward uncompiled"
        if self.chose_compile and mode == "assisted_generation" and self.forwards <= 1:
            return (f"{PREFILL_ONLY} (the prefill, which verifies the first draft) uncompiled and compiles only the "
                    "later ones; this generation needed no later one: the first forward's tokens (the draft it "
                    f"accepted and the target's next token) filled max_new_tokens={max_new_tokens}")
        return None


def watch_auto_compile(model: Any, rerun: Callable[[], object]) -> AutoCompileWatch:
    """Rerun the generation watching ``generate``'s compile decision (its ``_valid_auto_compile_criteria``,
    shadowed on the instance) and counting the model's forwards; a rerun that fails still tells what it saw."""
    watch, decide = AutoCompileWatch(), getattr(model, "_valid_auto_compile_criteria", None)
    if decide is None:
        return watch

    def watched(model_kwargs: dict[str, Any], generation_config: GenerationConfig) -> bool:
        cache = model_kwargs.get("cache")
        layers = getattr(getattr(cache, "self_attention_cache", cache), "layers", ())
        watch.cache = type(cache).__name__ if cache is not None else "no cache"
        watch.uncompileable_layers = _uncompileable(layers)
        watch.chose_compile = bool(decide(model_kwargs, generation_config))
        return watch.chose_compile

    def count(*_: object) -> None:
        watch.forwards += 1

    model._valid_auto_compile_criteria = watched
    hook = model.register_forward_pre_hook(count)
    try:
        with contextlib.suppress(Exception):
            rerun()
    finally:
        del model._valid_auto_compile_criteria
        hook.remove()
    return watch


def _uncompileable(layers: Iterable[Any]) -> tuple[str, ...]:
    """The classes of the cache layers whose ``is_compileable`` is False, each with where it is decided."""
    found: dict[str, str] = {}
    for layer in layers:
        if getattr(layer, "is_compileable", True) is False:
            decided = getattr(type(layer), "is_compileable", None)
            where = defined_at(decided.fget) if isinstance(decided, property) and decided.fget else ""
            recording = " recording its past, for assisted decoding's crop," if getattr(layer, "record_past", 0) else ""
            found.setdefault(type(layer).__name__, f"{recording} at {where}" if where else recording)
    return tuple(f"{name}{where}" for name, where in found.items())
