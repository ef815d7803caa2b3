"""The pytest plugin, registered as this module (``pytest_fullgraph.plugin``, its entry point's name): the hooks
and fixtures of ``hooks``, one-liners over the run's ``session``, which ``lifecycle`` starts and serves. Beside
them: options, their parsers and the ``Settings`` they make (``options``, ``parsers``, ``settings``), the hooks we
declare (``hookspecs``), the live progress line (``progress``), signals (``signals``), crash sites
(``crash_sites``), the models a run builds (``built_models``), verdicts as pytest outcomes (``verdict``), the in-run
baseline gate (``baseline``) and the shipped suite (``shipped_suite``).

May import everything.
"""

from __future__ import annotations

from pytest_fullgraph.plugin.hooks import (
    fullgraph_check,
    fullgraph_model,
    fullgraph_settings,
    pytest_addhooks,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_generate_tests,
    pytest_ignore_collect,
    pytest_report_collectionfinish,
    pytest_report_header,
    pytest_runtest_makereport,
    pytest_unconfigure,
)

__all__ = [
    "fullgraph_check",
    "fullgraph_model",
    "fullgraph_settings",
    "pytest_addhooks",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_ignore_collect",
    "pytest_report_collectionfinish",
    "pytest_report_header",
    "pytest_runtest_makereport",
    "pytest_unconfigure",
]
