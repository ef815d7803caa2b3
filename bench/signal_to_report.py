"""Seconds from SIGTERM to the controller until the run's report is on disk: must fit a 10 s grace, aim for 2 s.

    python bench/signal_to_report.py [--tries 3] [--after 40] [--json FILE] [-- PYTEST ARGS]

Each try starts ``python -m pytest -n 2 --fullgraph-models=llama`` (or the PYTEST ARGS given after ``--``) with a
fresh ``--fullgraph-report`` directory, sends SIGTERM to the pytest process (the xdist controller, as ``kill PID``
and ``docker stop`` do) ``--after`` seconds later, and polls every 10 ms for ``fullgraph-report.json``: the files
are written through a rename, so the file's appearance is the report's arrival. It prints, per try, the seconds
to the report, to the process's exit, and the checks the report holds; then the medians. To measure another tree
(the code before a change), run it with ``PYTHONPATH=/that/tree``: pytest and its workers inherit the variable.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_ARGS = ["-n", "2", "--fullgraph-models=llama", "-p", "no:cacheprovider", "-q"]
REPORT = "fullgraph-report.json"
#: How long a run may take to exit after the signal before the try gives up and kills its process group.
EXIT_LIMIT_S = 120.0


def wait_for(path: Path, process: subprocess.Popen[bytes], limit: float) -> float | None:
    """Seconds until ``path`` exists (polled every 10 ms), or None when the process ended or ``limit`` passed
    without it."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if path.exists():
            return time.monotonic() - started
        if process.poll() is not None:
            return time.monotonic() - started if path.exists() else None
        time.sleep(0.01)
    return None


def one_try(pytest_args: list[str], after: float, workdir: Path) -> dict[str, Any]:
    """One run stopped by SIGTERM ``after`` seconds in: seconds to the report and to exit, what the report holds."""
    out = workdir / "report"
    log = (workdir / "pytest.log").open("wb")
    # a session of its own: what the run leaves behind is killed with its group, never anything else's
    process = subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args, f"--fullgraph-report={out}"],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(after)
        if process.poll() is not None:
            return {"error": f"pytest ended before the signal (exit {process.returncode}); see {log.name}"}
        signalled, signalled_at = time.monotonic(), time.time()
        process.send_signal(signal.SIGTERM)
        to_report = wait_for(out / REPORT, process, EXIT_LIMIT_S)
        process.wait(timeout=max(1.0, EXIT_LIMIT_S - (time.monotonic() - signalled)))
        to_exit = time.monotonic() - signalled
    except subprocess.TimeoutExpired:
        return {"error": f"pytest did not exit {EXIT_LIMIT_S:g} s after the signal"}
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
    found: dict[str, Any] = json.loads((out / REPORT).read_text()) if (out / REPORT).exists() else {}
    return {"signalled_at": signalled_at, "report_s": to_report, "exit_s": to_exit, "exit_status": process.returncode,
            "checks": len(found.get("checks", [])), "run": found.get("run")}


def seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--after", type=float, default=40.0, help="seconds from the start to the signal")
    parser.add_argument("--json", type=Path, help="also write the tries here")
    parser.add_argument("pytest_args", nargs="*", help=f"after --; default: {' '.join(DEFAULT_ARGS)}")
    options = parser.parse_args(argv)
    tries = []
    for number in range(1, options.tries + 1):
        with tempfile.TemporaryDirectory(prefix="signal-to-report-") as workdir:
            found = one_try(options.pytest_args or DEFAULT_ARGS, options.after, Path(workdir))
        tries.append(found)
        print(f"try {number}: " + (found["error"] if "error" in found else
                                   f"report {seconds(found['report_s'])} s, exit {seconds(found['exit_s'])} s "
                                   f"after SIGTERM; {found['checks']} checks in it, run {found['run']}"), flush=True)
    reports = [found["report_s"] for found in tries if found.get("report_s") is not None]
    exits = [found["exit_s"] for found in tries if "exit_s" in found]
    if reports:
        print(f"median: report {statistics.median(reports):.2f} s, exit {statistics.median(exits):.2f} s "
              f"({len(reports)} of {len(tries)} tries wrote a report)")
    if options.json:
        options.json.write_text(json.dumps({"after_s": options.after, "tries": tries}, indent=2) + "\n")
    return 0 if len(reports) == len(tries) else 1


if __name__ == "__main__":
    sys.exit(main())
