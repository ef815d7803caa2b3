"""Re-judge committed reports' compiler crashes under the rule that a crash is a break only at the break's site.

Before ``breaks.crashed_at_break``, a check whose fullgraph compile crashed was recorded as the model's break
whenever the diagnostic pass found any root-cause break, with the crash kept in its message only ("(with
fullgraph=True the compiler crashed instead: TYPE at FILE:LINE in FUNCTION (ORIGIN): MESSAGE)"). The evidence the
rule needs is recorded: the crash's innermost frame (in the message) and the break (``first_break``). The crash's
outer frames are not, so "the call under the break" is judged from the innermost frame alone, which is enough
where the crash is raised above the break (in the loop or generate calling the model), as in every committed
case. The same decision as a live check, applied to what was recorded, not a rerun::

    python bench/rejudge.py bench/reports/*.json.gz bench/reports/*/*.json.gz baselines/*.json [--dry-run]
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

from pytest_fullgraph.core import breaks
from pytest_fullgraph.core.results import BREAK, ERROR, BreakRecord, CheckResult, Frame
from pytest_fullgraph.report.files import load, save

_CRASHED = re.compile(r" \(with fullgraph=True the compiler crashed instead: (?P<type>\w+) at (?P<file>\S+):"
                      r"(?P<line>\d+) in (?P<function>\S+) \(\w+\): (?P<message>.*)\)$", re.DOTALL)
#: The exception each crash type named in a message is, for the record rebuilt from it.
_EXCEPTIONS = {"InternalTorchDynamoError": "torch._dynamo.exc.InternalTorchDynamoError"}
RULE = "a compiler crash is the model's break only at the break's site (breaks.crashed_at_break)"


def recorded_crash(result: CheckResult) -> BreakRecord | None:
    """The crash a break recorded before the rule carries in its message, rebuilt as the record a check makes."""
    found = _CRASHED.search(result.message) if result.outcome == BREAK else None
    if found is None:
        return None
    frame = Frame(found["file"], int(found["line"]), found["function"])
    origin = "torch" if found["type"] in breaks.COMPILER_INTERNAL_ERRORS else "unknown"
    return BreakRecord(_EXCEPTIONS.get(found["type"], found["type"]), found["type"], None, found["message"],
                       frame.file, frame.line, frame.function, "", origin, stack=[frame])


def rejudge(result: CheckResult) -> bool:
    """Apply the rule to one check in place; whether its verdict changed."""
    crash, cause = recorded_crash(result), result.first_break
    if crash is None or cause is None or breaks.crashed_at_break(crash, cause):
        return False
    result.outcome, result.first_break = ERROR, crash
    result.message = f"{crash.summary()} (also breaks at {cause.where()}: {cause.gb_type} ({cause.origin}))"
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="Count, write nothing")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    total = 0
    for path in args.reports:
        report = load(path)
        changed = [result.check_id for result in report.checks if rejudge(result)]
        total += len(changed)
        print(f"{path}: {len(changed)} check(s) re-judged {sorted({name.split('-')[0] for name in changed})}")
        if changed and not args.dry_run:
            report.environment.setdefault("rejudged_checks", []).append(
                {"rule": RULE, "at": commit, "count": len(changed), "checks": changed})
            save(report, path)
    print(f"{total} check(s) re-judged")


if __name__ == "__main__":
    main()
