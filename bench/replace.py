"""Swap a rerun's checks into a committed report by id, and record it in ``environment.replaced_checks``.

After a code change, rerun every check of the affected level in the shard (never only the failures: see
docs/development.md, "Committed data"), then::

    python bench/replace.py bench/reports/hf/hf-a.json.gz rerun/fullgraph-report.json --by "pytest ... (<commit>: why)"

Each rerun check must be in the report already (a rerun adds nothing new); each model's count is recorded, with the
outcome each swapped check had (``was``), so a page can say how many outcomes a rerun changed from the data.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from pytest_fullgraph import report
from pytest_fullgraph.report.files import save


def replace(target: report.Report, rerun: report.Report, by: str) -> Counter[str]:
    """``target`` with ``rerun``'s checks in place of its own, by key; the count per model."""
    position = {result.key: index for index, result in enumerate(target.checks)}
    unknown = [result.check_id for result in rerun.checks if result.key not in position]
    if unknown:
        raise report.ReportError(f"the rerun holds checks the report does not: {', '.join(unknown[:5])}")
    counts: Counter[str] = Counter()
    was: dict[str, dict[str, str]] = {}
    for result in rerun.checks:
        was.setdefault(result.model, {})[result.check_id] = target.checks[position[result.key]].outcome
        target.checks[position[result.key]] = result
        counts[result.model] += 1
    # an earlier rerun of a model this one replaces whole has no check left in the report: its record goes
    whole = {model for model, count in counts.items() if count == sum(r.model == model for r in target.checks)}
    earlier = [entry for entry in target.environment.get("replaced_checks", []) if entry.get("model") not in whole]
    target.environment["replaced_checks"] = [*earlier, *({"by": by, "count": count, "model": model, "was": was[model]}
                                                          for model, count in sorted(counts.items()))]
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="The committed report (.json or .json.gz), rewritten in place")
    parser.add_argument("rerun", type=Path, help="The rerun's fullgraph-report.json")
    parser.add_argument("--by", required=True, help="The command and commit of the rerun, and why")
    args = parser.parse_args()
    target = report.load(args.report)
    counts = replace(target, report.load(args.rerun), args.by)
    save(target, args.report)
    print(f"{args.report}: {sum(counts.values())} check(s) replaced ({', '.join(sorted(counts))})")


if __name__ == "__main__":
    main()
