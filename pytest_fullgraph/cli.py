"""What ``python -m pytest_fullgraph`` (``pytest-fullgraph``) accepts: its commands, their options, their help with
examples, and ``--version``. What each command does is ``__main__``. No torch import."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROG, SCRIPT = "python -m pytest_fullgraph", "pytest-fullgraph"
_EXAMPLES = {
    "": """examples:
  python -m pytest_fullgraph report diff baseline.json merged/fullgraph-report.json
  python -m pytest_fullgraph models 'tag:moe' --no-build
  pytest-fullgraph scenarios | head""",
    "report": """examples:
  python -m pytest_fullgraph report merge shard1/fullgraph-report.json shard2/fullgraph-report.json -o merged
  python -m pytest_fullgraph report diff baseline.json merged/fullgraph-report.json
  python -m pytest_fullgraph report collate reports/*/fullgraph-report.json -o merged --baselines baselines
  python -m pytest_fullgraph report findings bench/reports --releases bench/reports/releases""",
    "merge": """reports may be gzipped (.json.gz); each file is merged once. examples:
  python -m pytest_fullgraph report merge shard1/fullgraph-report.json shard2/fullgraph-report.json -o merged
  python -m pytest_fullgraph report merge bench/reports/*.json.gz -o merged""",
    "diff": """exit 0: gate passed, 1: regression (or improvement with --ratchet), 2: a report cannot be read, the
two were made with other settings (without --allow-settings), or the --html page cannot be written (the verdict is
printed first all the same). examples:
  python -m pytest_fullgraph report diff baselines/fast-torch2.13.0.json merged/fullgraph-report.json
  python -m pytest_fullgraph report diff baseline.json merged/fullgraph-report.json --html merged
  python -m pytest_fullgraph report diff old.json.gz new.json --allow-missing --divergences-only""",
    "collate": """exit 0: every gate passed, 1: a gate failed, 2: a report or baseline cannot be read. example:
  python -m pytest_fullgraph report collate reports/*/fullgraph-report.json -o merged --baselines baselines \\
      --expect fast-torch2.13.0 --summary step-summary.md""",
    "findings": """example:
  python -m pytest_fullgraph report findings bench/reports --releases bench/reports/releases \\
      --also bench/reports/modes bench/reports/hf bench/reports/recompiles/popular-aot_eager.json.gz \\
      bench/reports/prefill/all bench/reports/cache bench/reports/past_window -o docs/FINDINGS.md""",
    "upstream": """example:
  python -m pytest_fullgraph repro bench/reports/matrix-*.json.gz cpmant mpt -o repros
  python -m pytest_fullgraph report upstream bench/reports/matrix-*.json.gz --repros repros -o drafts""",
    "recheck": """exit 0: every drawn check gives its recorded outcome and first break site again, 1: one differs,
2: a report cannot be read or was recorded with other torch or transformers releases. examples:
  python -m pytest_fullgraph report recheck bench/reports/*.json.gz bench/reports/*/*.json.gz --sample 40 --seed 1
  python -m pytest_fullgraph report recheck merged/fullgraph-report.json --sample 5 --json recheck.json""",
    "models": """examples:
  python -m pytest_fullgraph models llama,gemma
  python -m pytest_fullgraph models 'tag:moe' --no-build --json
  python -m pytest_fullgraph models all --no-build --shard 3/8""",
    "repro": """exit 0: every selected check has its line (written, or not and why); 2: a report cannot be read or a
check id or model is not in it. examples:
  python -m pytest_fullgraph repro merged/fullgraph-report.json -o repros
  python -m pytest_fullgraph repro bench/reports/matrix-*.json.gz cpmant mpt-greedy-decode-float32 -o repros
  python -m pytest_fullgraph repro bench/reports/matrix-*.json.gz llama4 -o repros --python /tmp/venv/bin/python""",
    "scenarios": """examples:
  python -m pytest_fullgraph scenarios
  python -m pytest_fullgraph scenarios 'sample*' --json""",
    "levels": """examples:
  python -m pytest_fullgraph levels
  python -m pytest_fullgraph levels 'while*' --json""",
}


class _Version(argparse.Action):
    """``--version``: read from the installed packages' metadata when asked, so nothing imports torch."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    """``pytest_fullgraph 0.1.0 (torch 2.13.0, transformers 5.24.0)``: the packages' metadata, no imports."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (f"pytest_fullgraph {installed('pytest_fullgraph')} "
            f"(torch {installed('torch')}, transformers {installed('transformers')})")


def _positive(text: str) -> int:
    """A positive integer, or argparse's one-line error naming the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _seconds(allow_zero: bool) -> Any:
    """A number of seconds, positive (or zero where ``allow_zero``: "none"), or argparse's one-line error."""
    least = "0 or more" if allow_zero else "more than 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value >= 0 if allow_zero else value > 0):  # nan fails both
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds ({least})")
        return value

    return parse


def _prog() -> str:
    """The name the user typed: the console script, or ``python -m pytest_fullgraph``."""
    return SCRIPT if Path(sys.argv[0]).name == SCRIPT else PROG


def _command(commands: Any, name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand whose help ends with its examples, laid out as written."""
    command: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=help, epilog=_EXAMPLES.get(name),
        formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
    return command


def parser() -> argparse.ArgumentParser:
    """The whole command line; ``help`` in the parsed namespace prints the help of the command given."""
    top = argparse.ArgumentParser(prog=_prog(), description="pytest_fullgraph reports and registry",
                                  epilog=_EXAMPLES[""], formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action=_Version, help="Print the version of pytest_fullgraph (and of torch and "
                                                        "transformers, as installed) and exit")
    top.set_defaults(help=top.format_help)
    commands = top.add_subparsers(dest="command", metavar="COMMAND")
    report_parser = _command(commands, "report", "Reports: merge, diff, collate (CI's last job), findings "
                                                 "(docs/FINDINGS.md), upstream, recheck; plain or gzipped JSON")
    report_parser.set_defaults(help=report_parser.format_help)
    report_commands = report_parser.add_subparsers(dest="report_command", metavar="SUBCOMMAND")
    merge = _command(report_commands, "merge", "Merge shard reports into one JSON, Markdown and HTML report")
    merge.add_argument("reports", nargs="+", metavar="REPORT.json")
    merge.add_argument("-o", "--output", required=True, metavar="DIR", help="Directory for the merged report")
    collate = _command(
        report_commands, "collate", "CI's last job: merge shard reports per tier and torch release, gate each "
                                    "against BASELINES/<group>.json, say what changed between releases")
    collate.add_argument("reports", nargs="*", metavar="REPORT.json")
    collate.add_argument("-o", "--output", required=True, metavar="DIR", help="Merged reports go to DIR/<group>/")
    collate.add_argument("--baselines", default=None, metavar="DIR",
                         help="Directory of committed baselines, one <group>.json per group (fast-torch2.13.0)")
    collate.add_argument("--expect", nargs="*", default=[], metavar="GROUP",
                         help="Groups that must have reports (a group whose every shard failed to upload fails)")
    collate.add_argument("--summary", default=None, metavar="FILE",
                         help="Append the Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY) instead of printing")
    compare = _command(
        report_commands, "diff", "Compare against a baseline; exit 1 on regressions (missing checks included)")
    compare.add_argument("baseline", metavar="BASELINE.json")
    compare.add_argument("current", metavar="CURRENT.json")
    compare.add_argument("--allow-missing", action="store_true",
                         help="A baseline check absent from the current report is a note, not a regression")
    compare.add_argument("--ratchet", action="store_true",
                         help="Improvements fail too, so the baseline is refreshed whenever results get better")
    compare.add_argument("--allow-settings", action="store_true",
                         help="Compare reports made with other settings (backend, max_new_tokens, torch or "
                              "transformers release, device, attention): the output's first line says which differ")
    compare.add_argument("--divergences-only", action="store_true",
                         help="A mismatch classified as a rounding flip counts as a pass (for bfloat16/float16 jobs)")
    compare.add_argument("--html", default=None, metavar="FILE|DIR",
                         help="Also write CURRENT as an HTML page that shows what changed against BASELINE, once the "
                              "verdict is printed (a directory gets DIR/fullgraph-diff.html)")
    _findings_parser(report_commands)
    upstream = _command(report_commands, "upstream", "Draft the findings for the people who can fix them: one "
                                                     "Markdown file per group of whose fault they are")
    upstream.add_argument("reports", nargs="+", metavar="REPORT.json")
    upstream.add_argument("-o", "--output", required=True, metavar="DIR", help="Directory for the drafts")
    upstream.add_argument("--repros", default=None, metavar="DIR",
                          help="A `repro` output directory: its scripts go into the drafts they reproduce")
    recheck = _command(report_commands, "recheck", "Rerun a random sample of recorded checks with the current code; "
                                                   "list each whose outcome or first break site differs")
    recheck.add_argument("reports", nargs="+", metavar="REPORT.json")
    recheck.add_argument("--sample", type=_positive, required=True, metavar="N", help="How many checks to draw")
    recheck.add_argument("--seed", type=int, default=0, metavar="S", help="The draw's seed (default: 0)")
    recheck.add_argument("--json", default=None, metavar="FILE", help="Also write every rechecked check to FILE")
    _command(commands, "versions", "key=torch<v>-transformers<v>-py<v> and each version, one per line "
                                   "(CI's compile-cache key; imports torch)")
    models = _command(
        commands, "models", "List the built-in models: class, parameters, tags, _can_compile_fullgraph, build status")
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
    models.add_argument("--verbose", action="store_true",
                        help="Show transformers' warnings about the tiny configs as they come (by default they are "
                             "held back and counted)")
    _repro_parser(commands)
    scenarios = _command(
        commands, "scenarios", "List the scenarios (generation features): name, feature, kind, what it sets")
    scenarios.add_argument("selection", nargs="?", default="all", metavar="NAMES",
                           help="Which scenarios, as --fullgraph-scenarios takes them (default: all)")
    scenarios.add_argument("--json", action="store_true", help="One JSON list of rows instead of the table")
    levels = _command(commands, "levels", "List the built-in levels (what is compiled): name, when a run collects "
                                          "it, what it checks")
    levels.add_argument("selection", nargs="?", default="all", metavar="NAMES",
                        help="Which levels, as --fullgraph-levels takes them (default: all)")
    levels.add_argument("--json", action="store_true", help="One JSON list of rows instead of the table")
    return top


def _repro_parser(commands: Any) -> None:
    repro = _command(commands, "repro", "Standalone reproducers of failing checks: one script per cause that needs "
                                        "only torch and transformers, shrunk and verified in a fresh process")
    repro.add_argument("inputs", nargs="+", metavar="REPORT.json|CHECK_ID|MODEL",
                       help="Reports (.json or .json.gz, merged), then check ids or model names (default: every "
                            "failing check)")
    repro.add_argument("-o", "--output", required=True, metavar="DIR",
                       help="Directory for the scripts (<check id>.py) and repro-index.json")
    repro.add_argument("--reduce-budget", type=_seconds(allow_zero=True), default=120.0, metavar="SECONDS",
                       help="Seconds spent shrinking each script's config and prompts (default 120; 0: none)")
    repro.add_argument("--timeout", type=_seconds(allow_zero=False), default=600.0, metavar="SECONDS",
                       help="Longest one run of a script may take (default 600)")
    repro.add_argument("--python", default=None, metavar="PATH",
                       help="Interpreter that verifies each script, e.g. a virtual environment's with only torch and "
                            "transformers (default: this one)")


def _findings_parser(report_commands: Any) -> None:
    from pytest_fullgraph.publish.findings import DEFAULT_SITES

    findings = _command(
        report_commands, "findings", "The measured findings as Markdown (docs/FINDINGS.md), generated from one run's "
                                     "reports and the torch-release reports")
    findings.add_argument("reports", nargs="+", metavar="REPORT",
                          help="Reports of one run (shards or parts, .json or .json.gz), merged; a directory stands "
                               "for the reports in it")
    findings.add_argument("--releases", nargs="+", default=[], metavar="REPORT",
                          help="One report per torch release; a directory stands for DIR/*/fullgraph-report.json[.gz]")
    findings.add_argument("--also", nargs="+", default=[], metavar="RUN",
                          help="Further runs, a section each (a directory's reports merged): the decoding-modes "
                               "matrix, transformers' export paths")
    findings.add_argument("--sites", type=int, default=DEFAULT_SITES, metavar="N",
                          help=f"Break sites listed per table (default {DEFAULT_SITES})")
    findings.add_argument("-o", "--output", default=None, metavar="FILE",
                          help="Write the Markdown to FILE instead of printing it")


