"""The plugin's own tests, in folders that mirror the package: ``tests/<package>/`` tests
``pytest_fullgraph/<package>/`` and ``tests/bench/`` the bench/ scripts; what tests the package as a whole (its shape,
public API, installation, command line and workflow) sits here, beside the shared conftest, factories and helpers."""

from pathlib import Path

#: The repository's root, wherever below ``tests/`` a test file sits.
REPOSITORY = Path(__file__).resolve().parent.parent
