"""The raw output of a bench command, committed under ``bench/results/`` beside the results page whose table it makes.

A table made from raw output sits right under the line ``<!-- table: bench/results/NAME.json -->`` on its topic's
page (``bench/results/*.md``); ``tests/bench/test_bench_results.py`` renders it again from the file with the bench
command's ``table(raw)`` and fails where the page differs. A table that is not (a pytest run's wall times, a table
measured before raw outputs were kept) sits under ``<!-- typed: WHY -->`` instead, so no table's origin is left
unsaid. No torch import.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def measured_on() -> dict[str, Any]:
    """When, at which commit and on what a bench command ran: what a results page must say of a number."""
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=Path(__file__).parent, check=False).stdout.strip()
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "commit": revision + ("+uncommitted changes" if dirty else ""),
            "torch": importlib.metadata.version("torch"), "transformers": importlib.metadata.version("transformers"),
            "python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}


def save(path: str | Path, bench: str, rows: list[Any], started: float, finished: float, **settings: Any) -> None:
    """Write a bench command's rows with its command line, wall time and ``measured_on``; ``settings`` are what its
    ``table(raw)`` needs besides the rows (a subcommand, the token counts of the columns), as ``raw["settings"]``."""
    raw = {"bench": bench, "command": shlex.join(["python", f"bench/{bench}.py", *sys.argv[1:]]),
           "wall_s": round(finished - started, 1), "measured": measured_on(), "rows": rows, "settings": settings}
    Path(path).write_text(json.dumps(raw, indent=1, sort_keys=True) + "\n")


def load(path: str | Path) -> dict[str, Any]:
    raw = json.loads(Path(path).read_text())
    if not isinstance(raw, dict) or not {"bench", "command", "measured", "rows"} <= raw.keys():
        raise ValueError(f"{path}: not a bench command's raw output (bench, command, measured, rows)")
    return raw


def said(raw: dict[str, Any]) -> str:
    """The sentence a table's paragraph opens with: the command, when, where, at which commit, how long."""
    measured = raw["measured"]
    minutes, seconds = divmod(round(raw.get("wall_s", 0)), 60)
    return (f"`{raw['command']}` ({measured['date']}, code of `{measured['commit']}`, torch {measured['torch']}, "
            f"transformers {measured['transformers']}, {measured['cpus']} cores, {minutes} min {seconds:02d} s)")
