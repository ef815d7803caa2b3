"""pytest_fullgraph: does generation compile as one graph, and are its tokens exactly eager's?

The public API is this module's names, each loaded on first use so that importing the plugin (or ``report``, on a
machine without torch) stays light. The code lives in one package per concern, data flowing down this list:
``plugin`` (pytest hooks, options, the run's session), ``repro`` (standalone reproducers), ``check`` (one check's
decision tree, comparison, scenarios and inputs), ``levels`` (the ``Level`` interface, built-in and transformers'
exporter levels, saved artifacts), ``loop`` (our single-graph generation loop and its decoding ``modes``),
``models`` (the registry of tiny models), ``core`` (the shared vocabulary: results, breaks, compile events);
``report`` reads, merges, gates and renders one report and ``publish`` makes pages of many, neither with torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name → the module that defines it (loaded by ``__getattr__`` when the name is first used).
PUBLIC_API = {
    "OUTCOMES": "pytest_fullgraph.core.outcomes",
    "CheckResult": "pytest_fullgraph.core.results",
    "Mismatch": "pytest_fullgraph.core.mismatch",
    "UnsupportedGeneration": "pytest_fullgraph.core.generation",
    "generate_fn": "pytest_fullgraph.core.generation",
    "fullgraph_generate": "pytest_fullgraph.loop.decode",
    "export_generate": "pytest_fullgraph.loop.decode",
    "ArtifactError": "pytest_fullgraph.levels.artifacts",
    "load_generate": "pytest_fullgraph.levels.artifacts",
    "save_generate": "pytest_fullgraph.levels.artifacts",
    "Level": "pytest_fullgraph.levels.base",
    "GraphRule": "pytest_fullgraph.levels.base",
    "AT_LEAST_ONE_GRAPH": "pytest_fullgraph.levels.base",
    "ONE_GRAPH": "pytest_fullgraph.levels.base",
    "GRAPHS_NOT_COUNTED": "pytest_fullgraph.levels.base",
    "ModelSpec": "pytest_fullgraph.models.registry",
    "Registry": "pytest_fullgraph.models.registry",
    "build_tiny": "pytest_fullgraph.models.build",
    "register_model": "pytest_fullgraph.models.registration",
    "tiny_config": "pytest_fullgraph.models.build",
    "run_check": "pytest_fullgraph.check.run",
}

__all__ = [
    "AT_LEAST_ONE_GRAPH",
    "GRAPHS_NOT_COUNTED",
    "ONE_GRAPH",
    "OUTCOMES",
    "ArtifactError",
    "CheckResult",
    "GraphRule",
    "Level",
    "Mismatch",
    "ModelSpec",
    "Registry",
    "UnsupportedGeneration",
    "build_tiny",
    "export_generate",
    "fullgraph_generate",
    "generate_fn",
    "load_generate",
    "register_model",
    "run_check",
    "save_generate",
    "tiny_config",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use; the package's subpackages as usual."""
    if name in PUBLIC_API:
        value = getattr(importlib.import_module(PUBLIC_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pytest_fullgraph' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC_API})


if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
    from pytest_fullgraph.check.run import run_check
    from pytest_fullgraph.core.generation import UnsupportedGeneration, generate_fn
    from pytest_fullgraph.core.mismatch import Mismatch
    from pytest_fullgraph.core.outcomes import OUTCOMES
    from pytest_fullgraph.core.results import CheckResult
    from pytest_fullgraph.levels.artifacts import ArtifactError, load_generate, save_generate
    from pytest_fullgraph.levels.base import AT_LEAST_ONE_GRAPH, GRAPHS_NOT_COUNTED, ONE_GRAPH, GraphRule, Level
    from pytest_fullgraph.loop.decode import export_generate, fullgraph_generate
    from pytest_fullgraph.models.build import build_tiny, tiny_config
    from pytest_fullgraph.models.registration import register_model
    from pytest_fullgraph.models.registry import ModelSpec, Registry
