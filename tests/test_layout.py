"""The tests' own shape: folders that mirror the package (``tests/<package>/`` tests ``pytest_fullgraph/<package>/``,
``tests/bench/`` the bench/ scripts), each a package of its own, and files small enough to read."""

from __future__ import annotations

from pathlib import Path

import pytest_fullgraph
from tests import REPOSITORY

PACKAGE = Path(pytest_fullgraph.__file__).parent
TESTS = REPOSITORY / "tests"
#: The most lines a file of the tests may have.
MAX_LINES = 400
#: Test folders that mirror a folder of the repository other than the package: the bench/ scripts.
OTHER_FOLDERS = ("bench",)


def folders() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*") if path.is_dir() and path.name != "__pycache__")


def test_every_test_folder_mirrors_a_package_or_the_bench_scripts() -> None:
    unmatched = []
    for folder in folders():
        parts = folder.relative_to(TESTS).parts
        if not list(folder.glob("test_*.py")):
            continue
        mirrored = REPOSITORY / parts[0] if parts[0] in OTHER_FOLDERS else PACKAGE.joinpath(*parts) / "__init__.py"
        if not mirrored.exists():
            unmatched.append(str(folder.relative_to(REPOSITORY)))
    assert unmatched == [], f"test folders without a package of that path in pytest_fullgraph/: {unmatched}"


def test_every_test_folder_is_a_package() -> None:
    """tests/ is a package: a folder without ``__init__.py`` would import its files by their bare names, and two test
    files of one name in two folders would collide."""
    assert [str(folder.relative_to(REPOSITORY)) for folder in folders()
            if not (folder / "__init__.py").is_file()] == []


def test_a_test_at_the_top_is_not_named_after_a_module_of_a_package() -> None:
    """What tests one package's module belongs in that package's folder; the top holds the package as a whole."""
    modules = {path.stem: path.parent.relative_to(PACKAGE) for path in PACKAGE.glob("*/**/*.py")
               if path.stem != "__init__"}
    misplaced = {path.name: f"tests/{modules[path.stem[len('test_'):]]}/"
                 for path in sorted(TESTS.glob("test_*.py")) if path.stem[len("test_"):] in modules}
    assert misplaced == {}, f"move these next to what they test: {misplaced}"


def test_no_file_of_the_tests_is_over_the_line_limit() -> None:
    lengths = {str(path.relative_to(REPOSITORY)): len(path.read_text().splitlines())
               for path in sorted(TESTS.rglob("*.py"))}
    assert {path: lines for path, lines in lengths.items() if lines > MAX_LINES} == {}, (
        f"split these by the behaviour they test (at most {MAX_LINES} lines each)")
