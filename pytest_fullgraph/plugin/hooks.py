"""pytest hooks and fixtures of pytest_fullgraph; each delegates to the session, options or report modules."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_fullgraph import models, report
from pytest_fullgraph.check.scenarios import BASIC
from pytest_fullgraph.core import compile_events
from pytest_fullgraph.core.environment import git_revision
from pytest_fullgraph.core.results import DEFAULT_DTYPE, CheckKey, CheckResult
from pytest_fullgraph.levels.builtin import builtin_levels
from pytest_fullgraph.plugin import crash_sites, hookspecs, options, progress, shipped_suite, signals
from pytest_fullgraph.plugin.baseline import baseline_of_run
from pytest_fullgraph.plugin.built_models import BuildFailed, Built, Unavailable
from pytest_fullgraph.plugin.session import DRAWS_PROPERTY, REPORT_ATTRIBUTE, RESULTS_KEY, FullgraphSession
from pytest_fullgraph.plugin.verdict import apply_verdict

if TYPE_CHECKING:
    from transformers import PreTrainedModel

SESSION_KEY = pytest.StashKey[FullgraphSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


#: The variable inductor reads for its cache directory (FX graph cache, compiled kernels).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"

#: Warnings dynamo gives on every compile of transformers' generate code, which a user of the suite cannot act
#: on; the checks' own findings are in their verdicts and the report.
COMPILE_NOISE = (
    "ignore:Dynamo detected a call to a `functools.lru_cache`:UserWarning",
    "ignore:While compiling, we found certain side effects happened:UserWarning",
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: runs only in the slow tier (--run-slow, RUN_SLOW or ini)")
    for line in COMPILE_NOISE:
        config.addinivalue_line("filterwarnings", line)
    registry = models.session_registry()
    config.hook.pytest_fullgraph_register_models(registry=registry)
    levels = builtin_levels()
    config.hook.pytest_fullgraph_register_levels(levels=levels)
    chosen = options.read_options(config)
    # the two effects of the options, before the selection: every worker reads the same checkpoints and costs
    options.register_checkpoints(registry, chosen)
    settings = options.resolve_settings(chosen, registry, options.read_shard_costs(chosen), levels,
                                        config.option.keyword)
    if settings.cache_dir is not None:
        # inductor reads the variable when it first needs its cache; xdist workers, started later, inherit it
        environment = pytest.MonkeyPatch()
        environment.setenv(INDUCTOR_CACHE_ENV, str(settings.cache_dir))
        config.add_cleanup(environment.undo)
    session = FullgraphSession(settings, registry, levels, is_worker=hasattr(config, "workerinput"),
                               left_out=shipped_suite.installed_directory() if settings.suite == "off" else None)
    session.baseline = baseline_of_run(config, chosen["fullgraph_baseline"],
                                       bool(chosen["fullgraph_baseline_update"].value), settings)
    session.restore_trace_logger = compile_events.silence_structured_trace()
    if not session.is_worker:
        git_revision()  # now, before the checks: the report names the commit that ran
    shipped_suite.add_to_collection(config, settings)
    config.stash[SESSION_KEY] = session
    sigterm = None if session.is_worker else signals.listen(config)  # a killed run still writes its report
    hooks = _ControllerHooks(session, crash_sites.install(config, session.is_worker), sigterm)
    config.pluginmanager.register(hooks, f"fullgraph-session-{id(config)}")
    if settings.progress != "off" and not session.is_worker:
        checks, earlier = checks_by_parameters(session), options.read_costs_report(chosen)
        progress.show(config, lambda nodeid: checks.get(parameters_of_test_id(nodeid)), earlier, settings.progress)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``--fullgraph-suite=off``: the shipped suite is not collected, even where testpaths or a path reach it."""
    session = config.stash.get(SESSION_KEY, None)
    return True if session is not None and session.leaves_out(collection_path) else None


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """Models were selected but no check was collected: say why rather than leave a bare "no tests ran"."""
    session = config.stash[SESSION_KEY]
    if not session.settings.models_selected or any("fullgraph_model_name" in getattr(item, "fixturenames", ())
                                                  for item in items):
        return None
    if session.settings.suite == "off":
        why = "--fullgraph-suite=off, and no collected test uses the fullgraph fixtures"
    elif config.args_source == pytest.Config.ArgsSource.ARGS and session.settings.suite == "auto":
        why = ("test paths on the command line replace the built-in suite (add --pyargs pytest_fullgraph.suite, "
               "or --fullgraph-suite=on)")
    else:
        why = "every conformance check was deselected (-k, -m or --deselect)"
    return (f"fullgraph: models {models_label(session.settings.models)} selected but no conformance check "
            f"collected: {why}")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.restore_trace_logger()
        session.warmup.wait()  # a thread still importing torch when the interpreter shuts down may crash it
    models.forget_external_models()


def models_label(names: tuple[str, ...], shown: int = 8) -> str:
    """The selected models for one line of output: all of a short list; a count and the first few of a long one."""
    if len(names) <= shown:
        return ",".join(names)
    return f"{len(names)} models ({','.join(names[:shown])},...)"


def pytest_report_header(config: pytest.Config) -> str:
    session = config.stash[SESSION_KEY]
    settings, tier = session.settings, "slow" if session.settings.run_slow else "fast"
    return (f"fullgraph: models={models_label(settings.models)} backend={settings.backend} "
            f"max_new_tokens={settings.max_new_tokens} tier={tier} strict={settings.strict} "
            f"dtypes={','.join(settings.dtypes)}" + (f" shard={settings.shard}" if settings.shard else "")
            + (f" device={settings.device}" if settings.device != "cpu" else "")
            + (f" scenarios={','.join(settings.scenarios)}" if settings.scenarios != BASIC else "")
            + (f" attn={settings.attn_implementation}" if settings.attn_implementation else "")
            + (f" levels={','.join(settings.levels)}" if settings.levels != session.collected_default() else ""))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize in model, scenario, level, dtype order, giving ids like ``llama-greedy-forward-float32``."""
    for fixture_name, values in _axes(metafunc.config.stash[SESSION_KEY]).items():
        if fixture_name in metafunc.fixturenames:
            metafunc.parametrize(fixture_name, values, ids=list(values))


def _axes(session: FullgraphSession) -> dict[str, tuple[str, ...]]:
    """The parametrized fixtures and their values, in test-id order; the same on every xdist worker."""
    return {"fullgraph_model_name": session.settings.models, "fullgraph_scenario": session.settings.scenarios,
            "fullgraph_level": session.collected_levels(), "fullgraph_dtype": session.settings.dtypes}


def check_of_test_id(nodeid: str, session: FullgraphSession) -> CheckKey | None:
    """The check (model, scenario, level, dtype) a test id names, or None: the controller does not collect items
    under xdist, so a crashed test's check is read back from its id (matched, not split: names may hold "-")."""
    return checks_by_parameters(session).get(parameters_of_test_id(nodeid))


def parameters_of_test_id(nodeid: str) -> str:
    """The parametrization part of a test id, ``llama-greedy-forward-float32``; "" when it has none."""
    return nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""


def checks_by_parameters(session: FullgraphSession) -> dict[str, CheckKey]:
    """Every check of the axes by its test id's parameters; where "-" in names spells one id two ways, the first
    in the axes' order."""
    found: dict[str, CheckKey] = {}
    for model, scenario, level, dtype in itertools.product(*_axes(session).values()):
        found.setdefault("-".join((model, scenario, level, dtype)), (model, scenario, level, dtype))
    return found


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


class _ControllerHooks:
    """Hooks bound to this run's session; registered per config, so pytester's nested runs stay apart.

    Workers attach each result to its test report; only the controller collects them and writes files.
    """

    def __init__(self, session: FullgraphSession, crashes: crash_sites.CrashSites | None,
                 sigterm: signals.SigtermListener | None) -> None:
        self.session, self.crashes, self.sigterm = session, crashes, sigterm
        self.collecting = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.session.is_worker:
            return
        for data in getattr(report, REPORT_ATTRIBUTE, None) or ():
            self.session.record(report.nodeid, CheckResult.from_dict(data))
        drawn = [str(value) for name, value in report.user_properties if name == DRAWS_PROPERTY]
        if drawn:
            self.session.draws[report.nodeid] = drawn[-1]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The workers have imported torch and collected: the report's needs load now, not after a SIGTERM."""
        if self.session.settings.report_dir is not None:
            self.session.warmup.start()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        if error is not None:
            self.session.crashed_workers.append({"node": progress.worker_id(node), "error": str(error).strip()[:500]})

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """xdist names the test a dead worker was running; a check among them is recorded as ``error``, with where
        the worker died when its faulthandler file says."""
        worker = progress.worker_id(getattr(report, "node", None))
        site = self.crashes.site(worker) if self.crashes is not None else ""
        self.session.record_crash(crashitem, worker, check_of_test_id(crashitem, self.session), site)

    def pytest_plugin_registered(self, plugin: object, manager: pytest.PytestPluginManager) -> None:
        """A conftest loaded during collection cannot add models or levels any more: say so, not "unknown"."""
        if not self.collecting:
            return
        late = [name for name in ("pytest_fullgraph_register_models", "pytest_fullgraph_register_levels")
                if hasattr(plugin, name)]
        if late:
            where = getattr(plugin, "__file__", None) or repr(plugin)
            raise pytest.UsageError(f"{where} implements {', '.join(late)} but was loaded during collection, "
                                    f"after the session chose its models and levels; {models.REGISTRATION_HINT}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        self.collecting = True
        models.close_registrations(True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collecting = False
        models.close_registrations(False)

    @pytest.hookimpl(tryfirst=True)  # before pytest formats the traceback: a second or two on a loaded machine
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or SIGTERM (or ``pytest.exit``) stopped the run: the report's JSON goes on disk now."""
        if not self.session.is_worker:
            returncode = getattr(excinfo.value, "returncode", None)  # pytest.exit's, as pytest reads it
            self.record_status(pytest.ExitCode.INTERRUPTED if returncode is None else returncode, stopped=False)
            self.session.write_json_now()

    @pytest.hookimpl(tryfirst=True)  # before xdist's teardown, which waits up to 10 s for each busy worker
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
        self.record_status(exitstatus, stopped=bool(session.shouldstop or session.shouldfail))
        if not self.session.is_worker:
            self.session.write_files(session.config.pluginmanager.get_plugin("terminalreporter"))

    def record_status(self, exitstatus: int | pytest.ExitCode, stopped: bool) -> None:
        self.session.run_status = {
            "exitstatus": int(exitstatus),
            "interrupted": int(exitstatus) == pytest.ExitCode.INTERRUPTED or stopped,
            **(self.sigterm.run_status() if self.sigterm else {}),
        }

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        closing = [] if self.session.is_worker else self.session.closing_lines()
        if self.session.is_worker or not (self.session.results or self.session.crashed_workers or closing):
            return
        terminalreporter.section("fullgraph")
        checked = self.session.results or self.session.crashed_workers
        for line in report.terminal_lines(self.session.finish_report()) if checked else []:
            terminalreporter.write_line(line)
        for path in self.session.written:
            terminalreporter.write_line(f"fullgraph report: {path}")
        for line in closing:
            terminalreporter.write_line(line)
        if self.session.repro_line:
            terminalreporter.write_line(f"fullgraph reproducers: {self.session.repro_line}")


# --- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fullgraph_settings(pytestconfig: pytest.Config) -> options.Settings:
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
    fullgraph_session: FullgraphSession = request.config.stash[SESSION_KEY]

    def run(model: str, scenario: str, level: str, dtype: str = DEFAULT_DTYPE, *,
            verdict: bool = True) -> CheckResult:
        __tracebackhide__ = True  # a verdict (a skip's `-rs` line) is located at the test's call, not in here
        result = fullgraph_session.run(model, scenario, level, dtype)
        request.node.stash.setdefault(RESULTS_KEY, []).append(result)
        if not fullgraph_session.is_worker:
            # recorded now, not only from the test's report: a run interrupted inside this test keeps it
            fullgraph_session.record(request.node.nodeid, result)
        first = result.first_break
        for name, value in (("fullgraph_outcome", result.outcome), ("graph_breaks", len(result.break_records())),
                            ("first_break", first.summary() if first else "")):
            request.node.user_properties.append((name, value))
        if verdict:
            apply_verdict(result, strict=fullgraph_session.settings.strict, baseline=fullgraph_session.baseline)
        return result

    return run
