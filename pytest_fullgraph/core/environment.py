"""What the run records about where it ran: torch, transformers and Python versions, the platform, whether CUDA is
there, and the commit of the working tree.

Kept out of ``report`` (which needs no torch, so any machine reads reports): only the run that produced a report can
say which torch produced it. The session calls ``environment`` when it builds the report; the plugin calls
``git_revision`` at the run's start.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import platform
import subprocess
import sys
from typing import Any


def environment(settings: dict[str, Any], descriptions: dict[str, Any], *, imports: bool = True) -> dict[str, Any]:
    """Versions and machine facts that explain a report, and the settings that produced it.

    ``device`` is where the checks ran (``--fullgraph-device``, in ``settings``; whether an accelerator exists
    is ``cuda_available``); ``descriptions`` holds the ``levels`` and ``scenarios`` legends. ``imports=False`` is for
    the report written the moment a signal stops the run, where importing torch would take seconds of the grace
    period: the versions come from the installed packages' metadata, and ``cuda_available`` is None unless torch is
    imported already.
    """
    for package in ("torch", "transformers") if imports else ():
        importlib.import_module(package)
    torch = sys.modules.get("torch")
    return {
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda_available": torch.cuda.is_available() if torch is not None else None,
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


def _version(package: str) -> str | None:
    """The imported package's ``__version__``, else its installed metadata's (the same text; no import)."""
    module = sys.modules.get(package)
    if module is not None:
        return str(module.__version__)
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
