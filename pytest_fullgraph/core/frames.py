"""Where a break happened: its stack as frames shown relative to site-packages (``transformers/...``), the harness's
frames (pytest, this plugin) dropped, and the innermost frame that is to blame. ``breaks`` classifies what this
locates.
"""

from __future__ import annotations

import functools
import linecache
import re
import site
import sys
import sysconfig
import traceback
from pathlib import Path

from pytest_fullgraph.core.results import Frame

#: This package's code that is the loop's, planned on the host or run inside its graph: the ``loop`` package (greedy
#: and sampling, every decoding mode, their state and tracing aids, the exported program's module) and the first
#: positions (``core/model_facts.py``). A break or crash there is the loop's fault, and their frames are code under
#: test, not harness. A new module of the loop is blamed on it by where it lives, with no list to keep.
LOOP_PATHS = ("pytest_fullgraph/loop/", "pytest_fullgraph/core/model_facts.py")


@functools.cache
def _library_prefixes() -> tuple[str, ...]:
    candidates = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    candidates.update(site.getsitepackages())
    candidates.add(site.getusersitepackages())
    candidates.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    # This package's own parent: an editable install shows ``pytest_fullgraph/loop/decode.py`` from any directory.
    candidates.add(str(Path(__file__).resolve().parents[2]))
    # The standard library's parent: ``python3.11/copy.py``, not the machine's absolute path, in a report.
    candidates.add(str(Path(sysconfig.get_paths()["stdlib"]).resolve().parent))
    return tuple(str(Path(p).resolve()) + "/" for p in candidates if p)


def display_path(filename: str) -> str:
    """Path relative to site-packages (``transformers/...``), the standard library's directory
    (``python3.11/copy.py``) or the working directory; else as given."""
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        return filename
    # longest prefix first: a virtualenv inside the project still shows library paths as ``pkg/...``
    for prefix in sorted((*_library_prefixes(), str(Path.cwd()) + "/"), key=len, reverse=True):
        if resolved.startswith(prefix):
            return resolved[len(prefix):]
    return filename


def _is_torch_internal(path: str) -> bool:
    return path.startswith("torch/") and not path.startswith("torch/testing/")


#: Frames of the harness (pytest, xdist, this plugin, the interpreter's entry): a break's stack starts
#: below the innermost of them, so it holds only the code under test and is the same however pytest ran.
HARNESS_PREFIXES = ("_pytest/", "pluggy/", "xdist/", "execnet/", "pytest/", "pytest_fullgraph/", "<")
#: Modules of this package that are code under test, not harness: the generation loop. Their frames stay in
#: a break's stack, so a break in the loop is located there (origin ``loop``).
UNDER_TEST_PREFIXES = LOOP_PATHS


def is_harness(frame: Frame) -> bool:
    return frame.file.startswith(HARNESS_PREFIXES) and not frame.file.startswith(UNDER_TEST_PREFIXES)


def statement_at(filename: str, line: int, first: str, max_lines: int = 8) -> str:
    """The whole statement starting at ``line``: a multi-line ``if (`` is classified by what it tests."""
    text = first.strip()
    depth = sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")
    offset = 1
    while depth > 0 and offset < max_lines:
        following = linecache.getline(filename, line + offset).strip()
        if not following:
            break
        text += " " + following
        depth += sum(following.count(c) for c in "([{") - sum(following.count(c) for c in ")]}")
        offset += 1
    return text


def frames_from(summaries: list[traceback.FrameSummary] | traceback.StackSummary | None) -> list[Frame]:
    frames = [Frame(display_path(s.filename), s.lineno or 0, s.name,
                    statement_at(s.filename, s.lineno or 0, s.line or ""))
              for s in (summaries or [])]
    harness = [index for index, frame in enumerate(frames) if is_harness(frame)]
    return frames[harness[-1] + 1:] if harness else frames


def innermost(stack: list[Frame]) -> Frame | None:
    """The innermost frame in library or user code, skipping torch's own wrappers and the standard library's
    (``copy.deepcopy`` of a tensor is the fault of whoever called it) when others exist."""
    for frame in reversed(stack):
        if not _is_torch_internal(frame.file) and not _STANDARD_LIBRARY.match(frame.file):
            return frame
    return stack[-1] if stack else None


#: How ``display_path`` shows a file of the standard library
_STANDARD_LIBRARY = re.compile(r"python3\.\d+/")
