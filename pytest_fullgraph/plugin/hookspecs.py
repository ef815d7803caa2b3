"""Hooks that pytest_fullgraph offers to conftest files and other plugins.

Both run once per session (on every xdist worker too) in ``pytest_configure``, so implement them in the
rootdir ``conftest.py``, a conftest next to the paths given on the command line, or a plugin: a conftest in
a sub-directory is loaded during collection, after the session has chosen its models and levels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_fullgraph.levels.base import Levels
    from pytest_fullgraph.models import Registry


@pytest.hookspec
def pytest_fullgraph_register_models(registry: Registry) -> None:
    """Add models to this session's registry, e.g. ``registry.register("mine", build, tags=["popular"])``.

    Called before the selected models are resolved.
    """


@pytest.hookspec
def pytest_fullgraph_register_levels(levels: Levels) -> None:
    """Add levels, e.g. ``levels.add(MyLevel())`` with ``MyLevel`` a ``pytest_fullgraph.levels.base.Level``.

    A level's name becomes the last part of test ids (``llama-greedy-mine``) and a column of the reports.
    """
