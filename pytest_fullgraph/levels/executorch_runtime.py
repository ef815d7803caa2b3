"""A whole exported generation as an ExecuTorch program (``.pte``), run by ExecuTorch's own runtime.

Two rows of ``artifacts.RUNTIMES`` use it: ``executorch`` (XNNPACK delegate, what an ExecuTorch app on a phone or
a laptop CPU runs) and ``executorch_portable`` (ExecuTorch's portable kernels only, no delegate). What ExecuTorch
cannot take is refused before the minute-long lowering starts, in one line, from the program's metadata:

- the ``while`` form: ExecuTorch's emitter rejects ``torch.ops.higher_order.while_loop`` (measured with executorch
  1.5.1), so only the unrolled form is a row's loop form;
- sampling that draws inside the program: ``aten.multinomial`` is not a core ATen operator and ExecuTorch has
  no random number generator, so a sampling program must take its noise as an input (``noise_input=True``,
  ``sampling_noise``), drawn on the host as ``generate`` draws it;
- an unbounded dimension: ExecuTorch plans every buffer for the largest shape, so a dynamic export needs
  ``max_batch_size`` (its prompt length is bounded by ``max_prompt_length`` already).

When a method fails, the runtime raises only "method->execute() failed with error 0x10"; why (a static tensor it
was asked to resize, a missing kernel) it writes to the process's stderr. ``runtime_log`` keeps those lines with
the exception, for our programs and for transformers' exporter's alike, at loading (a missing operator) and at
running.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pytest_fullgraph.core.results import add_note

if TYPE_CHECKING:
    from torch.export import ExportedProgram

#: A line of the runtime's C++ log: "[method.cpp:1528] CALL_DELEGATE execute failed at instruction 99: 0x10"
_LOG_LINE = re.compile(r"^\[(?P<site>[\w.]+:\d+)\]\s*(?P<text>.+?)\s*$")
#: never a reason: the runtime's start-up probing of the CPU, logged on every load; the kernel registry's lookup of
#: a missing operator, a line per dtype and dimension of its arguments, that the method's "Missing operator" says
_NOT_A_REASON = ("cpuinfo_utils.", "operator_registry.")
#: how many of the log's last lines a note keeps (the reason, and the calls it failed through)
_KEPT_LINES = 4
#: Where ``runtime_log`` keeps the log while its block runs, so that a process the runtime kills (a segfault in
#: ``execute``) leaves it behind for ``crash_sites``; set on xdist workers, emptied when a block ends. None: an
#: anonymous temporary file.
LOG_FILE: Path | None = None
_log_file_held = False


def refusal(metadata: dict[str, Any]) -> str | None:
    """Why ExecuTorch cannot take the program ``metadata`` describes, or None (whether the package is installed is
    the runtime row's ``requires``)."""
    if metadata.get("generation_config", {}).get("do_sample") and not metadata.get("noise"):
        return ("takes a sampling program only with its noise as an input: aten.multinomial is not a core ATen "
                "operator and ExecuTorch's runtime has no random number generator; export with "
                "export_generate(..., noise_input=True)")
    unbounded = [name for name, spec in metadata.get("inputs", {}).items()
                 if any(high is None for _, high in spec["shape"])]
    if unbounded:
        return (f"plans memory for the largest shape, and {', '.join(unbounded)} has no upper bound: export with "
                "export_generate(..., dynamic=True, max_batch_size=N), or dynamic=False")
    return None


def write(program: ExportedProgram, path: Path, *, delegate: bool) -> None:
    """Lower ``program`` to edge dialect, delegate what XNNPACK takes when ``delegate``, and write the ``.pte``."""
    from executorch.exir import to_edge_transform_and_lower

    partitioners: list[Any] = []
    if delegate:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioners.append(XnnpackPartitioner())
    lowered = to_edge_transform_and_lower(program, partitioner=partitioners).to_executorch()
    path.write_bytes(lowered.buffer)


def load(path: Path) -> Any:
    """The ``.pte``'s ``forward`` method in ExecuTorch's runtime, called as the program: tensors in, a tuple out."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")
    if method is None:
        raise ValueError("the program has no forward method")

    def run(*inputs: Any) -> tuple[Any, ...]:
        with runtime_log():
            return tuple(method.execute(list(inputs)))

    return run


@contextmanager
def runtime_log() -> Iterator[None]:
    """Run the block with the process's stderr captured; an exception leaving it gets the runtime's log lines as a
    note ("ExecuTorch's runtime logged: ..."). What was written is passed on to stderr either way.

    Both of stderr's doors are taken: descriptor 2, where C++ writes, and ``sys.stderr``, where ExecuTorch's Python
    bindings send the runtime's log (measured: under pytest's capture, which points ``sys.stderr`` at a file of its
    own, a method's "Missing operator" lines reached that file and not descriptor 2).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with _log_file() as log:
        os.dup2(log.fileno(), 2)
        try:
            with _python_stderr_to_descriptor_2():
                yield
        except Exception as error:
            reasons = runtime_reasons(_restored(saved, log))
            if reasons:
                add_note(error, f"ExecuTorch's runtime logged: {'; '.join(reasons)}")
            raise
        else:
            _restored(saved, log)


@contextmanager
def _log_file() -> Iterator[IO[bytes]]:
    """``LOG_FILE`` emptied, or an anonymous file where there is none or an enclosing block holds it."""
    global _log_file_held
    if LOG_FILE is None or _log_file_held:
        with tempfile.TemporaryFile() as anonymous:
            yield anonymous
        return
    _log_file_held = True
    try:
        with LOG_FILE.open("w+b") as named:
            yield named
    finally:
        _log_file_held = False


@contextmanager
def _python_stderr_to_descriptor_2() -> Iterator[None]:
    """``sys.stderr`` writes to descriptor 2 for the block; put back after unless someone replaced it meanwhile."""
    earlier = sys.stderr
    with open(2, "w", closefd=False, errors="replace") as ours:
        sys.stderr = ours
        try:
            yield
        finally:
            if sys.stderr is ours:
                sys.stderr = earlier


def _restored(saved: int, log: Any) -> str:
    """Put stderr back, write what the block wrote to it, and return that text."""
    os.dup2(saved, 2)
    os.close(saved)
    log.seek(0)
    written = log.read()
    log.truncate(0)  # the block ended: what is left in ``LOG_FILE`` is only ever a dead process's
    if written:
        os.write(2, written)
    return str(written.decode(errors="replace"))


def runtime_reasons(text: str) -> list[str]:
    """The runtime's last log lines, as "what it says (file.cpp:line)", start-up noise left out, each once (a method
    loaded for every step logs its missing operator each time), in the order of their last appearance."""
    found = [match for match in map(_LOG_LINE.match, text.splitlines())
             if match and not match["site"].startswith(_NOT_A_REASON)]
    lines = [f"{match['text']} ({match['site']})" for match in found]
    return list(dict.fromkeys(reversed(lines)))[:_KEPT_LINES][::-1]
