"""``python -m pytest_fullgraph`` (or ``pytest-fullgraph``): merge, diff, collate reports and write the findings;
list the registered models, scenarios and levels (``listings``); the versions CI keys its caches on; standalone
reproducers of failing checks (``repro``).

Exit status: 0 done, 1 a gate failed (a regression), 2 bad input (an unknown option or name, a report that is
missing, corrupt, foreign or of a newer schema), each bad input said in one line on stderr; 141 when the reader
of the output went away (``| head``), as for any Unix tool killed by SIGPIPE.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_fullgraph import report
from pytest_fullgraph.cli import parser
from pytest_fullgraph.listings import list_levels, list_models, list_scenarios, versions
from pytest_fullgraph.report.html import html
from pytest_fullgraph.report.merge import uneven_levels

#: The status of a process that wrote to a pipe whose reader had gone (128 + SIGPIPE), as Unix tools report it.
CLOSED_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """The command line's exit status; what ``pytest-fullgraph`` and ``python -m pytest_fullgraph`` run."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is caught below
        return status
    except BrokenPipeError:
        # the reader went away (`| head`): nothing more can be said, and Python's own flush at exit must not fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.command is None or (args.command == "report" and args.report_command is None):
        sys.stderr.write(args.help())  # a command without its subcommand: say which there are
        return 2
    try:
        if args.command == "versions":
            return versions()
        if args.command == "repro":
            from pytest_fullgraph.repro.command import run as repro

            return repro(args.inputs, Path(args.output), reduce_s=args.reduce_budget, timeout_s=args.timeout,
                         python=args.python)
        if args.command == "scenarios":
            return list_scenarios(args.selection, as_json=args.json)
        if args.command == "levels":
            return list_levels(args.selection, as_json=args.json)
        if args.command == "models":
            return list_models(args.selection, args.exclude, as_json=args.json, build=not args.no_build,
                               shard=args.shard, shard_costs=args.shard_costs, verbose=args.verbose)
        if args.report_command == "collate":
            return _collate(args)
        if args.report_command == "findings":
            return _findings(args)
        if args.report_command == "upstream":
            return _upstream(args)
        if args.report_command == "recheck":
            from pytest_fullgraph.report.recheck import run as recheck

            return recheck(args.reports, args.sample, args.seed, args.json)
        if args.report_command == "merge":
            merged = report.merge((str(path), report.load(path)) for path in report.distinct(args.reports))
            for path in report.write(merged, args.output):
                print(path)
            uneven = uneven_levels(merged.checks)
            if uneven:
                print(f"levels not run for every model: {'; '.join(uneven)}")
            return 0
        return _diff(args)
    except report.ReportError as error:
        print(f"pytest_fullgraph: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except OSError as error:  # an output that cannot be written
        print(f"pytest_fullgraph: error: {error.filename or ''}: cannot write ({error.strerror or error})",
              file=sys.stderr)
        return 2


def _diff(args: argparse.Namespace) -> int:
    baseline, current = report.load(args.baseline), report.load(args.current)
    gate = report.diff(baseline, current, allow_missing=args.allow_missing, ratchet=args.ratchet,
                       divergences_only=args.divergences_only, allow_settings=args.allow_settings)
    for line in [*gate.header(), *gate.regressions, *gate.improvements, *gate.notes]:
        print(line)
    print(gate.summary())
    advice = report.refresh_advice(gate, args.baseline, args.current)
    if advice:
        print(advice)
    return _diff_page(args, current, baseline, gate) if args.html else 1 if gate.failed else 0


def _diff_page(args: argparse.Namespace, current: report.Report, baseline: report.Report,
               gate: report.GateResult) -> int:
    """``--html``, written after the verdict is printed, so an output that cannot be written never hides it: the
    gate's exit status, or 2 and one line naming ``--html`` when the page cannot be written."""
    given = Path(args.html)
    path = given / report.DIFF_HTML_NAME if given.is_dir() or args.html.endswith(os.sep) else given
    try:
        report.write_atomic(path, html(current, baseline, baseline_name=args.baseline, gate=gate))
    except OSError as error:
        print(f"pytest_fullgraph: error: --html {args.html}: cannot write ({error.strerror or error}); give a file "
              f"to write or a directory to write {report.DIFF_HTML_NAME} into", file=sys.stderr)
        return 2
    print(f"diff page: {path}")
    return 1 if gate.failed else 0


def _findings(args: argparse.Namespace) -> int:
    from pytest_fullgraph.publish import findings

    if args.sites < 1:
        print(f"pytest_fullgraph: error: --sites must be a positive integer, not {args.sites}", file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else None
    text = findings.generate([Path(path) for path in args.reports], [Path(path) for path in args.releases],
                             output, args.sites, [Path(path) for path in args.also])
    if output is None:
        sys.stdout.write(text)
    else:
        findings.write(text, output)
        print(output)
    return 0


def _upstream(args: argparse.Namespace) -> int:
    from pytest_fullgraph.publish.upstream import write_drafts

    if args.repros and not Path(args.repros).is_dir():
        raise report.ReportError(f"--repros {args.repros}: not a directory (give a `repro` command's output directory)")
    paths = report.distinct(args.reports)
    merged = report.merge((str(path), report.load(path)) for path in paths)
    names = " ".join(str(path) for path in paths)
    for path in write_drafts(merged, names, Path(args.output), Path(args.repros) if args.repros else None):
        print(path)
    return 0


def _collate(args: argparse.Namespace) -> int:
    from pytest_fullgraph.publish.collate import collate

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
    if collated.unreadable:
        print(f"collate: FAILED: {len(collated.unreadable)} file(s) cannot be read")
        for line in collated.unreadable:
            print(f"pytest_fullgraph: error: {line}", file=sys.stderr)
        return 2
    print(f"collate: gate {'FAILED' if collated.failed else 'passed'}")
    return 1 if collated.failed else 0


if __name__ == "__main__":
    sys.exit(main())
