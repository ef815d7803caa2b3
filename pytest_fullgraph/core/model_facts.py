"""What the checks ask of a model itself: its vocabulary, device and dtype, its forward's parameters, the
positions ``generate`` derives for it, and moving it.

One home for the questions that the decode loop (``decode``), the comparison (``compare``) and the checks
(``check``, ``inputs``) all ask, so they ask them the same way. No torch import: the answers come from the
model and its tensors, and importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.generation import UnsupportedGeneration

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


def vocab_size(model: PreTrainedModel) -> int:
    """The text vocabulary's size: multimodal configs nest it in their text config."""
    return int(model.config.get_text_config().vocab_size)


def model_device(model: Any) -> str:
    """Where the model's parameters live (the checks put their inputs there); "cpu" for parameterless fakes."""
    parameters = getattr(model, "parameters", None)
    first = next(iter(parameters()), None) if callable(parameters) else None
    return str(first.device) if first is not None else "cpu"


def model_dtype(model: Any) -> str:
    """The dtype of the model's floating-point parameters ("float32", "bfloat16"); float32 for parameterless
    fakes."""
    parameters = getattr(model, "parameters", None)
    for parameter in (parameters() if callable(parameters) else ()):
        if parameter.is_floating_point():
            return str(parameter.dtype).removeprefix("torch.")
    return "float32"


@contextlib.contextmanager
def moved_to(model: Any, device: str) -> Iterator[Any]:
    """The model on ``device`` for the block, then back where it was, even when the block fails: a model is
    built once per worker and shared by the tests that follow."""
    original = model_device(model)
    model.to(device)
    try:
        yield model
    finally:
        model.to(original)


def forward_parameters(model: PreTrainedModel) -> set[str]:
    """Named parameters of the model's forward; a ``forward(*args, **kwargs)`` wrapper defers to its base.

    Models differ in what their forward takes (``position_ids``, ``logits_to_keep``, ``cache``); the loop and the
    float64 reference pass an argument only where it is taken, as ``generate`` does.
    """
    for klass in type(model).__mro__:
        forward = vars(klass).get("forward")
        if forward is None:
            continue
        parameters = inspect.signature(forward).parameters.values()
        named = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"self"}
        if named:
            return named
    return set()


def defined_at(function: Any) -> str:
    """Where ``function`` is defined, as ``file:line`` from its package's directory (``transformers/models/...``)
    or, for a module outside any package (a conftest.py), from the working directory: a message points at the
    code and carries no machine's paths; "" when Python cannot say."""
    try:
        path, line = Path(inspect.getsourcefile(function) or ""), inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        return ""
    package = str(getattr(function, "__module__", "")).partition(".")[0]
    found = [index for index, part in enumerate(path.parts[:-1]) if part == package]
    if found:
        return f"{Path(*path.parts[found[-1]:])}:{line}"
    with contextlib.suppress(ValueError):
        return f"{path.resolve().relative_to(Path.cwd().resolve())}:{line}"
    return f"{path.name}:{line}" if path.name else ""


def project_file(klass: type) -> str:
    """The absolute path of the file that defines ``klass`` when transformers does not export it (a project's own
    model, a conftest's subclass): a reproducer imports the class from there. "" for classes of transformers and of
    this package (no project's: their modules import each other relatively, so no file of theirs imports alone), and
    when Python cannot say (a class made in ``__main__`` or by ``exec``)."""
    if str(getattr(klass, "__module__", "")).partition(".")[0] in ("transformers", __name__.partition(".")[0]):
        return ""
    try:
        found = inspect.getsourcefile(klass)
    except (OSError, TypeError):
        return ""
    return str(Path(found).resolve()) if found else ""


def cache_taking_parameters(model: PreTrainedModel) -> set[str]:
    """The forward's parameters, when it takes a ``cache``; else ``UnsupportedGeneration`` naming the model's class,
    where its forward is, and what to add (our loop and the exporters' host loop both pass one)."""
    parameters = forward_parameters(model)
    if "cache" in parameters:
        _refuse_own_cache_class(model)
        return parameters
    where = defined_at(type(model).forward)
    older = ", only the older `past_key_values`" if "past_key_values" in parameters else ""
    raise UnsupportedGeneration(
        f"{type(model).__name__}.forward{f' ({where})' if where else ''} takes no `cache` argument{older}: the loop "
        "passes its static cache as forward(..., cache=...), as transformers 5's causal LMs take it")


def keeps_own_cache_class(model: Any) -> bool:
    """Whether the model keeps a cache of its own class, for which ``generate`` builds none (transformers'
    ``_supports_default_dynamic_cache`` lists these models: minimax, xlstm, rwkv, reformer, xlnet)."""
    supports_default = getattr(type(model), "_supports_default_dynamic_cache", None)
    return callable(supports_default) and not supports_default()


def _refuse_own_cache_class(model: PreTrainedModel) -> None:
    """A forward that takes a ``cache`` of its own class only (minimax's, xlstm's): ``generate`` builds none for
    it and lets the forward make its own, so a static cache passed in fails inside the model, which without this
    read as the loop's fault."""
    if keeps_own_cache_class(model):
        raise UnsupportedGeneration(
            f"{type(model).__name__} keeps a cache of its own class, which its forward builds (transformers' "
            "_supports_default_dynamic_cache() is False for it, and generate ignores cache_implementation='static' "
            "for it): the loop, like the exported programs, runs on transformers' static cache")


def initial_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids as ``generate`` derives them from a left-padded mask: every caller that runs a forward outside
    ``generate`` must number the prompt as it does, or its logits differ."""
    return (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
