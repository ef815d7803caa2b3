"""Compile events: what dynamo and inductor report while a block runs (graph breaks from PyTorch's structured
trace, recompile reasons, the graphs a counting backend is handed, CUDA-graph skips), gathered in a
``CompileTrace``; ``breaks`` locates and classifies each break."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pytest_fullgraph.core.breaks import record_from_exception
from pytest_fullgraph.core.results import BreakRecord, first_line


@dataclass
class CompileTrace:
    """What dynamo reported while a block ran: breaks, recompile reasons and graph statistics."""

    breaks: list[BreakRecord] = field(default_factory=list)
    recompile_reasons: list[str] = field(default_factory=list)
    #: per reason, the frame dynamo recompiled (its code object's file, first line and name), None where the trace
    #: did not say: where a guard on that frame's input is located
    recompile_frames: list[tuple[str, int, str] | None] = field(default_factory=list)
    graph_ops: list[int] = field(default_factory=list)
    #: why inductor ran a graph without CUDA graphs under ``mode="reduce-overhead"`` (its own words, in order)
    cudagraph_skips: list[str] = field(default_factory=list)

    @property
    def graph_count(self) -> int:
        return len(self.graph_ops)


class _TraceHandler(logging.Handler):
    """Reads PyTorch's structured trace (``torch.__trace``) as it is emitted.

    The graph-break artifact is logged inside dynamo's ``except`` block, so ``sys.exc_info()`` holds the
    ``Unsupported`` exception itself, with its gb_type and real user stack: no text parsing needed.
    """

    def __init__(self, trace: CompileTrace) -> None:
        super().__init__(logging.DEBUG)
        self.trace = trace
        self._by_site: dict[tuple[str, int, str, str], BreakRecord] = {}
        #: each frame id's code object (file, first line, name), from its first ``dynamo_start``
        self._frames: dict[Any, tuple[str, int, str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        metadata: dict[str, Any] = getattr(record, "metadata", {}) or {}
        payload = getattr(record, "payload", None)
        if "dynamo_start" in metadata:
            self._on_frame_start(metadata)
            return
        artifact = metadata.get("artifact")
        if not isinstance(artifact, dict):
            return
        if artifact.get("name") == "dynamo_graph_break_reason":
            self._on_break(metadata)
        elif artifact.get("name") == "recompile_reasons" and payload:
            reasons = _reasons(payload)
            self.trace.recompile_reasons.extend(reasons)
            self.trace.recompile_frames.extend([self._frames.get(metadata.get("frame_id"))] * len(reasons))

    def _on_frame_start(self, metadata: dict[str, Any]) -> None:
        """Remember each frame id's code object from its first ``dynamo_start``: a recompile's reasons arrive with
        its frame id only. The stack names files by their index in the trace's table of interned strings, which
        the process fills once (before this handler may have been attached), so the table is read, not the log."""
        from torch._logging import structured

        stack = metadata["dynamo_start"].get("stack") or []
        frame_id = metadata.get("frame_id")
        if stack and frame_id not in self._frames:
            top = stack[-1]
            file = top.get("filename")
            if isinstance(file, int):
                table: dict[str, int] = getattr(structured, "INTERN_TABLE", {})
                file = next((text for text, index in table.items() if index == file), str(file))
            self._frames[frame_id] = (str(file), int(top.get("line", 0)), str(top.get("name", "")))

    def _on_break(self, metadata: dict[str, Any]) -> None:
        error, user_stack = _break_being_logged()
        if error is None:
            return  # the "skipping frame" echo of a break already recorded with its exception
        record = record_from_exception(error, user_stack)
        key = (record.file, record.line, record.function, record.gb_type)
        if key in self._by_site:  # met again: dynamo restarted the analysis, or a resumed frame re-ran it
            self._by_site[key].hits += 1
            return
        self._by_site[key] = record
        self.trace.breaks.append(record)


def _break_being_logged() -> tuple[BaseException | None, Any]:
    """The exception (and user stack) of the graph break whose trace artifact is being emitted.

    Dynamo's ``log_graph_break(..., exc)`` holds both; a data-dependent jump calls it outside any
    ``except`` block, so ``sys.exc_info()`` alone would miss those breaks.
    """
    from torch._dynamo.exc import collapse_resume_frames, get_stack_above_dynamo

    error: BaseException | None = None
    user_stack: Any = None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "log_graph_break" and "exc" in frame.f_locals:
            error = frame.f_locals["exc"]
            user_stack = getattr(error, "real_stack", None) or frame.f_locals.get("user_stack")
            break
        frame = frame.f_back  # type: ignore[assignment]
    else:
        error = sys.exc_info()[1]
        if error is None or not hasattr(error, "real_stack"):
            return None, None
        user_stack = error.real_stack
    # A break inside a resumed frame (e.g. the decode loop after an earlier break) has a short user stack;
    # the eager frames above dynamo tell where it was called from.
    return error, collapse_resume_frames(list(get_stack_above_dynamo()) + list(user_stack or []))


_OBJECT_ID = re.compile(r"\b0x[0-9a-fA-F]+\b|\b\d{9,}\b")


def normalise_reason(reason: str) -> str:
    """A recompile reason's first line, object ids and addresses masked: equal in every process."""
    return _OBJECT_ID.sub("<id>", first_line(reason))


def _reasons(payload: str) -> list[str]:
    try:
        parsed = json.loads(payload)
    except ValueError:
        parsed = [payload]
    return [normalise_reason(str(item)) for item in (parsed if isinstance(parsed, list) else [parsed])]


class CountingBackend:
    """A ``torch.compile`` backend that counts each graph dynamo hands it (with its op count) in ``trace``,
    then compiles it with the named backend."""

    def __init__(self, backend: str, trace: CompileTrace, mode: str | None = None) -> None:
        self.name = backend
        self.trace = trace
        #: an inductor mode ("reduce-overhead": CUDA graphs), applied as ``torch.compile(mode=...)`` applies it
        self.mode = mode
        self.__name__ = f"counting_{backend}" + (f"_{mode}" if mode else "")

    def with_mode(self, mode: str) -> CountingBackend:
        """Inductor in ``mode``, counting into the same trace: what ``torch.compile(backend="inductor",
        mode=mode)`` compiles, seen by this check's counters."""
        return CountingBackend("inductor", self.trace, mode)

    def __deepcopy__(self, memo: dict[int, Any]) -> CountingBackend:
        # transformers deep-copies the generation config that holds the backend: the copy must count here too
        return self

    def __call__(self, graph_module: Any, example_inputs: Any) -> Any:
        from torch._dynamo import lookup_backend

        self.trace.graph_ops.append(sum(1 for node in graph_module.graph.nodes
                                        if node.op in ("call_function", "call_method", "call_module")))
        if self.mode is None:
            return lookup_backend(self.name)(graph_module, example_inputs)
        from torch._inductor import list_mode_options
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(graph_module, example_inputs, config_patches=list_mode_options(self.mode))


def counting_backend(backend: str, trace: CompileTrace) -> CountingBackend:
    """Wrap a named backend so each graph dynamo hands it is counted, with its op count."""
    return CountingBackend(backend, trace)


#: PyTorch's structured-trace logger: always at DEBUG and non-propagating, which makes pytest (9+) attach its
#: log capture to it directly, so every failing test would print hundreds of empty ``torch.__trace`` records.
TRACE_LOGGER = "torch.__trace"
#: Environment variables with which a user asks torch for its own structured trace (tlparse); then torch's
#: logger is left as torch set it.
TRACE_ENVIRONMENT = ("TORCH_TRACE", "TORCH_COMPILE_DEBUG", "TORCH_DTRACE")
_SILENT = logging.CRITICAL + 1


def _is_torch_handler(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("torch.")


def silence_structured_trace() -> Callable[[], None]:
    """Stop torch emitting structured-trace records outside ``capture_compile_events`` (unless the user asked
    for a trace in the environment); returns the function that restores the logger's level.

    torch's trace logger decides by its level alone whether to emit (``isEnabledFor`` is level-only), so a
    level above CRITICAL keeps the records away from every handler, pytest's captures included.
    """
    trace_logger = logging.getLogger(TRACE_LOGGER)
    previous = trace_logger.level
    if any(os.environ.get(name) for name in TRACE_ENVIRONMENT):
        return lambda: None
    trace_logger.setLevel(_SILENT)

    def restore() -> None:
        trace_logger.setLevel(previous)

    return restore


@contextmanager
def capture_compile_events() -> Iterator[CompileTrace]:
    """Record graph breaks and recompiles from PyTorch's structured trace while the block runs.

    Only this handler and torch's own (a user's ``TORCH_TRACE`` file) see the records meanwhile: handlers that
    others attached, pytest's log capture among them, are detached for the block and put back after it.
    """
    trace = CompileTrace()
    trace_logger = logging.getLogger(TRACE_LOGGER)
    handler = _TraceHandler(trace)
    saved_level, saved_propagate, saved_handlers = trace_logger.level, trace_logger.propagate, trace_logger.handlers
    trace_logger.handlers = [*(h for h in saved_handlers if _is_torch_handler(h)), handler]
    trace_logger.setLevel(logging.DEBUG)
    trace_logger.propagate = False
    try:
        with _cudagraph_skips_into(trace):
            yield trace
    finally:
        trace_logger.handlers = saved_handlers
        trace_logger.setLevel(saved_level)
        trace_logger.propagate = saved_propagate


#: The logger inductor tells why it skipped CUDA graphs on (``cudagraph_utils.log_cudagraph_skip_and_bump_counter``,
#: torch's "cudagraphs" logging artifact); it logs at WARNING, the skip count goes to ``counters["inductor"]``.
CUDAGRAPHS_LOGGER = "torch._inductor.cudagraph_utils.__cudagraphs"


class _CudagraphSkipHandler(logging.Handler):
    def __init__(self, trace: CompileTrace) -> None:
        super().__init__(logging.WARNING)
        self.trace = trace

    def emit(self, record: logging.LogRecord) -> None:
        reason = first_line(record.getMessage())
        if reason and reason not in self.trace.cudagraph_skips:
            self.trace.cudagraph_skips.append(reason)


@contextmanager
def _cudagraph_skips_into(trace: CompileTrace) -> Iterator[None]:
    """Collect inductor's CUDA-graph skip reasons into ``trace`` while the block runs (the logger is let through
    at WARNING for the block if torch's logging settings had it quieter)."""
    skips_logger = logging.getLogger(CUDAGRAPHS_LOGGER)
    handler = _CudagraphSkipHandler(trace)
    saved_level = skips_logger.level
    if skips_logger.getEffectiveLevel() > logging.WARNING:
        skips_logger.setLevel(logging.WARNING)
    skips_logger.addHandler(handler)
    try:
        yield
    finally:
        skips_logger.removeHandler(handler)
        skips_logger.setLevel(saved_level)
