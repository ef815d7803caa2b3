"""The module pytest registers (``pytest_fullgraph.plugin``) carries every hook and fixture of ``plugin.hooks``: pytest
finds hooks and fixtures as attributes of the registered module, so one defined in ``hooks`` but not re-exported
would silently never run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_fullgraph.plugin as plugin
from pytest_fullgraph.plugin import hooks

#: Modules of the plugin whose module-level ``pytest_*`` functions are hook specifications, not implementations.
SPECS = {"hookspecs.py"}


def _is_fixture(decorator: ast.expr) -> bool:
    return ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator) == "pytest.fixture"


def hooks_and_fixtures() -> set[str]:
    """The module-level hooks (``pytest_*``) and fixtures (``@pytest.fixture``) that ``hooks`` defines."""
    tree = ast.parse(Path(hooks.__file__).read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
            and (node.name.startswith("pytest_") or any(map(_is_fixture, node.decorator_list)))}


def test_every_hook_and_fixture_of_hooks_is_re_exported_by_the_registered_module() -> None:
    found = hooks_and_fixtures()
    assert {"pytest_configure", "pytest_addoption", "fullgraph_check", "fullgraph_settings"} <= found
    assert found == set(plugin.__all__)
    assert all(getattr(plugin, name) is getattr(hooks, name) for name in found)


def test_pytest_registers_the_plugin_module_under_its_entry_point_name(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.get_plugin("pytest_fullgraph.plugin") is plugin


def test_no_other_plugin_module_defines_a_hook_that_pytest_would_never_call() -> None:
    """Hooks outside ``hooks`` live on objects registered per run (``lifecycle.SessionHooks``), not at module level."""
    stray = []
    for path in sorted(Path(plugin.__file__).parent.glob("*.py")):
        if path.name in SPECS | {"hooks.py", "__init__.py"}:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("pytest_"):
                stray.append(f"{path.name}: {node.name}")
    assert stray == []
