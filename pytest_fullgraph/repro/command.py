"""``python -m pytest_fullgraph repro REPORT... [CHECK_ID|MODEL...] -o DIR``: a standalone script per failure cause.

Checks of one model that fail the same way share one script (``plan.grouped``). For each group: rebuild its
representative check (``case``), find the script that meets the recorded failure, shrink it (``reduce``), run it in
a fresh isolated process (``verify``; ``--python`` names its interpreter) and write it as ``DIR/<check id>.py`` only
if it exits 1 with the recorded failure. ``DIR/repro-index.json`` lists every check: written (by which script,
reduced how, verified in how long, by which interpreter) or not, and why.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_fullgraph.core.results import BREAK, ERROR, MISMATCH, CheckResult, first_line
from pytest_fullgraph.core.suggest import close_names
from pytest_fullgraph.models import Registry, session_registry
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.repro.case import Case, build_case, same_weights, script_for
from pytest_fullgraph.repro.plan import Group, grouped
from pytest_fullgraph.repro.reduce import quiet, reduce, run_here
from pytest_fullgraph.repro.source import GENERATE_TEMPLATES, render
from pytest_fullgraph.repro.verify import imports_package, run_isolated

INDEX_NAME = "repro-index.json"
FAILURES = (BREAK, ERROR, MISMATCH)
#: The longest a reproducer should be, as the issue asks; a longer one is still written and the index says so.
MAX_LINES = 60


@dataclass
class Entry:
    """One line of the index: a script and the checks it stands for, or checks no script is written for."""

    checks: list[str]
    written: str = ""
    reason: str = ""
    expected: str = ""
    template: str = ""
    reduced: list[str] = field(default_factory=list)
    lines: int = 0
    exit_status: int | None = None
    #: the script's human line in the fresh process ("BUG: ...")
    printed: str = ""
    verify_s: float = 0.0
    total_s: float = 0.0

    def line(self) -> str:
        checks = f"{len(self.checks)} check{'s' * (len(self.checks) > 1)}"
        if not self.written:
            return f"not written  {self.checks[0]} ({checks}): {self.reason}"
        reduced = f"reduced {', '.join(self.reduced)}" if self.reduced else "not reduced"
        long = f" (over {MAX_LINES})" if self.lines > MAX_LINES else ""
        return (f"written      {self.written} ({checks}): {self.expected}; {self.lines} lines{long}; {reduced}; "
                f"exit {self.exit_status} in a fresh process ({self.verify_s:.1f} s; {self.total_s:.1f} s in all)")


def select(checks: Sequence[CheckResult], selectors: Sequence[str]) -> list[CheckResult]:
    """The checks named by id or by model (its failing checks); every failing check when none are named.
    ``ValueError`` naming each selector that matches nothing, with close names."""
    if not selectors:
        return [result for result in checks if result.outcome in FAILURES]
    by_id = {result.check_id: result for result in checks}
    models = sorted({result.model for result in checks})
    chosen: dict[str, CheckResult] = {}
    unknown: list[str] = []
    for selector in selectors:
        if selector in by_id:
            chosen[selector] = by_id[selector]
        elif selector in models:
            chosen.update((r.check_id, r) for r in checks if r.model == selector and r.outcome in FAILURES)
        else:
            close = close_names(selector, [*by_id, *models])
            unknown.append(f"{selector!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    if unknown:
        raise ValueError(f"no check id or model in the reports: {', '.join(unknown)}")
    return list(chosen.values())


def reproduce(checks: Sequence[CheckResult], environment: dict[str, Any], output: Path, *, reduce_s: float = 120.0,
              timeout_s: float = 600.0, say: Callable[[str], None] = print,
              registry: Registry | None = None, python: str | None = None) -> list[Entry]:
    """Write the reproducers of ``checks`` into ``output`` with its index; ``say`` gets one line per script or
    per reason no script is written. ``python`` verifies the scripts (default: this interpreter)."""
    output.mkdir(parents=True, exist_ok=True)
    registry = registry or session_registry()
    groups, skipped = grouped(checks)
    entries = [*(_skipped(skipped, checks))]
    for entry in entries:
        say(entry.line())
    for group in groups:
        entry = _reproduce_group(group, environment, output, registry, reduce_s, timeout_s, python)
        say(entry.line())
        entries.append(entry)
    index = {"environment": {key: environment.get(key) for key in ("torch", "transformers", "python")},
             "verified_with": python or sys.executable, "reproducers": [asdict(entry) for entry in entries]}
    (output / INDEX_NAME).write_text(json.dumps(index, indent=1) + "\n")
    return entries


def _skipped(skipped: dict[str, str], checks: Iterable[CheckResult]) -> list[Entry]:
    """Checks no plan exists for, one entry per model and reason."""
    models = {result.check_id: result.model for result in checks}
    entries: dict[tuple[str, str], Entry] = {}
    for check_id, reason in skipped.items():
        entries.setdefault((models[check_id], reason), Entry([], reason=reason)).checks.append(check_id)
    return list(entries.values())


def _reproduce_group(group: Group, environment: dict[str, Any], output: Path, registry: Registry,
                     reduce_s: float, timeout_s: float, python: str | None) -> Entry:
    started = time.monotonic()
    result, plan = group.representative, group.plan
    entry = Entry(group.check_ids, expected=plan.expected.describe())
    try:
        with quiet():
            case = build_case(result, registry)
        if isinstance(case, str):
            entry.reason = case
        elif plan.expected.kind == "mismatch" and not same_weights(case, result, registry):
            entry.reason = "the seeded class does not rebuild the suite's weights, which a token mismatch depends on"
        else:
            _write_group(group, case, environment, output, reduce_s, timeout_s, python, entry)
    except Exception as error:  # one model's trouble is its own line; the other scripts are still written
        entry.reason = f"the check could not be rebuilt here ({type(error).__name__}: {first_line(error)})"
    entry.total_s = time.monotonic() - started
    return entry


def _write_group(group: Group, case: Case, environment: dict[str, Any], output: Path, reduce_s: float,
                 timeout_s: float, python: str | None, entry: Entry) -> None:
    """Find the template whose script meets the failure, shrink it, verify it in a fresh process, write it."""
    result, plan = group.representative, group.plan
    name = f"{result.check_id}.py"

    def attempt(candidate: Case, template: str) -> str:
        source = render(script_for(candidate, plan, template, group.check_ids, result, environment))
        status, found, text = run_here(source, str(output / name), timeout_s)
        differs = plan.expected.differs(found)
        return differs or ("" if status == 1 else f"the script exited {status}: {text.strip()[-300:]}")

    reasons = []
    for template in plan.templates:
        unusable = _unusable(template, case)
        reasons.append(unusable or attempt(case, template))
        if not reasons[-1]:
            break
    else:
        entry.reason = "; ".join(dict.fromkeys(reasons))
        return
    entry.template = template
    smaller = case if reduce_s <= 0 else reduce(case, template, lambda candidate: not attempt(candidate, template),
                                                reduce_s)
    source = render(script_for(smaller, plan, template, group.check_ids, result, environment))
    if imports_package(source):  # the templates never do; a guard, since the promise is the script's whole point
        entry.reason = "the script imports pytest_fullgraph"
        return
    _verify_and_write(source, output / name, plan.expected.differs, timeout_s, python, entry)
    entry.reduced = list(smaller.reduced)


def _unusable(template: str, case: Case) -> str:
    if template in GENERATE_TEMPLATES and case.generate_arguments:
        return (f"the scenario passes {', '.join(case.generate_arguments)} to generate, Python objects a script "
                "cannot inline")
    if template == "forward_compile" and not case.takes_cache:
        return "the model's forward takes no `cache` argument"
    return ""


def _verify_and_write(source: str, path: Path, differs: Callable[[dict[str, Any] | None], str], timeout_s: float,
                      python: str | None, entry: Entry) -> None:
    """Run the script in a fresh process; keep it at ``path`` only if it exits 1 with the recorded failure."""
    trial = path.with_suffix(".trying.py")
    trial.write_text(source)
    run = run_isolated(trial, timeout_s, python)
    entry.exit_status, entry.verify_s, entry.lines = run.status, run.seconds, len(source.splitlines())
    entry.printed = next((line for line in run.output.splitlines() if line.startswith(("BUG:", "FIXED:", "OTHER:"))),
                         "")
    problem = differs(run.found) or ("" if run.status == 1 else f"it exited {run.status}")
    if problem:
        trial.unlink()
        entry.reason = f"in a fresh process {problem}: {run.tail(3)}"
        return
    trial.replace(path)
    entry.written = path.name


def is_report(argument: str) -> bool:
    """A report among the command's arguments: a file that is there, or a name ending as a report's does."""
    return argument.endswith((".json", ".json.gz")) or Path(argument).is_file()


def run(arguments: Sequence[str], output: Path, *, reduce_s: float, timeout_s: float,
        python: str | None = None) -> int:
    """The command: 0 once every selected check has its line (written or not, with why), 2 on bad input. A report
    that cannot be read raises ``ReportError`` (the command line's one-line error, exit 2)."""
    from pytest_fullgraph import report

    # absolute, as the script runs from an empty directory; not resolved, as a venv's python is a link to the base one
    interpreter = shutil.which(python) if python else None
    interpreter = os.path.abspath(interpreter) if interpreter else None
    if python and not interpreter:
        print(f"pytest_fullgraph: error: repro: --python {python!r} is not an executable file (give the path of a "
              "Python interpreter, e.g. VENV/bin/python)", file=sys.stderr)
        return 2

    paths, selectors = [a for a in arguments if is_report(a)], [a for a in arguments if not is_report(a)]
    if not paths:
        print("pytest_fullgraph: error: repro: no report given (REPORT.json or .json.gz first, then check ids or "
              "models)", file=sys.stderr)
        return 2
    checks: dict[tuple[str, ...], CheckResult] = {}
    environment: dict[str, Any] = {}
    for path in report.distinct(paths):
        loaded = report.load(path)
        environment = environment or loaded.environment
        checks.update((result.key, result) for result in loaded.checks)  # a later report's check wins
    try:
        chosen = select(list(checks.values()), selectors)
    except ValueError as error:
        print(f"pytest_fullgraph: error: repro: {error}", file=sys.stderr)
        return 2
    if not chosen:
        print("no failing check in the reports: nothing to reproduce")
    entries = reproduce(chosen, environment, output, reduce_s=reduce_s, timeout_s=timeout_s,
                        say=lambda line: print(line, flush=True), python=interpreter)
    print(summary(entries, output))
    return 0


def summary(entries: Sequence[Entry], output: Path) -> str:
    """The closing line: scripts written, causes without one, and where the index is."""
    written = sum(1 for entry in entries if entry.written)
    return (f"{written} reproducer(s) written to {output}, {len(entries) - written} cause(s) without one; "
            f"{output / INDEX_NAME} lists every check")


def reproduce_run(run: Report, output: Path, terminal: Any) -> str:
    """``--fullgraph-repro=DIR``: the reproducers of a run's failing checks, written as the run ends, a line each on
    ``terminal`` (pytest's terminal reporter, or None); the closing line. The run's results are kept whatever
    happens here: a failure of this step is that line."""
    if run.interrupted:
        return "reproducers not written: the run was interrupted (run python -m pytest_fullgraph repro on its report)"
    say = (lambda line: terminal.write_line(f"fullgraph repro: {line}")) if terminal else (lambda line: None)
    try:
        failing = select(run.checks, [])
        if failing and terminal:
            terminal.write_line("")  # ends the progress line, which xdist leaves open
        entries = reproduce(failing, run.environment, output, say=say)
        return summary(entries, output) if failing else f"no failing check: {output / INDEX_NAME} lists none"
    except Exception as error:  # the run's verdicts and report stand; say what stopped this step
        return f"reproducers not written: {type(error).__name__}: {first_line(error)}"
