"""The package's shape: one package per concern, imports flowing one way between them (each package's
``__init__`` says what it may import), and modules small enough to read."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest_fullgraph

PACKAGE = Path(pytest_fullgraph.__file__).parent
#: Lines a module may have, every module alike.
MAX_LINES = 300
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
    wrong: list[str] = []
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


#: Prints, as JSON, the modules of ours and of torch that a Python process loaded after running the code before it.
_LOADED = ("\nimport json, sys\n"
           "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest_fullgraph', 'torch'))))")
#: The modules that render a report (Markdown, HTML, terminal) and the tables they read.
RENDERERS = {f"pytest_fullgraph.report.{name}" for name in ("html", "html_parts", "html_sites", "render", "sections",
                                                           "tables", "terminal")}


def loaded_after(code: str) -> list[str]:
    """The modules of ours and of torch that a fresh process has loaded after running ``code``."""
    completed = subprocess.run([sys.executable, "-c", code + _LOADED], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return list(json.loads(completed.stdout.splitlines()[-1]))


def test_importing_report_loads_a_few_modules_and_no_torch() -> None:
    """``report``'s names load on first use: a tool that reads reports (collate, CI's gate) pays for what it uses."""
    loaded = loaded_after("import pytest_fullgraph.report")
    assert not [name for name in loaded if name.split(".")[0] == "torch"]
    assert "pytest_fullgraph.report" in loaded and len(loaded) < 15, loaded
    assert not RENDERERS & set(loaded)


def test_reading_a_report_loads_no_renderer(tmp_path: Path) -> None:
    """Loading a report (to merge it, gate it, draw from it) renders nothing, so it loads no renderer either."""
    from pytest_fullgraph.core.results import BreakRecord, CheckResult
    from pytest_fullgraph.report.files import save
    from pytest_fullgraph.report.schema import Report

    record = BreakRecord("torch._dynamo.exc.Unsupported", "Data-dependent branching", "GB0170", "msg",
                         "transformers/x.py", 7, "forward", "if x:", "model")
    checks = [CheckResult("llama", "greedy", "decode", "aot_eager", 4, "break", "1 break", first_break=record,
                          breaks=[record]), CheckResult("llama", "greedy", "forward", "aot_eager", 4, "pass", "")]
    path = tmp_path / "fullgraph-report.json.gz"
    save(Report({"torch": "2.13.0", "levels": {"decode": "", "forward": ""}}, checks), path)
    code = (f"from pytest_fullgraph.report import files\nreport = files.load({str(path)!r})\n"
            "assert [r.level for r in report.sorted_checks()] == ['decode', 'forward'], report.checks")
    loaded = loaded_after(code)
    assert "pytest_fullgraph.report.files" in loaded and "pytest_fullgraph.report.schema" in loaded
    assert not RENDERERS & set(loaded), sorted(RENDERERS & set(loaded))
    assert not [name for name in loaded if name.split(".")[0] == "torch"]
