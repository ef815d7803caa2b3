"""Running a written script as a maintainer would: a fresh interpreter in an empty directory, isolated (``-I``: no
environment variables, no user site, not the script's directory on ``sys.path``), with ``pytest_fullgraph`` made
unimportable, so a script that leaned on this package fails instead of passing for a standalone one. The interpreter
is this one unless another is named: a virtual environment with only torch and transformers installed is the
maintainer's setup exactly."""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_fullgraph.repro.source import parse_result

PACKAGE = "pytest_fullgraph"
#: Runs the script as ``__main__`` after putting a finder first that refuses this package (an editable install
#: would otherwise find it from any directory).
RUNNER = f'''import runpy, sys
class NoPlugin:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {PACKAGE!r}:
            raise ModuleNotFoundError("{PACKAGE} is not importable in a reproducer's process", name=name)
sys.meta_path.insert(0, NoPlugin())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@dataclass(frozen=True)
class Run:
    """What a script did in a fresh process."""

    status: int | None
    found: dict[str, Any] | None
    output: str
    seconds: float

    def tail(self, lines: int = 6) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])


def imports_package(source: str) -> bool:
    """Whether the script's text imports this package anywhere."""
    for node in ast.walk(ast.parse(source)):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(name.partition(".")[0] == PACKAGE for name in names):
            return True
    return False


def run_isolated(path: Path, timeout_s: float, python: str | None = None) -> Run:
    """Run the script at ``path`` in a fresh, isolated interpreter (``python``, else this one) from an empty
    temporary directory."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="repro-") as directory:
        try:
            completed = subprocess.run([python or sys.executable, "-I", "-c", RUNNER, str(Path(path).resolve())],
                                       cwd=directory, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as expired:
            output = expired.stdout if isinstance(expired.stdout, str) else ""
            return Run(None, None, f"{output}\ntimed out after {timeout_s:g} s", time.monotonic() - started)
    output = completed.stdout + completed.stderr
    return Run(completed.returncode, parse_result(completed.stdout), output, time.monotonic() - started)
