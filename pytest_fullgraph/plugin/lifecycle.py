"""One run's session from start to end, behind the one-line hooks of ``hooks``: starting it in ``pytest_configure``
(options read, models and levels registered, settings resolved), the hooks bound to it for the run (results from
workers, crashed workers, interrupts, the files written at the end), and the lines it adds to pytest's output.

Workers attach each result to its test report; only the controller collects them and writes files.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_fullgraph import models, report
from pytest_fullgraph.check.scenarios import BASIC
from pytest_fullgraph.core import compile_events
from pytest_fullgraph.core.environment import git_revision
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.levels.builtin import builtin_levels
from pytest_fullgraph.plugin import crash_sites, options, progress, shipped_suite, signals
from pytest_fullgraph.plugin.baseline import baseline_of_run
from pytest_fullgraph.plugin.session import (
    DRAWS_PROPERTY,
    REPORT_ATTRIBUTE,
    SESSION_KEY,
    FullgraphSession,
    parameters_of_test_id,
)
from pytest_fullgraph.plugin.settings import (
    read_costs_report,
    read_shard_costs,
    register_checkpoints,
    resolve_settings,
)

#: The variable inductor reads for its cache directory (FX graph cache, compiled kernels).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"

#: Warnings dynamo gives on every compile of transformers' generate code, which a user of the suite cannot act
#: on; the checks' own findings are in their verdicts and the report.
COMPILE_NOISE = (
    "ignore:Dynamo detected a call to a `functools.lru_cache`:UserWarning",
    "ignore:While compiling, we found certain side effects happened:UserWarning",
)


def start(config: pytest.Config) -> None:
    """The run's session, stored on ``config`` (``SESSION_KEY``), with its hooks registered; every xdist worker
    starts one too, deciding the same models, levels and settings from the same options."""
    config.addinivalue_line("markers", "slow: runs only in the slow tier (--run-slow, RUN_SLOW or ini)")
    for line in COMPILE_NOISE:
        config.addinivalue_line("filterwarnings", line)
    registry = models.session_registry()
    config.hook.pytest_fullgraph_register_models(registry=registry)
    levels = builtin_levels()
    config.hook.pytest_fullgraph_register_levels(levels=levels)
    chosen = options.read_options(config)
    # the two effects of the options, before the selection: every worker reads the same checkpoints and costs
    register_checkpoints(registry, chosen)
    settings = resolve_settings(chosen, registry, read_shard_costs(chosen), levels, config.option.keyword)
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
    hooks = SessionHooks(session, crash_sites.install(config, session.is_worker), sigterm)
    config.pluginmanager.register(hooks, f"fullgraph-session-{id(config)}")
    if settings.progress != "off" and not session.is_worker:
        checks, earlier = session.checks_by_parameters(), read_costs_report(chosen)
        progress.show(config, lambda nodeid: checks.get(parameters_of_test_id(nodeid)), earlier, settings.progress)


def finish(config: pytest.Config) -> None:
    """Put back what the session changed outside itself, when pytest unconfigures."""
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.restore_trace_logger()
        session.warmup.wait()  # a thread still importing torch when the interpreter shuts down may crash it
    models.forget_external_models()


# --- the session's lines in pytest's output -------------------------------------------------------------------


def models_label(names: tuple[str, ...], shown: int = 8) -> str:
    """The selected models for one line of output: all of a short list; a count and the first few of a long one."""
    if len(names) <= shown:
        return ",".join(names)
    return f"{len(names)} models ({','.join(names[:shown])},...)"


def header_line(session: FullgraphSession) -> str:
    """The run's settings in the report header; a setting at its usual value is left out."""
    run, tier = session.settings, "slow" if session.settings.run_slow else "fast"
    return (f"fullgraph: models={models_label(run.models)} backend={run.backend} "
            f"max_new_tokens={run.max_new_tokens} tier={tier} strict={run.strict} "
            f"dtypes={','.join(run.dtypes)}" + (f" shard={run.shard}" if run.shard else "")
            + (f" device={run.device}" if run.device != "cpu" else "")
            + (f" scenarios={','.join(run.scenarios)}" if run.scenarios != BASIC else "")
            + (f" attn={run.attn_implementation}" if run.attn_implementation else "")
            + (f" levels={','.join(run.levels)}" if run.levels != session.collected_default() else ""))


def nothing_collected_line(session: FullgraphSession, config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """Models were selected but no check was collected: why, rather than a bare "no tests ran"; None otherwise."""
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


# --- the hooks bound to one run's session ---------------------------------------------------------------------


class SessionHooks:
    """Hooks bound to this run's session; registered per config, so pytester's nested runs stay apart."""

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
        self.session.record_crash(crashitem, worker, self.session.check_of_test_id(crashitem), site)

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
