"""pytest_fullgraph: does generation compile as one graph, and are its tokens exactly eager's?

Layout, one concern per module (data flows down this list):
``options`` (command line, environment, ini → ``Settings``), ``models`` (registry and tiny-model records),
``scenarios`` (inputs and generation settings), ``levels`` (how each level compiles, diagnoses and counts
graphs), ``check`` (the decision tree), ``compare`` (exact comparison and its explanation), ``decode`` (our
single-graph loop), ``breaks`` (locating and classifying breaks), ``results`` (the outcome vocabulary and
result types), ``report`` (schema, merge, gate, renderings), ``session`` / ``plugin`` / ``hookspecs`` (pytest).
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
