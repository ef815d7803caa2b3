"""More draws of a level whose outcomes vary from run to run (ExecuTorch's runtime): every check of the level that did
not pass in a report is rerun until it has ``--draws`` outcomes, each in its own pytest process with the recorded
run's settings (``pytest_fullgraph.recheck``), and the outcomes are written into the report's
``environment.draws``. ``report findings`` then counts the level as pass / fails every draw / varies (k of N).

    python bench/draws.py bench/reports/hf/hf-*.json.gz --level hf_executorch --draws 3
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from pytest_fullgraph import report
from pytest_fullgraph.recheck import Drawn, check_releases, rerun
from pytest_fullgraph.report.files import save
from pytest_fullgraph.results import PASS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--level", required=True)
    parser.add_argument("--draws", type=int, default=3, help="Outcomes per check that did not pass (default 3)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    for path in args.reports:
        loaded = report.load(path)
        failing = [result for result in loaded.sorted_checks() if result.level == args.level and result.outcome != PASS]
        check_releases([Drawn(str(path), loaded.environment, result) for result in failing[:1]])
        outcomes = {}
        for result in failing:
            drawn = Drawn(str(path), loaded.environment, result)
            outcomes[result.check_id] = [result.outcome, *(rerun(drawn) for _ in range(args.draws - 1))]
            print(f"{path} {result.check_id}: {', '.join(outcomes[result.check_id])}", flush=True)
        if outcomes:
            loaded.environment.setdefault("draws", []).append(
                {"level": args.level, "draws": args.draws, "by": f"python bench/draws.py --draws {args.draws} "
                 f"({commit})", "checks": outcomes})
            save(loaded, path)


if __name__ == "__main__":
    main()
