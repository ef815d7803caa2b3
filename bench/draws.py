"""More draws of a level whose outcomes vary from run to run (ExecuTorch's runtime): every check of the level that
failed in a report (neither passed nor skipped: a skip is decided before anything runs) is rerun until it has
``--draws`` outcomes, with the recorded run's settings (``report.recheck``). Each draw of a report's checks
is one pytest process (``-n 1``, its worker restarted after a crash); the outcomes are written into the report's
``environment.draws``, and ``report findings`` counts the level as pass / fails every draw / varies (k of N).

    python bench/draws.py bench/reports/hf/hf-*.json.gz --level hf_executorch --draws 3
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from pytest_fullgraph import report
from pytest_fullgraph.core.results import PASS, SKIP
from pytest_fullgraph.report.files import save
from pytest_fullgraph.report.recheck import Drawn, check_releases, rerun_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--level", required=True)
    parser.add_argument("--draws", type=int, default=3, help="Outcomes per check that did not pass (default 3)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    for path in args.reports:
        loaded = report.load(path)
        failing = [result for result in loaded.sorted_checks()
                   if result.level == args.level and result.outcome not in (PASS, SKIP)]
        batch = [Drawn(str(path), loaded.environment, result) for result in failing]
        check_releases(batch[:1])
        outcomes = {result.check_id: [result.outcome] for result in failing}
        for number in range(2, args.draws + 1) if batch else ():
            for result, outcome in zip(failing, rerun_batch(batch), strict=True):
                outcomes[result.check_id].append(outcome)
            print(f"{path}: draw {number} of {len(batch)} check(s) done", flush=True)
        for check_id, drawn in outcomes.items():
            print(f"{path} {check_id}: {', '.join(drawn)}", flush=True)
        if outcomes:
            loaded.environment.setdefault("draws", []).append(
                {"level": args.level, "draws": args.draws, "by": f"python bench/draws.py --draws {args.draws} "
                 f"({commit})", "checks": outcomes})
            save(loaded, path)


if __name__ == "__main__":
    main()
