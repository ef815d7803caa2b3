"""The package's shape: one package per concern, imports flowing one way between them (each package's
``__init__`` says what it may import), and modules small enough to read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_fullgraph

PACKAGE = Path(pytest_fullgraph.__file__).parent
#: Lines a module may have, every module alike.
MAX_LINES = 350
#: Package → the packages of ours its modules may import (``plugin`` and the package root import anything): data flows
#: from the shared vocabulary up to the plugin, and reading a report needs neither torch nor a level.
MAY_IMPORT = {
    "core": {"core"},
    "loop": {"loop", "core"},
    "models": {"models", "core"},
    "levels": {"levels", "loop", "core", "models"},
    "check": {"check", "levels", "loop", "core", "models"},
    "report": {"report", "core"},
    "publish": {"publish", "report", "core"},
    "repro": {"repro", "check", "report", "core", "models"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, modules: set[str]) -> set[str]:
    """Modules of this package imported at module level (not inside functions or ``if TYPE_CHECKING``)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import submodule` imports the submodule (a package's __init__ runs first whatever
            # imports it, so that edge says nothing of the flow); `from module import name` the module
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules
            found.update(submodules or {node.module})
    return found & modules


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: _top_level_imports(path, set(paths)) - {name} for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as a list of modules (first repeated at the end), or [] when there is none."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*stack[stack.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = "done"
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert graph.get("pytest_fullgraph.check.run")  # the reader sees the imports
    assert find_cycle(graph) == []


def test_the_cycle_finder_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_no_module_is_too_long_to_read() -> None:
    long = {str(path.relative_to(PACKAGE)): lines for path in PACKAGE.rglob("*.py")
            if (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: split them by concern"


def _imports_of_ours(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of this package's modules in a file, inside functions too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("pytest_fullgraph."):
            found.append((node.lineno, str(node.module)))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names
                         if alias.name.startswith("pytest_fullgraph."))
    return found


def wrong_way_imports(package_root: Path, may_import: dict[str, set[str]]) -> list[str]:
    """"FILE:LINE: PACKAGE -> MODULE" for each import a package's rule forbids."""
    wrong = []
    for path in sorted(package_root.rglob("*.py")):
        parts = path.relative_to(package_root).parts
        if len(parts) < 2 or parts[0] not in may_import:
            continue
        wrong.extend(f"{path.relative_to(package_root)}:{line}: {parts[0]} -> {module}"
                     for line, module in _imports_of_ours(path) if module.split(".")[1] not in may_import[parts[0]])
    return wrong


def test_every_package_imports_only_what_its_rule_allows() -> None:
    assert set(MAY_IMPORT) | {"plugin"} == {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert wrong_way_imports(PACKAGE, MAY_IMPORT) == []


def test_a_wrong_way_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "render.py").write_text("def f():\n    from pytest_fullgraph.levels.builtin import X\n")
    assert wrong_way_imports(tmp_path, MAY_IMPORT) == ["report/render.py:2: report -> pytest_fullgraph.levels.builtin"]


def test_every_package_says_what_it_holds_and_may_import() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in docstring, f"{init.relative_to(PACKAGE)} does not say what it may import"
