"""pytest hooks and fixtures of pytest_fullgraph: one-liners over the run's session (``session``), started and
served by ``lifecycle``. Every hook and fixture here is re-exported by ``pytest_fullgraph.plugin``, the module
pytest registers."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fullgraph.core.results import DEFAULT_DTYPE, CheckResult
from pytest_fullgraph.plugin import hookspecs, lifecycle, options
from pytest_fullgraph.plugin.built_models import BuildFailed, Built, Unavailable
from pytest_fullgraph.plugin.session import REPORT_ATTRIBUTE, RESULTS_KEY, SESSION_KEY, FullgraphSession
from pytest_fullgraph.plugin.settings import Settings
from pytest_fullgraph.plugin.verdict import apply_verdict

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    lifecycle.start(config)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``--fullgraph-suite=off``: the shipped suite is not collected, even where testpaths or a path reach it."""
    session = config.stash.get(SESSION_KEY, None)
    return True if session is not None and session.leaves_out(collection_path) else None


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """Models were selected but no check was collected: say why rather than leave a bare "no tests ran"."""
    return lifecycle.nothing_collected_line(config.stash[SESSION_KEY], config, items)


def pytest_unconfigure(config: pytest.Config) -> None:
    lifecycle.finish(config)


def pytest_report_header(config: pytest.Config) -> str:
    return lifecycle.header_line(config.stash[SESSION_KEY])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize in model, scenario, level, dtype order, giving ids like ``llama-greedy-forward-float32``."""
    for fixture_name, values in metafunc.config.stash[SESSION_KEY].axes().items():
        if fixture_name in metafunc.fixturenames:
            metafunc.parametrize(fixture_name, values, ids=list(values))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash[SESSION_KEY].settings.run_slow:
        return
    skip_slow = pytest.mark.skip(reason="slow tier is off: use --run-slow or RUN_SLOW=1")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip_slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    results = item.stash.get(RESULTS_KEY, None)
    if results and report.when == "call":
        # JSON builtins: xdist ships them to the controller
        setattr(report, REPORT_ATTRIBUTE, [result.to_dict() for result in results])
    return report


# --- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fullgraph_settings(pytestconfig: pytest.Config) -> Settings:
    """The validated fullgraph options of this run."""
    return pytestconfig.stash[SESSION_KEY].settings


@pytest.fixture
def fullgraph_model(request: pytest.FixtureRequest, fullgraph_model_name: str) -> PreTrainedModel:
    """The selected model, built once per worker, in the test's ``fullgraph_dtype`` if it has that axis
    (float32 otherwise); a build failure errors this test only."""
    callspec = getattr(request.node, "callspec", None)
    dtype = callspec.params.get("fullgraph_dtype", DEFAULT_DTYPE) if callspec else DEFAULT_DTYPE
    entry = request.config.stash[SESSION_KEY].model(fullgraph_model_name, dtype)
    if isinstance(entry, Unavailable):
        pytest.skip(f"{fullgraph_model_name}: skipped: {entry.reason}")
    if isinstance(entry, BuildFailed):
        raise RuntimeError(f"model {fullgraph_model_name!r} failed to build") from entry.error
    assert isinstance(entry, Built)
    return entry.model


@pytest.fixture
def fullgraph_check(request: pytest.FixtureRequest) -> Callable[..., CheckResult]:
    """Run one check: ``fullgraph_check(model, scenario, level, dtype="float32")`` → ``CheckResult``.

    The result is recorded for the report and JUnit, then judged (xfail on a break unless strict, fail on
    mismatch/error/nondeterministic) unless ``verdict=False``.
    """
    session: FullgraphSession = request.config.stash[SESSION_KEY]

    def run(model: str, scenario: str, level: str, dtype: str = DEFAULT_DTYPE, *,
            verdict: bool = True) -> CheckResult:
        __tracebackhide__ = True  # a verdict (a skip's `-rs` line) is located at the test's call, not in here
        result = session.run_in_test(request.node, model, scenario, level, dtype)
        if verdict:
            apply_verdict(result, strict=session.settings.strict, baseline=session.baseline)
        return result

    return run
