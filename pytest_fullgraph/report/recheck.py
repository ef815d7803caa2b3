"""``report recheck``: rerun a random sample of recorded checks with the current code and list each whose outcome or
first break site differs from its record, so committed data stays falsifiable.

Each check reruns as the suite runs it, one pytest process per check (``-n 1``: a worker that dies is that check's
error, not the command's), with the recorded run's backend, ``max_new_tokens``, tier, break mode, dtype, device
and attention implementation; the installed torch and transformers must be the recorded releases. No torch import.
"""

from __future__ import annotations

import importlib.metadata
import json
import random
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_fullgraph import report
from pytest_fullgraph.core.results import CheckKey, CheckResult
from pytest_fullgraph.report.gate import first_break_site, settings_differences

#: Seconds one rechecked check may take before its pytest process is stopped (the suite's own limit is 900 s).
PROCESS_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Drawn:
    """A recorded check drawn for a recheck, with the report it came from."""

    source: str
    environment: dict[str, Any]
    result: CheckResult


@dataclass(frozen=True)
class Rechecked:
    """A recorded check and what it gives now; ``differs`` says how, "" when it is the same."""

    source: str
    check_id: str
    recorded: str
    now: str
    differs: str
    command: str

    def line(self) -> str:
        if self.differs:
            return f"DIFFERS {self.source} {self.check_id}: {self.differs}"
        return f"SAME {self.source} {self.check_id}: {self.now}"


def draw(paths: Sequence[str], sample: int, seed: int) -> list[Drawn]:
    """``sample`` checks drawn at random (``seed``) from every check of the reports, each report read once."""
    population = []
    for path in report.distinct(paths):
        loaded = report.load(path)
        population += [Drawn(str(path), loaded.environment, result) for result in loaded.sorted_checks()]
    if sample > len(population):
        raise report.ReportError(f"--sample {sample}: the reports hold {len(population)} checks")
    return random.Random(seed).sample(population, sample)


def check_releases(drawn: Sequence[Drawn]) -> None:
    """The installed torch and transformers must be the recorded ones: a recheck on another release measures it."""
    installed = {name: importlib.metadata.version(name) for name in ("torch", "transformers")}
    for each in drawn:
        found = settings_differences({name: each.environment.get(name) for name in installed}, installed,
                                     ("recorded", "installed"))
        if found:
            raise report.ReportError(f"{each.source}: recorded with other releases than installed ({found[0]}): "
                                     "recheck it in an environment of the recorded releases")


def pytest_arguments(drawn: Drawn | Sequence[Drawn], report_dir: Path) -> list[str]:
    """The suite's command line that runs exactly the drawn check(s), with their run's settings.

    Several checks (of one report) run in one process, each selected by its id with ``-k``, and a worker that dies
    on one of them is restarted for the next (``--max-worker-restart``).
    """
    batch = [drawn] if isinstance(drawn, Drawn) else list(drawn)
    environment, results = batch[0].environment, [each.result for each in batch]
    if any(each.environment is not environment for each in batch):
        raise ValueError("checks rerun in one process must come from one report")
    arguments = ["-m", "pytest", "-n", "1", "-p", "no:cacheprovider", "--pyargs",
                 "pytest_fullgraph.suite.test_conformance"]
    for option, field in (("models", "model"), ("scenarios", "scenario"), ("levels", "level"), ("dtype", "dtype"),
                          ("backend", "backend")):
        values = sorted({getattr(result, field) for result in results})
        if option in ("dtype", "backend") and len(values) > 1:
            raise ValueError(f"checks rerun in one process must share one {option}: {', '.join(values)}")
        arguments.append(f"--fullgraph-{option}={','.join(values)}")
    arguments.append(f"--fullgraph-report={report_dir}")
    if len(batch) > 1:
        arguments += ["-k", " or ".join(result.check_id for result in results), f"--max-worker-restart={len(batch)}"]
    for option, key in (("--fullgraph-max-new-tokens", "max_new_tokens"), ("--fullgraph-breaks", "breaks"),
                        ("--fullgraph-device", "device"), ("--fullgraph-attn", "attn_implementation"),
                        ("--fullgraph-recompiles", "recompiles")):
        if environment.get(key) not in (None, "", "none"):
            arguments.append(f"{option}={environment[key]}")
    return [*arguments, *(["--run-slow"] if environment.get("run_slow") else [])]


def describe(result: CheckResult | None) -> str:
    if result is None:
        return "no result"
    site = sorted(first_break_site(result))
    return result.outcome + (f" at {site[0][0]} ({site[0][1]})" if site else "")


def rerun_results(batch: Sequence[Drawn]) -> dict[CheckKey, CheckResult] | None:
    """The checks of ``batch`` (one report's) run again in one pytest process: the results it wrote, by key (a check
    it wrote none for is absent), or None when the process ran past its limit (``PROCESS_TIMEOUT_S`` a check)."""
    with tempfile.TemporaryDirectory(prefix="fullgraph-recheck-") as directory:
        try:
            subprocess.run([sys.executable, *pytest_arguments(batch, Path(directory))], capture_output=True, text=True,
                           timeout=PROCESS_TIMEOUT_S * len(batch), check=False)
        except subprocess.TimeoutExpired:
            return None
        path = Path(directory) / report.JSON_NAME
        return {result.key: result for result in report.load(path).checks} if path.is_file() else {}


def rerun_batch(batch: Sequence[Drawn]) -> list[str]:
    """One more draw of each check of ``batch``, all in one pytest process: each outcome, "missing" where the run
    wrote none, all "timeout" when the process ran past its limit."""
    found = rerun_results(batch)
    if found is None:
        return ["timeout"] * len(batch)
    return [found[each.result.key].outcome if each.result.key in found else "missing" for each in batch]


def recheck_one(drawn: Drawn) -> Rechecked:
    """Rerun one check in its own pytest process and compare it with its record."""
    command = shlex.join(["python", *pytest_arguments(drawn, Path("recheck-report"))])
    results = rerun_results([drawn])
    if results is None:
        return Rechecked(drawn.source, drawn.result.check_id, describe(drawn.result), "timeout",
                         f"its rerun ran past {PROCESS_TIMEOUT_S} s", command)
    found = results.get(drawn.result.key)
    recorded, now = describe(drawn.result), describe(found)
    differs = "" if recorded == now else f"recorded {recorded}, now {now}" + (
        f": {found.headline()}" if found is not None else " (the rerun wrote no report)")
    return Rechecked(drawn.source, drawn.result.check_id, recorded, now, differs, command)


def run(paths: Sequence[str], sample: int, seed: int, as_json: str | None) -> int:
    """The command: exit 0 when every drawn check is as recorded, 1 when any differs."""
    drawn = draw(paths, sample, seed)
    check_releases(drawn)
    results = []
    for number, each in enumerate(drawn, 1):
        results.append(recheck_one(each))
        print(f"[{number}/{len(drawn)}] {results[-1].line()}", flush=True)
    differing = [each for each in results if each.differs]
    print(f"{len(results)} recorded check(s) rechecked (seed {seed}): {len(differing)} differ")
    if as_json:
        report.write_atomic(Path(as_json), json.dumps({"seed": seed, "sample": sample, "reports": list(paths),
                                                       "rechecked": [asdict(each) for each in results]},
                                                      indent=2) + "\n")
    return 1 if differing else 0
