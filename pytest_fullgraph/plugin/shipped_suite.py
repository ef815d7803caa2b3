"""The shipped conformance suite (``pytest_fullgraph.suite``, this repository's ``suites/``): where this installation
has it, and adding it to a run's collection (``--fullgraph-suite``; ``FullgraphSession.leaves_out`` keeps it out)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pytest_fullgraph.plugin.settings import Settings


def installed_directory() -> Path | None:
    """Where the shipped conformance suite is (this repository's ``suites/`` in an editable install); None when
    this installation has none."""
    spec = importlib.util.find_spec("pytest_fullgraph.suite")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def suite_directory() -> Path:
    """The shipped conformance suite's directory, which the run needs: a usage error saying what to do without."""
    suite = installed_directory()
    if suite is None:
        raise pytest.UsageError("pytest_fullgraph.suite (the conformance suite) is not importable from this "
                                "installation: reinstall pytest_fullgraph (pip install -e . in a clone), or pass "
                                "--fullgraph-suite=off and name your own test paths")
    return suite


def add_to_collection(config: pytest.Config, settings: Settings) -> None:
    """Add the conformance suite to what pytest collects, as if its directory were given as a path.

    "auto" adds it when models were selected and pytest was given no paths of its own (so paths given on the
    command line mean "run these"); a path that already covers the suite (this repository's testpaths) is
    collected once. Workers re-parse the same command line and decide the same.
    """
    explicit_paths = config.args_source == pytest.Config.ArgsSource.ARGS
    wanted = settings.suite == "on" or (settings.suite == "auto" and settings.models_selected and not explicit_paths)
    if not wanted:
        return
    suite = suite_directory()
    covered = []
    for argument in config.args:
        path = Path(config.invocation_params.dir, argument.split("::")[0]).resolve()
        covered.append(path == suite or path in suite.parents)
    if not any(covered):
        config.args.append(str(suite))
