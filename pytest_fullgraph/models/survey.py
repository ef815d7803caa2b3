"""What ``python -m pytest_fullgraph models`` says about one registered model: class, size, tags, the
``_can_compile_fullgraph`` flag, and whether it builds and generates eagerly (or why it is skipped)."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from pytest_fullgraph.core.results import first_line
from pytest_fullgraph.models import Registry, class_facts, count_parameters

#: The eager smoke test every buildable model passes: a short greedy generation from a fixed prompt.
SMOKE_PROMPT = (5, 6, 7, 8)
SMOKE_NEW_TOKENS = 2


def survey(registry: Registry, name: str, *, build: bool = True) -> dict[str, Any]:
    """One row of the models table, in JSON builtins. Never raises for the model's own failures: the status
    says ``ok``, ``skipped: <reason>`` or ``error: <what failed>``."""
    spec = registry[name]
    row: dict[str, Any] = {"name": name, "model_type": spec.model_type, "family": spec.family,
                           "tags": sorted(registry.tags_of(name)), "class": "", "parameters": None,
                           "can_compile_fullgraph": None, "build_s": None, "status": "ok"}
    if spec.model_type:
        try:
            row["class"], row["can_compile_fullgraph"] = class_facts(spec.model_type)
        except Exception as error:  # an import error of the modeling module shows in the status below
            row["status"] = f"error: {type(error).__name__}: {first_line(error)}"
    if spec.known_reason:
        row["status"] = f"skipped: {spec.known_reason}"
        return row
    if not build:
        if spec.model_type:
            try:
                row["parameters"] = count_parameters(spec.model_type)
            except Exception as error:
                row["status"] = f"error: {type(error).__name__}: {first_line(error)}"
        return row
    try:
        # models that print (reformer warns on stdout at every step) must not corrupt the table or its JSON
        with contextlib.redirect_stdout(sys.stderr):
            _build_and_generate(spec.build, row)
    except Exception as error:
        row["status"] = f"error: {type(error).__name__}: {first_line(error)}"
    return row


def _build_and_generate(build: Any, row: dict[str, Any]) -> None:
    import torch

    started = time.perf_counter()
    model = build()
    row["build_s"] = round(time.perf_counter() - started, 3)
    row["class"] = type(model).__name__
    row["parameters"] = sum(parameter.numel() for parameter in model.parameters())
    flag = getattr(model, "_can_compile_fullgraph", None)
    row["can_compile_fullgraph"] = flag if isinstance(flag, bool) else None
    with torch.no_grad():
        output = model.generate(torch.tensor([SMOKE_PROMPT]), max_new_tokens=SMOKE_NEW_TOKENS, do_sample=False,
                                pad_token_id=getattr(model.config, "pad_token_id", None) or 0)
    if output.shape[-1] != len(SMOKE_PROMPT) + SMOKE_NEW_TOKENS:
        raise RuntimeError(f"generated shape {tuple(output.shape)}, expected {len(SMOKE_PROMPT) + SMOKE_NEW_TOKENS} "
                           "positions")
