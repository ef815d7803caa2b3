"""What the docs tell users to import comes from ``pytest_fullgraph`` itself, loaded on first use, so moving a
module never breaks a user's import and importing the plugin stays light."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import pytest_fullgraph
from tests import REPOSITORY

#: The names the docs teach; a name taken away from the package breaks users and must fail here first.
PINNED = {"fullgraph_generate", "export_generate", "UnsupportedGeneration", "load_generate", "save_generate",
          "register_model", "build_tiny", "tiny_config", "Level", "GraphRule", "ONE_GRAPH", "AT_LEAST_ONE_GRAPH",
          "GRAPHS_NOT_COUNTED", "generate_fn", "run_check", "CheckResult", "Mismatch", "OUTCOMES", "ArtifactError",
          "ModelSpec", "Registry"}


def test_the_public_names_are_pinned() -> None:
    assert set(pytest_fullgraph.__all__) == PINNED == set(pytest_fullgraph.PUBLIC_API)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_public_name_loads_from_its_module(name: str) -> None:
    value = getattr(pytest_fullgraph, name)
    assert value is not None
    assert name in dir(pytest_fullgraph)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'fullgraph_generat'"):
        pytest_fullgraph.fullgraph_generat  # noqa: B018


def test_importing_the_package_loads_no_torch_and_none_of_its_modules() -> None:
    code = ("import sys, pytest_fullgraph\n"
            "print(sorted(m for m in sys.modules if m.startswith(('torch', 'pytest_fullgraph.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_docs_import_only_from_the_package_itself() -> None:
    """Every ``from pytest_fullgraph... import`` in README and docs names the package (or its plugin), not a module
    that a layout change may move."""
    pages = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md"))]
    imports = {f"{page.name}: {match.group(0)}" for page in pages
               for match in re.finditer(r"^\s*from (pytest_fullgraph[\w.]*) import .*$", page.read_text(), re.M)}
    assert imports
    assert {line for line in imports if " from pytest_fullgraph import " not in line} == set()
