"""Hooks that pytest_fullgraph offers to conftest files and other plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_fullgraph.registry import Registry


@pytest.hookspec
def pytest_fullgraph_register_models(registry: Registry) -> None:
    """Add models to this session's registry, e.g. ``registry.register("mine", build, tags=["popular"])``.

    Called once per session (on every xdist worker too), before the selected models are resolved.
    """
