"""The plugin's own tests, timed one by one from pytest's JUnit XML: which tests keep ``.ci/run`` past its minutes.

    python -m pytest tests -n 2 -p no:cacheprovider --junitxml=/tmp/durations.xml
    python bench/plugin_test_times.py /tmp/durations.xml [more.xml ...] --json bench/results/plugin-test-durations.json

A test taking 15 s and more (in fresh processes, mostly) is a candidate for the ``breadth`` marker, which the
workflow's plugin job runs; each behaviour keeps a quicker test in the default run. The table lists the slowest.
"""

from __future__ import annotations

import argparse
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import raw as raw_output

SHOWN = 25


def rows_of(paths: list[Path]) -> list[dict[str, Any]]:
    """Each test case of the files: its id, its seconds (setup, call and teardown) and whether it was skipped."""
    rows = []
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            rows.append({"test": f"{(case.get('classname') or '').replace('.', '/')}.py::{case.get('name')}",
                         "seconds": round(float(case.get("time") or 0), 2),
                         "skipped": case.find("skipped") is not None})
    return sorted(rows, key=lambda row: -row["seconds"])


def table(raw: dict[str, Any]) -> list[str]:
    """The slowest tests that ran (``total`` says what all of them took together)."""
    ran = [row for row in raw["rows"] if not row["skipped"]]
    return ["| test | seconds |", "|---|---|", *(f"| `{row['test']}` | {row['seconds']} |" for row in ran[:SHOWN])]


def total(raw: dict[str, Any]) -> str:
    ran = [row for row in raw["rows"] if not row["skipped"]]
    return f"{len(ran)} tests ran for {round(sum(row['seconds'] for row in ran))} s together"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", type=Path, nargs="+", help="pytest --junitxml files")
    parser.add_argument("--json", type=Path, help="write the raw output here")
    options = parser.parse_args()
    started = time.time()
    rows = rows_of(options.junit)
    if options.json:
        raw_output.save(options.json, "plugin_test_times", rows, started, time.time())
        loaded = raw_output.load(options.json)
        print(total(loaded), *table(loaded), sep="\n")


if __name__ == "__main__":
    main()
