"""Which guard made a compiled object recompile, and whose code installed it, read from what dynamo says when a
call under ``torch.compiler.set_stance("fail_on_recompile")`` would recompile.

Measured (torch 2.13): the error names the compiled frame (``filename: '...', function name: 'f', line number: N``),
then one ``- 0/0: GUARD`` line per cache entry that failed. A guard on a value read inside the frame carries, per
condition, ``# <source>  # transformers/masking_utils.py:229 in prepare_padding_mask`` (the path relative to
site-packages, or cut to its last characters), a condition torch added for its own 0/1 specialization saying so in
a parenthesis after it; a guard on the frame's own input (``tensor 'input_ids' size mismatch at index 1``) carries
none: it is located at the frame, and blamed on the cache when the input is one.
"""

from __future__ import annotations

import linecache
import re
import sys

from pytest_fullgraph.core.breaks import classify
from pytest_fullgraph.core.frames import display_path, statement_at
from pytest_fullgraph.core.recompiles import Guard
from pytest_fullgraph.core.results import Frame, first_line

#: Raised (a RuntimeError) when a call under the "fail_on_recompile" stance would recompile.
STANCE_REFUSAL = "Detected recompile when torch.compile stance is 'fail_on_recompile'"
_FRAME = re.compile(r"filename: '(?P<file>[^']*)', function name: '(?P<function>[^']*)', line number: (?P<line>\d+)")
_GUARD = re.compile(r"^\s*- \d+/\d+: (?P<text>.*)$")
#: A condition's site: ``  # path.py:123 in function``; one inside a parenthesis (torch's own frame) is not one.
_SITE = re.compile(r"\s#\s(?P<file>[^\s#()]+\.py):(?P<line>\d+) in (?P<function>[\w<>.]+)")
#: What torch says after a site that is where a value was first used, not why it is guarded.
_FRAMEWORK_NOTE = " (user code shown is first use of this value"


def is_recompile_refusal(error: BaseException) -> bool:
    """Whether ``error`` is the stance's refusal to recompile (the call was stopped before compiling again)."""
    return isinstance(error, RuntimeError) and STANCE_REFUSAL in str(error)


def compiled_frame(message: str) -> Frame | None:
    """The frame the refusal names: the code object whose compiled entries all failed their guards."""
    found = _FRAME.search(message)
    if found is None:
        return None
    return frame_at(found["file"], int(found["line"]), found["function"])


def frame_at(file: str, line: int, function: str) -> Frame:
    """A compiled frame by its code object's file, first line and name, its statement read from the file."""
    return Frame(display_path(file), line, function, statement_at(file, line, linecache.getline(file, line)))


def guards_from_refusal(message: str) -> list[Guard]:
    """Each distinct guard the refusal lists, located; the message's first line when it lists none (an older torch
    that does not say which guard failed)."""
    frame = compiled_frame(message)
    guards: list[Guard] = []
    for line in message.splitlines():
        found = _GUARD.match(line)
        if found is None or found["text"].startswith("User stack trace"):
            continue
        guard = _guard(found["text"], frame)
        if all((kept.guard, kept.where()) != (guard.guard, guard.where()) for kept in guards):
            guards.append(guard)  # dynamo lists one failure per cache entry: often the same guard
    return guards or [Guard(first_line(message), *_located(frame), on_input=frame is not None)]


def guard_from_reason(reason: str, frame: Frame | None = None) -> Guard:
    """A recompile reason of the structured trace (``0/1: GUARD  # source  # path:line in function``), located as a
    refusal's guard is, a guard on an input at ``frame`` (the frame recompiled, ``CompileTrace.recompile_frames``);
    one that names no site and has no frame keeps its text, unlocated."""
    found = _GUARD.match(f"- {reason}")
    return _guard(found["text"] if found else reason, frame)


def _guard(text: str, frame: Frame | None) -> Guard:
    expression = text.split("  # ", 1)[0].strip()
    sites = list(_SITE.finditer(text))
    if not sites:  # a guard on the frame's input: installed when dynamo took the input in (its def line says nothing)
        guard = Guard(expression, *_located(frame), on_input=True)
        guard.source = ""
        if "cache" in expression.split(" size mismatch")[0].lower():
            guard.origin = "cache"  # the input is a cache: its shape is the cache's, sized by whoever made it
        return guard
    # the condition that is the code's own, not torch's 0/1 specialization where the value was first used
    chosen = next((site for site in reversed(sites) if not text.startswith(_FRAMEWORK_NOTE, site.end())), sites[0])
    file = _full_path(chosen["file"])
    line = int(chosen["line"])
    return Guard(expression, *_located(Frame(display_path(file), line, chosen["function"],
                                             statement_at(file, line, linecache.getline(file, line)))))


def _full_path(shown: str) -> str:
    """The file a site's path names: torch shows it relative to site-packages, or cut to its last characters."""
    if shown.startswith("/"):
        return shown
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if path.endswith("/" + shown) or (path.endswith(shown) and len(shown) > 8):
            return path
    return shown


def _located(frame: Frame | None) -> tuple[str, int, str, str, str]:
    if frame is None:
        return "", 0, "", "", "torch"
    return frame.file, frame.line, frame.function, frame.source, classify(frame)
