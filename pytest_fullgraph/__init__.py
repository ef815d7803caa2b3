"""pytest_fullgraph: does generation compile as one graph, and are its tokens exactly eager's?"""

from __future__ import annotations

from pytest_fullgraph.check import OUTCOMES, CheckResult, Mismatch, run_check
from pytest_fullgraph.registry import ModelSpec, Registry, build_tiny, register_model, tiny_config

__all__ = [
    "OUTCOMES",
    "CheckResult",
    "Mismatch",
    "ModelSpec",
    "Registry",
    "build_tiny",
    "register_model",
    "run_check",
    "tiny_config",
]
__version__ = "0.1.0"
