"""The standalone scripts in ``docs/upstream/`` that the loop's modes follow or work around, run as their readers
would: in a fresh process, with ``repro``'s exit codes."""

from __future__ import annotations

import subprocess
import sys

from tests import REPOSITORY


def assert_bug_or_fixed(script: str) -> None:
    """``docs/upstream/<script>`` says BUG (exit 1) or FIXED (exit 0), and never fails otherwise."""
    done = subprocess.run([sys.executable, str(REPOSITORY / "docs" / "upstream" / script)], capture_output=True,
                          text=True, timeout=300)
    assert (done.returncode, done.stdout.partition(":")[0]) in ((1, "BUG"), (0, "FIXED")), done.stdout + done.stderr
