"""The summary line README's quick start promises (``44 passed, 4 skipped, 8 xfailed``) against the one a run of its
command printed: the workflow's fast job runs the quick start and calls this on its output.

    python tests/readme_summary.py quickstart.log README.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: The quick start's promise: "ending in `44 passed, 4 skipped,\n8 xfailed`" (the line may wrap).
_PROMISE = re.compile(r"ending in `([^`]+)`")
#: pytest's last line: "===== 44 passed, 4 skipped, 8 xfailed, 4 warnings in 176.83s (0:02:56) ====="
_SUMMARY = re.compile(r"^=+ (.+?) in [\d.]+s(?: \([\d:]+\))? =+$", re.MULTILINE)
#: Counts that are not outcomes of tests: warnings vary with library versions.
_NOT_OUTCOMES = ("warning", "warnings")


def counts(text: str) -> dict[str, int]:
    """``{"passed": 44, ...}`` of a summary such as ``44 passed, 4 skipped, 8 xfailed``."""
    found = {}
    for part in " ".join(text.split()).split(","):
        number, _, name = part.strip().partition(" ")
        if number.isdigit() and name not in _NOT_OUTCOMES:
            found[name] = int(number)
    return found


def promised(readme: str) -> dict[str, int]:
    match = _PROMISE.search(readme.split("## Quick start", 1)[1])
    if match is None:
        raise ValueError("README's quick start promises no summary line (\"ending in `...`\")")
    return counts(match.group(1))


def printed(output: str) -> dict[str, int]:
    found = _SUMMARY.findall(output)
    if not found:
        raise ValueError("the run printed no pytest summary line")
    return counts(found[-1])


def main(argv: list[str]) -> int:
    output, readme = Path(argv[0]).read_text(), Path(argv[1]).read_text()
    want, got = promised(readme), printed(output)
    if want != got:
        print(f"README's quick start promises {want}; the run gave {got}: update README or fix the run")
        return 1
    print(f"the quick start's summary is README's: {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
