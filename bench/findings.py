"""Summarise a fullgraph report for the README's findings and bench/RESULTS.md.

    python bench/findings.py out/fullgraph-report.json [--sites 10]

Prints, in Markdown: outcomes per level (counts), the break sites shared by the most models (with and without
the `generate` level), the models with errors and mismatches, the flag disagreements, the slowest checks and the
total check time.
"""

from __future__ import annotations

import argparse
from collections import Counter

from pytest_fullgraph.report import load
from pytest_fullgraph.report.audit import disagreements, model_summaries
from pytest_fullgraph.report.render import grouped_sites
from pytest_fullgraph.results import OUTCOMES, CheckResult


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--sites", type=int, default=10)
    args = parser.parse_args()
    report = load(args.report)
    checks = report.sorted_checks()
    present = {result.level for result in checks}
    levels = [level for level in report.environment.get("levels") or {} if level in present]
    levels += sorted(present - set(levels))
    print(f"{len(checks)} checks of {len({result.model for result in checks})} models "
          f"(backend {report.environment.get('backend')}, {report.environment.get('max_new_tokens')} new tokens)\n")
    print("| level | " + " | ".join(OUTCOMES) + " |")
    print("|---|" + "---|" * len(OUTCOMES))
    for level in levels:
        counts = Counter(result.outcome for result in checks if result.level == level)
        print(f"| {level} | " + " | ".join(str(counts[name]) for name in OUTCOMES) + " |")
    print("\nBreak sites shared by the most models:\n")
    _print_sites(checks, args.sites)
    print("\nThe same, without the `generate` level (whose own sites every model shares):\n")
    _print_sites([result for result in checks if result.level != "generate"], args.sites)
    for outcome in ("error", "mismatch"):
        print(f"\nModels with an `{outcome}` (levels; the first message):\n")
        _print_outcome(checks, outcome)
    disagreeing = disagreements(model_summaries(checks))
    print(f"\n{len(disagreeing)} flag disagreements:\n")
    for summary in disagreeing:
        print(f"- {summary.model} ({summary.model_class}): {summary.disagreement}: {summary.evidence[:160]}")
    timed = sorted(checks, key=lambda result: -sum(result.timings.values()))
    total = sum(sum(result.timings.values()) for result in checks)
    print(f"\nCheck time, summed over checks: {total / 60:.1f} min; slowest:\n")
    for result in timed[:5]:
        print(f"- {result.check_id}: {sum(result.timings.values()):.1f} s ({result.outcome})")


def _print_outcome(checks: list[CheckResult], outcome: str) -> None:
    by_model: dict[str, list[CheckResult]] = {}
    for result in checks:
        if result.outcome == outcome:
            by_model.setdefault(result.model, []).append(result)
    for model, found in sorted(by_model.items()):
        levels = sorted({result.level for result in found})
        print(f"- {model} ({', '.join(levels)}): {(found[0].message or '').splitlines()[0][:200]}")


def _print_sites(checks: list[CheckResult], count: int) -> None:
    sites = sorted(grouped_sites(checks), key=lambda site: (-len(site["models"]), site["where"]))
    for site in sites[:count]:
        cause = "" if site["root_cause"] else " (raised because of a nested break, not a root cause)"
        print(f"- `{site['where']}` {site['gb_id'] or '-'} {site['gb_type']} [{site['origin']}]{cause}: "
              f"{len(site['models'])} models: {', '.join(site['models'][:12])}")


if __name__ == "__main__":
    main()
