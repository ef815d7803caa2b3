"""The conformance suite: one test per (model, scenario, level, dtype), ids like ``llama-greedy-forward-float32``."""

from __future__ import annotations

from collections.abc import Callable

from pytest_fullgraph import CheckResult


def test_generation_compiles_exactly(
    fullgraph_model_name: str,
    fullgraph_scenario: str,
    fullgraph_level: str,
    fullgraph_dtype: str,
    fullgraph_check: Callable[..., CheckResult],
) -> None:
    """Compiled generation must equal eager token for token; a graph break is xfail unless strict."""
    fullgraph_check(fullgraph_model_name, fullgraph_scenario, fullgraph_level, fullgraph_dtype)
