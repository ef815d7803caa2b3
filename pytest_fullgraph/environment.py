"""What the run records about where it ran: torch, transformers and Python versions, the platform, whether CUDA is
there, and the commit of the working tree.

Kept out of ``report`` (which needs no torch, so any machine reads reports): only the run that produced a report can
say which torch produced it. The session calls ``environment`` when it builds the report; the plugin calls
``git_revision`` at the run's start.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from typing import Any


def environment(settings: dict[str, Any], descriptions: dict[str, Any]) -> dict[str, Any]:
    """Versions and machine facts that explain a report, and the settings that produced it.

    ``device`` is where the checks ran (``--fullgraph-device``, in ``settings``; whether an accelerator exists
    is ``cuda_available``); ``descriptions`` holds the ``levels`` and ``scenarios`` legends.
    """
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda_available": torch.cuda.is_available(),
        "git_revision": git_revision(),
        **settings,
        **descriptions,
    }


@functools.cache
def git_revision() -> str | None:
    """The working tree's commit, read once per process: the session reads it at its start, so a report written
    after an hour-long run names the code that ran, not a commit made meanwhile."""
    try:
        completed = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                   check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() or None if completed.returncode == 0 else None
