"""pytest_fullgraph: does generation compile as one graph, and are its tokens exactly eager's?

Layout, one concern per module (data flows down this list):
``options`` (command line, environment, ini → ``Settings``), ``models`` (registry and tiny-model records),
``scenarios`` (the table of inputs and generation settings), ``inputs`` (a scenario's prompts, config and picked
tokens for one model), ``modeling`` (what the checks ask of a model), ``levels`` (what a level decides: how it
compiles, diagnoses and counts graphs) and ``builtin_levels`` (ours), ``check`` (the decision tree), ``compare``
(exact comparison and its explanation), ``planning`` (``generate``'s arguments as the loop's plan), ``decode``
(our single-graph loop; its ``while`` form's state, processors and tracing aids in ``loop_state``,
``loop_processors``, ``loop_tracing``; its exported programs' edges in ``exported``), ``compile_events`` (what a compile
reports) and ``breaks`` (locating and classifying breaks), ``results`` (the outcome vocabulary and result types),
``report`` (schema, merge, gate, renderings), ``session`` / ``plugin`` / ``hookspecs`` (pytest).
"""

from __future__ import annotations

from pytest_fullgraph.artifacts import ArtifactError, load_generate, save_generate
from pytest_fullgraph.check import run_check
from pytest_fullgraph.levels import Level
from pytest_fullgraph.models import ModelSpec, Registry, build_tiny, register_model, tiny_config
from pytest_fullgraph.results import OUTCOMES, CheckResult, Mismatch

__all__ = [
    "OUTCOMES",
    "ArtifactError",
    "CheckResult",
    "Level",
    "Mismatch",
    "ModelSpec",
    "Registry",
    "build_tiny",
    "load_generate",
    "register_model",
    "run_check",
    "save_generate",
    "tiny_config",
]
__version__ = "0.1.0"
