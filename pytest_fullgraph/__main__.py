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
    compare = report_commands.add_parser("diff", help="Compare against a baseline; exit 1 on regressions")
    compare.add_argument("baseline", metavar="BASELINE.json")
    compare.add_argument("current", metavar="CURRENT.json")
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
        regressions, improvements, notes = report.diff(report.load(args.baseline), report.load(args.current))
        for line in [*regressions, *improvements, *notes]:
            print(line)
        print(f"{len(regressions)} regression(s), {len(improvements)} improvement(s)")
        return 1 if regressions else 0
    except report.ReportError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2


def _models() -> int:
    from pytest_fullgraph.registry import session_registry

    for spec in session_registry():
        print(f"{spec.name:14} family={spec.family:10} tags={','.join(sorted(spec.tags))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
