"""Graph breaks: what dynamo raised as ``BreakRecord``s, classified (origin rules, GB ids, the break inside a
higher-order op); ``frames`` locates them, ``compile_events`` captures them while a run compiles."""

from __future__ import annotations

import functools
import json
import re
import traceback
from pathlib import Path
from typing import Any

from pytest_fullgraph.core.frames import LOOP_PATHS, display_path, frames_from, innermost, is_harness
from pytest_fullgraph.core.results import BreakRecord, Frame, first_line

#: The Python bindings an exported program runs in (ExecuTorch's, ONNX Runtime's, OpenVINO's): their frames are the
#: deployment runtime's, in a break's origin and in a report's whose-fault column alike.
RUNTIME_PACKAGES = ("executorch", "onnxruntime", "openvino")

#: First matching rule wins. ``path`` is matched against the frame's display path (relative to
#: site-packages or the repo), ``function`` against its function name, ``source`` against its line.
ORIGIN_RULES: tuple[tuple[str, str, str, str], ...] = (
    # (origin, path regex, function regex, source regex)
    # Our own generation loop first: a break there is the loop's fault, whatever the statement does.
    ("loop", rf"^(?:{'|'.join(re.escape(path) for path in LOOP_PATHS)})", r"", r""),
    ("sampling", r"", r"", r"multinomial|\bsample\b|softmax\(.*probs|torch\.(rand|bernoulli)"),
    ("sampling", r"^transformers/generation/logits_process\.py$", r"", r""),
    ("eos", r"^transformers/generation/stopping_criteria\.py$", r"", r""),
    ("eos", r"^transformers/generation/", r"_prepare_special_tokens|StopCheck|stop_check|_has_unfinished", r""),
    ("eos", r"^transformers/generation/", r"", r"unfinished_sequences|eos_token|this_peer_finished"),
    ("eos", r"", r"", r"\beos\b|\beos_|_eos\b|unfinished|finished\b"),
    ("cache", r"^transformers/cache_utils\.py$", r"", r""),
    ("masking", r"^transformers/(masking_utils|modeling_attn_mask_utils)\.py$", r"", r""),
    ("masking", r"^transformers/generation/", r"", r"padding|pad_token|attention_mask"),
    ("generation", r"^transformers/generation/", r"", r""),
    ("model", r"^transformers/models/", r"", r""),
    ("integration", r"^transformers/", r"", r""),
    ("torch", r"^torch/", r"", r""),
    # where an exported program runs
    ("runtime", rf"^(?:{'|'.join(RUNTIME_PACKAGES)})/", r"", r""),
)
ORIGINS = ("model", "sampling", "eos", "cache", "masking", "generation", "integration", "torch", "runtime", "loop",
           "user")

#: gb_types that dynamo raises *because of* a break nested deeper; the nested break is the root cause.
CONSEQUENCE_GB_TYPES = frozenset({
    "Graph break under GenericContextWrappingVariable",
    "Skip frame due to graph break in a nested function",
    "graph break in loop",  # GB7000: the frame is skipped because of a break inside the loop body
})  # fmt: skip

_GB_ID_IN_MESSAGE = re.compile(r"/gb/gb(\d{4})\.html", re.IGNORECASE)

#: dynamo failing in its own code while it traced a frame: PyTorch's fault, whichever frame it was tracing (mpt's
#: ``PendingUnbackedSymbolNotFound`` is raised while dynamo traces our loop's call of the model)
COMPILER_INTERNAL_ERRORS = frozenset({"InternalTorchDynamoError"})


def compile_failure_types() -> tuple[type[BaseException], ...]:
    """Exceptions that mean torch.compile gave up (a break) or crashed, rather than the model failing."""
    from torch._dynamo import exc

    return (exc.TorchDynamoException, exc.FailOnRecompileLimitHit)


def is_graph_break(error: BaseException) -> bool:
    """A fullgraph failure that is a graph break (outcome ``break``) rather than a compiler crash (``error``)."""
    from torch._dynamo import exc

    return isinstance(error, exc.Unsupported | exc.UserError | exc.UncapturedHigherOrderOpError
                      | exc.FailOnRecompileLimitHit)


def hit_recompile_limit(error: BaseException) -> bool:
    """Whether a fullgraph compile stopped at dynamo's recompile limit: the code recompiled on every call."""
    from torch._dynamo import exc

    return isinstance(error, exc.FailOnRecompileLimitHit)


def crashed_at_break(crash: BreakRecord, cause: BreakRecord) -> bool:
    """Whether a compiler crash happened at a break's site: in the break's own frame, or in the call made from it.
    Only then is the crash that break under ``fullgraph=True``; a crash elsewhere is a crash of its own."""
    if not (crash.file and cause.file):
        return False
    if crash.where() == cause.where():
        return True
    sites = [frame.where() for frame in crash.stack]
    innermost_at = max((index for index, site in enumerate(sites) if site == crash.where()), default=0)
    return innermost_at > 0 and sites[innermost_at - 1] == cause.where()


def error_site(record: BreakRecord) -> str:
    """Where an error was raised, with the model code that called into transformers' integrations when the
    innermost frame is there: sdpa's shape error for dory or blt is the tensors their attention passed it, so
    ``causes`` blames the caller (``... sdpa_attention.py:182 (called from .../modeling_dory.py:275)``)."""
    site = record.where()
    if not record.file.startswith("transformers/integrations/"):
        return site
    callers = [frame for frame in record.stack[:-1] if frame.file.startswith("transformers/models/")]
    return f"{site} (called from {callers[-1].file}:{callers[-1].line})" if callers else site


def classify(frame: Frame | None) -> str:
    """Origin of a break located at ``frame``, by the first matching rule of ``ORIGIN_RULES``."""
    if frame is None:
        return "torch"
    for origin, path_rx, function_rx, source_rx in ORIGIN_RULES:
        if ((not path_rx or re.search(path_rx, frame.file))
                and (not function_rx or re.search(function_rx, frame.function))
                and (not source_rx or re.search(source_rx, frame.source, re.IGNORECASE))):
            return origin
    return "user"


@functools.cache
def _gb_ids_by_type() -> dict[str, str]:
    import torch._dynamo

    registry_path = Path(torch._dynamo.__file__).parent / "graph_break_registry.json"
    try:
        entries = json.loads(registry_path.read_text())
    except (OSError, ValueError):
        return {}
    by_type: dict[str, str] = {}
    for gb_id, versions in sorted(entries.items()):
        for version in versions:  # older gb_type names map to the same id
            by_type.setdefault(version.get("Gb_type", ""), gb_id)
    return by_type


def gb_id_for(gb_type: str, message: str) -> str | None:
    """PyTorch's GB id: from the registry shipped with torch, else from the docs link in the message.

    The registry goes first: a wrapping break ("Graph break under ...") quotes its nested break's link.
    """
    if gb_type in _gb_ids_by_type():
        return _gb_ids_by_type()[gb_type]
    found = _GB_ID_IN_MESSAGE.search(message)
    return f"GB{found.group(1)}" if found else None


def record_from_exception(error: BaseException, user_stack: Any = None) -> BreakRecord:
    """Locate and classify the break a fullgraph compile raised (or any compile failure); a higher-order op's
    break keeps the break inside it as ``cause``, and takes its origin (whose fault the op's failure is)."""
    message = str(error)
    stack = frames_from(user_stack or getattr(error, "real_stack", None))
    if not stack:  # a crash with no user stack: fall back to the traceback's non-torch frames
        stack = frames_from(traceback.extract_tb(error.__traceback__))
    gb_type = getattr(error, "gb_type", None) or type(error).__name__
    where = innermost(stack)
    cause = inner_break(error)
    return BreakRecord(
        exception=f"{type(error).__module__}.{type(error).__qualname__}",
        gb_type=gb_type,
        # a higher-order op's own id, not the one its inner break's docs link gives
        gb_id=gb_id_for(gb_type, _hop_parts(message)[0]),
        message=break_message(message, gb_type),
        file=where.file if where else "",
        line=where.line if where else 0,
        function=where.function if where else "",
        source=where.source if where else "",
        origin=cause.origin if cause else _origin_of_failure(error, where),
        root_cause=gb_type not in CONSEQUENCE_GB_TYPES,
        stack=stack,
        cause=cause,
    )


def _origin_of_failure(error: BaseException, where: Frame | None) -> str:
    return "torch" if type(error).__name__ in COMPILER_INTERNAL_ERRORS else classify(where)


#: How dynamo's message for a higher-order op it gave up on (``UncapturedHigherOrderOpError``) introduces the break
#: inside the op: "... captured completely with torch.compile. Got graph break/error:" and the break on the next
#: lines (torch 2.11 on), or "... Got <the break's title>" on the same line (2.9, 2.10).
_HOP_TAIL = re.compile(r"captured completely with torch\.compile\.\s*Got(?: graph break/error:)?\s*")
_EXPLANATION = re.compile(r"^\s*Explanation:\s*(.+)$", re.MULTILINE)
_USER_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)(?:\n(?P<source>.*))?',
                         re.MULTILINE)


def _hop_parts(message: str) -> tuple[str, str | None]:
    """(the op's own words, the inner break's message); the second is None for any other break."""
    found = _HOP_TAIL.search(message)
    if found is None:
        return message, None
    return message[: found.start()] + "captured completely with torch.compile", message[found.end():]


def break_message(message: str, gb_type: str) -> str:
    """What a break says about itself in one line: the first line, unless that only repeats the break's type
    (dynamo's ``Unsupported`` starts with it), then the first line of its explanation; a higher-order op's
    message without the inner break it introduces (``cause`` holds that)."""
    head, inner = _hop_parts(message)
    line = first_line(head)
    explanation = _EXPLANATION.search(head)
    if inner is None and line == gb_type and explanation:
        return explanation.group(1).strip()
    return line


def inner_break(error: BaseException) -> BreakRecord | None:
    """The break inside a higher-order op that dynamo gave up on: the inner exception it replaced (kept as the
    ``__context__`` of ``raise ... from None``), else what its message says after the op's own words."""
    inner_message = _hop_parts(str(error))[1]
    if inner_message is None:
        return None
    inner = error.__context__
    if inner is not None and inner is not error and (getattr(inner, "gb_type", None) or is_graph_break(inner)):
        return record_from_exception(inner)
    return _record_from_text(inner_message)


def _record_from_text(text: str) -> BreakRecord:
    """A break from its message alone: the title, the explanation and the innermost ``from user code`` frame."""
    title = first_line(text)
    frames = [Frame(display_path(m["file"]), int(m["line"]), m["function"], (m["source"] or "").strip())
              for m in _USER_FRAME.finditer(text.split("from user code:", 1)[-1])]
    where = innermost([frame for frame in frames if not is_harness(frame)] or frames)
    return BreakRecord(exception="", gb_type=title, gb_id=gb_id_for(title, text), message=break_message(text, title),
                       file=where.file if where else "", line=where.line if where else 0,
                       function=where.function if where else "", source=where.source if where else "",
                       origin=classify(where), stack=frames)
