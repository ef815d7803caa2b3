"""The models of a run, built once per process and name and converted once per dtype.

A lookup never raises for a model's own trouble: it returns what became of the model (``Built``, ``BuildFailed``
or ``Unavailable``), so that one broken model is its own checks' outcome and never takes the others down.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.model_facts import project_file, vocab_size
from pytest_fullgraph.core.results import DEFAULT_DTYPE, first_line
from pytest_fullgraph.models import Registry, class_facts

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class Built:
    model: PreTrainedModel


@dataclass(frozen=True)
class BuildFailed:
    """The model's build or conversion raised; its checks are errors of the ``build`` stage."""

    error: BaseException


@dataclass(frozen=True)
class Unavailable:
    """A known limitation (registered with a reason, or an attention implementation the model cannot use): its
    checks are skips saying why; nothing is judged."""

    reason: str


ModelEntry = Built | BuildFailed | Unavailable


class _Unavailable(Exception):
    """Raised inside a build to end it as ``Unavailable``."""


@dataclass
class ModelCache:
    registry: Registry
    device: str = "cpu"
    #: the ``attn_implementation`` every model is set to; None: each model's own
    attn_implementation: str | None = None
    _entries: dict[tuple[str, str, str], ModelEntry] = field(default_factory=dict)

    def get(self, name: str, dtype: str = DEFAULT_DTYPE, variant: str = "") -> ModelEntry:
        """The model ``name`` in ``dtype``, built with a scenario's config ``variant`` where it changes the model's
        config; the float32 model stays as built, other dtypes are converted copies."""
        key = (name, dtype, variant)
        if key not in self._entries:
            self._entries[key] = self._make(name, dtype, variant)
        return self._entries[key]

    def _make(self, name: str, dtype: str, variant: str) -> ModelEntry:
        try:
            spec = self.registry[name]
            if variant and (spec.known_reason or spec.builder(variant) is spec.build):
                return self.get(name, dtype)  # never built, or the variant changes nothing: one entry serves both
            return Built(self._build(name, variant) if dtype == DEFAULT_DTYPE else self._convert(name, dtype, variant))
        except _Unavailable as unavailable:
            return Unavailable(str(unavailable))
        except Exception as error:  # a broken model must not take the others down
            return BuildFailed(error)

    def _build(self, name: str, variant: str) -> PreTrainedModel:
        spec = self.registry[name]
        if spec.known_reason:
            raise _Unavailable(spec.known_reason)
        model: Any = spec.builder(variant)()  # transformers types `to` as taking a dtype only
        if self.attn_implementation is not None:
            _set_attention(model, self.attn_implementation)
        if self.device != "cpu":  # built on the CPU, seeded; the checks run where asked
            model = model.to(self.device)
        _settle(model)
        return model

    def _convert(self, name: str, dtype: str, variant: str) -> PreTrainedModel:
        entry = self.get(name, DEFAULT_DTYPE, variant)
        if isinstance(entry, Unavailable):
            raise _Unavailable(entry.reason)
        if isinstance(entry, BuildFailed):
            raise entry.error
        import torch

        return copy.deepcopy(entry.model).to(getattr(torch, dtype))

    def facts(self, name: str) -> tuple[str, int | None, bool | None, str]:
        """Class, parameter count, ``_can_compile_fullgraph`` and the class's file when transformers does not export
        it (``project_file``) of a model; from its transformers type's class when it was not built (a known
        limitation, a failed build)."""
        entry = self._entries.get((name, DEFAULT_DTYPE, ""))
        if isinstance(entry, Built):
            flag = getattr(entry.model, "_can_compile_fullgraph", None)
            return (type(entry.model).__name__, sum(parameter.numel() for parameter in entry.model.parameters()),
                    flag if isinstance(flag, bool) else None, project_file(type(entry.model)))
        model_type = self.registry[name].model_type
        if not model_type:
            return "", None, None, ""
        try:
            model_class, flag = class_facts(model_type)
        except Exception:  # the facts are a courtesy; the check's outcome already says what went wrong
            return "", None, None, ""
        return model_class, None, flag, ""


def _set_attention(model: Any, implementation: str) -> None:
    """Set the model's ``attn_implementation``; one it cannot use makes the model ``Unavailable``, saying why."""
    try:
        model.set_attn_implementation(implementation)
    except (ValueError, ImportError, NotImplementedError) as error:
        raise _Unavailable(f"{type(model).__name__} cannot use attn_implementation={implementation!r}: "
                           f"{first_line(error)}") from None
    if model.config._attn_implementation != implementation:
        raise _Unavailable(f"{type(model).__name__} does not take attn_implementation={implementation!r} after "
                           "it is built (it does not use transformers' AttentionInterface)")


def _settle(model: Any) -> None:
    """One forward on a short prompt before any check: a model that changes itself on first use (big_bird switches
    its attention type to 'original_full' for short inputs, so its first generation differs from every later one)
    is judged in the state every later call sees, whatever order its checks run in. A failure is left to the
    checks, which report it; the forward draws nothing from the checks' random numbers."""
    import torch

    ids = torch.arange(1, 9, device=model.device)[None] % vocab_size(model)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), contextlib.suppress(Exception):
        model(input_ids=ids)
