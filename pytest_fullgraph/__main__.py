"""``python -m pytest_fullgraph``: merge and diff reports, list the registered models."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pytest_fullgraph import report
from pytest_fullgraph.report.tables import flag_text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_fullgraph",
                                     description="pytest_fullgraph reports and registry")
    commands = parser.add_subparsers(dest="command", required=True)
    report_parser = commands.add_parser("report", help="Merge or diff fullgraph-report.json files")
    report_commands = report_parser.add_subparsers(dest="report_command", required=True)
    merge = report_commands.add_parser("merge", help="Merge shard reports into one JSON and Markdown report")
    merge.add_argument("reports", nargs="+", metavar="REPORT.json")
    merge.add_argument("-o", "--output", required=True, metavar="DIR", help="Directory for the merged report")
    collate = report_commands.add_parser(
        "collate", help="CI's last job: merge shard reports per tier and torch release, gate each against "
                        "BASELINES/<group>.json, say what changed between releases; exit 1 when the gate fails")
    collate.add_argument("reports", nargs="*", metavar="REPORT.json")
    collate.add_argument("-o", "--output", required=True, metavar="DIR", help="Merged reports go to DIR/<group>/")
    collate.add_argument("--baselines", default=None, metavar="DIR",
                         help="Directory of committed baselines, one <group>.json per group (fast-torch2.13.0)")
    collate.add_argument("--expect", nargs="*", default=[], metavar="GROUP",
                         help="Groups that must have reports (a group whose every shard failed to upload fails)")
    collate.add_argument("--summary", default=None, metavar="FILE",
                         help="Append the Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY) instead of printing")
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
    _findings_parser(report_commands)
    commands.add_parser("versions", help="key=torch<v>-transformers<v>-py<v> and each version, one per line "
                                         "(CI's compile-cache key; imports torch)")
    models = commands.add_parser(
        "models", help="List the built-in models: class, parameters, tags, _can_compile_fullgraph, build status")
    models.add_argument("selection", nargs="?", default="all", metavar="NAMES",
                        help="Which models, as --fullgraph-models takes them (default: all)")
    models.add_argument("--exclude", default="", metavar="NAMES", help="Models to leave out, in the same forms")
    models.add_argument("--shard", default=None, metavar="I/N",
                        help="Only the models --fullgraph-shard=I/N would run, to preview a CI matrix job")
    models.add_argument("--shard-costs", default=None, metavar="REPORT.json",
                        help="Balance the shards by this report's check times, as --fullgraph-shard-costs does")
    models.add_argument("--json", action="store_true", help="One JSON list of rows instead of the table")
    models.add_argument("--no-build", action="store_true",
                        help="Do not build and generate: parameters are counted on the meta device, status "
                             "says only known reasons")
    scenarios = commands.add_parser(
        "scenarios", help="List the scenarios (generation features): name, feature, kind, what it sets")
    scenarios.add_argument("selection", nargs="?", default="all", metavar="NAMES",
                           help="Which scenarios, as --fullgraph-scenarios takes them (default: all)")
    scenarios.add_argument("--json", action="store_true", help="One JSON list of rows instead of the table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "versions":
            return _versions()
        if args.command == "scenarios":
            return _scenarios(args.selection, as_json=args.json)
        if args.command == "models":
            return _models(args.selection, args.exclude, as_json=args.json, build=not args.no_build,
                           shard=args.shard, shard_costs=args.shard_costs)
        if args.report_command == "collate":
            return _collate(args)
        if args.report_command == "findings":
            return _findings(args)
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


def _scenarios(selection: str, as_json: bool) -> int:
    from pytest_fullgraph.scenarios import BASIC, SCENARIOS, select_scenarios

    try:
        names = select_scenarios(selection)
    except ValueError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = [{"name": name, "feature": SCENARIOS[name].feature, "kind": SCENARIOS[name].kind,
             "basic": name in BASIC, "description": SCENARIOS[name].description, "inert": SCENARIOS[name].inert}
            for name in names]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        note = f" [cannot change the tokens: {row['inert']}]" if row["inert"] else ""
        print(f"{row['name']:<{width}}  {row['kind']:<9}  {row['description']}{note}")
    return 0


def _versions() -> int:
    import platform

    import torch
    import transformers

    found = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
             "python": platform.python_version()}
    print(f"key=torch{found['torch']}-transformers{found['transformers']}-py{found['python']}")
    for name, version in found.items():
        print(f"{name}={version}")
    return 0


def _findings_parser(report_commands: Any) -> None:
    from pytest_fullgraph.report.findings import DEFAULT_SITES

    findings = report_commands.add_parser(
        "findings", help="The measured findings as Markdown (docs/FINDINGS.md), generated from one run's reports "
                         "and the torch-release reports")
    findings.add_argument("reports", nargs="+", metavar="REPORT",
                          help="Reports of one run (shards or parts, .json or .json.gz), merged; a directory stands "
                               "for the reports in it")
    findings.add_argument("--releases", nargs="+", default=[], metavar="REPORT",
                          help="One report per torch release; a directory stands for DIR/*/fullgraph-report.json[.gz]")
    findings.add_argument("--sites", type=int, default=DEFAULT_SITES, metavar="N",
                          help=f"Break sites listed per table (default {DEFAULT_SITES})")
    findings.add_argument("-o", "--output", default=None, metavar="FILE",
                          help="Write the Markdown to FILE instead of printing it")


def _findings(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_fullgraph.report import findings

    if args.sites < 1:
        print(f"pytest_fullgraph: error: --sites must be a positive integer, not {args.sites}", file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else None
    text = findings.generate([Path(path) for path in args.reports], [Path(path) for path in args.releases],
                             output, args.sites)
    if output is None:
        sys.stdout.write(text)
    else:
        findings.write(text, output)
        print(output)
    return 0


def _collate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_fullgraph.report.collate import collate

    baselines = Path(args.baselines) if args.baselines else None
    collated = collate([Path(path) for path in args.reports], Path(args.output), baselines, args.expect)
    text = "\n".join(collated.summary) + "\n"
    if args.summary:
        with open(args.summary, "a") as stream:
            stream.write(text)
    else:
        print(text)
    for name, path in collated.merged.items():
        print(f"{name}: {path}")
    print(f"collate: gate {'FAILED' if collated.failed else 'passed'}")
    return 1 if collated.failed else 0


def _models(selection: str, exclude: str, *, as_json: bool, build: bool, shard: str | None = None,
            shard_costs: str | None = None) -> int:
    from pytest_fullgraph.models import session_registry
    from pytest_fullgraph.models.survey import survey
    from pytest_fullgraph.shard import model_costs, parse_shard, select_shard

    registry = session_registry()
    try:
        names = registry.select(selection, exclude)
        if shard is not None:
            costs = model_costs(report.load(shard_costs)) if shard_costs else None
            names = select_shard(names, parse_shard(shard, "--shard"), costs)
    except ValueError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2
    rows = []
    for name in names:  # printed as they finish: a full survey takes about a minute
        row = survey(registry, name, build=build)
        rows.append(row)
        if not as_json:
            if len(rows) == 1:
                print(_table_line(["model", "class", "parameters", "flag", "tags", "status"]))
            print(_table_line([row["name"], row["class"] or "-", _count(row["parameters"]),
                               flag_text(row["can_compile_fullgraph"], missing="-"), ",".join(row["tags"]) or "-",
                               row["status"]]),
                  flush=True)
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        buildable = sum(1 for row in rows if row["status"] == "ok")
        print(f"{len(rows)} models: {buildable} build and generate, "
              f"{sum(1 for row in rows if row['status'].startswith('skipped'))} skipped with a reason, "
              f"{sum(1 for row in rows if row['status'].startswith('error'))} errors" if build else
              f"{len(rows)} models (not built)")
    return 0


def _table_line(cells: list[str]) -> str:
    widths = (24, 40, 11, 5, 28)
    return " ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)) + " " + cells[-1]


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


if __name__ == "__main__":
    sys.exit(main())
