"""``python -m pytest_fullgraph``: merge and diff reports, list the registered models."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_fullgraph import report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_fullgraph",
                                     description="pytest_fullgraph reports and registry")
    commands = parser.add_subparsers(dest="command", required=True)
    report_parser = commands.add_parser("report", help="Merge or diff fullgraph-report.json files")
    report_commands = report_parser.add_subparsers(dest="report_command", required=True)
    merge = report_commands.add_parser("merge", help="Merge shard reports into one JSON and Markdown report")
    merge.add_argument("reports", nargs="+", metavar="REPORT.json")
    merge.add_argument("-o", "--output", required=True, metavar="DIR", help="Directory for the merged report")
    compare = report_commands.add_parser(
        "diff", help="Compare against a baseline; exit 1 on regressions (missing checks included)")
    compare.add_argument("baseline", metavar="BASELINE.json")
    compare.add_argument("current", metavar="CURRENT.json")
    compare.add_argument("--allow-missing", action="store_true",
                         help="A baseline check absent from the current report is a note, not a regression")
    compare.add_argument("--ratchet", action="store_true",
                         help="Improvements fail too, so the baseline is refreshed whenever results get better")
    compare.add_argument("--divergences-only", action="store_true",
                         help="A mismatch classified as a rounding flip counts as a pass (for bfloat16/float16 jobs)")
    commands.add_parser("models", help="List the built-in models with family and tags")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "models":
            return _models()
        if args.report_command == "merge":
            merged = report.merge((path, report.load(path)) for path in args.reports)
            for path in report.write(merged, args.output):
                print(path)
            return 0
        gate = report.diff(report.load(args.baseline), report.load(args.current),
                           allow_missing=args.allow_missing, ratchet=args.ratchet,
                           divergences_only=args.divergences_only)
        for line in [*gate.regressions, *gate.improvements, *gate.notes]:
            print(line)
        print(gate.summary())
        if gate.changed:
            refresh = report.refresh_command(args.baseline, args.current)
            print(f"to accept the current report as the baseline: {refresh}")
        return 1 if gate.failed else 0
    except report.ReportError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2


def _models() -> int:
    from pytest_fullgraph.models import session_registry

    for spec in session_registry():
        print(f"{spec.name:14} family={spec.family:10} tags={','.join(sorted(spec.tags))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
