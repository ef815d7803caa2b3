"""Checks grouped by what went wrong, and whose fault it is: the reading of a run at 196 models is a dozen causes,
not 150 lines of one error repeated per scenario. Used by the Markdown page and the HTML page; no torch import.

Whose fault a check's failure is comes from what the check already recorded: a break's origin (the rules in
``breaks.ORIGIN_RULES``), the blame an eager failure carries (``compare.eager_failure_blame``) or where an error
was raised. Reports written before any of these existed still group; their fault reads "not told".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pytest_fullgraph.core.breaks import LOOP_PATHS, RUNTIME_PACKAGES
from pytest_fullgraph.core.results import BREAK, CheckResult

#: Faults that are pytest_fullgraph's own: a check failing there fails, strict or not, never an xfail.
OUR_FAULTS = ("loop", "plugin")
#: Whose fault, as the report names it, in the order the report lists them.
FAULTS: dict[str, str] = {
    "model": "the model's code (transformers/models)",
    "transformers": "transformers' generation, cache or masking code",
    "loop": "pytest_fullgraph's loop",
    "plugin": "pytest_fullgraph's checks (a bug of this plugin, not of what it checks)",
    "torch": "PyTorch",
    "runtime": "the deployment runtime (ExecuTorch, ONNX Runtime, OpenVINO)",
    "user": "your code",
    "unknown": "not told",
}
#: A break's origin (``breaks.ORIGINS``) to the fault it names.
_FAULT_OF_ORIGIN = {"model": "model", "sampling": "transformers", "eos": "transformers", "cache": "transformers",
                    "masking": "transformers", "generation": "transformers", "integration": "transformers",
                    "torch": "torch", "runtime": "runtime", "loop": "loop", "user": "user"}
#: What an error's message says about its fault, first match wins (the blame sentences of ``compare``).
_FAULT_OF_MESSAGE = (
    # a loop level's promise (``levels.OneGraph``): a second graph means the loop recompiled under fullgraph=True
    (re.compile(r"^expected one graph, got \d+"), "loop"),
    (re.compile(r"the model's static-cache path"), "model"),
    (re.compile(r"so transformers' exportable module \S+ is at fault"), "transformers"),
    # hf_et_helper's loop drives transformers' exportable module; reports before it said so blamed "the loop"
    (re.compile(r"^eager generation by the exportable module .*so the loop is at fault"), "transformers"),
    (re.compile(r"^the exportable module .*so the difference is the loop's"), "transformers"),  # as recorded before
    (re.compile(r"so the loop is at fault|so the difference is the loop's"), "loop"),
    (re.compile(r"nothing was compiled: transformers ran"), "transformers"),
    # a mismatch of transformers' export paths (``hf_levels``): the helper's loop, the exported program, the runtime
    (re.compile(r"the helper's loop is at fault|the exported program is at fault"), "transformers"),
    (re.compile(r"(ONNX Runtime|ExecuTorch's runtime) is at fault"), "runtime"),
    # the cache level (``levels.cache``): a cache path that fails, where; one whose logits leave recompute's is the
    # model's (the default cache is every model's, and right for most of them)
    (re.compile(r"^generate with the static cache fails at "
                r"transformers/(models/|\S+ \(called from transformers/models/)"), "model"),
    (re.compile(r"^generate with the static cache fails at transformers/"), "transformers"),
    (re.compile(r"cache \(\w+\) is off at step \d+: .* that cache path of the model or transformers is wrong"),
     "model"),
)
#: Where an error of a check's phase was raised, and its type: "... failed at FILE:LINE: TYPE: ..." (``check``; the
#: cache level says "generate with the static cache fails at ...").
#: Raised in transformers' integrations, the model's code that called them: "... failed at FILE:LINE (called from
#: MODEL_FILE:LINE): ..." (``breaks.error_site``).
_RAISED_AT = re.compile(r" fail(?:ed|s) at (\S+?:\d+)(?: \(called from (\S+?:\d+)\))?: (?:(\w+(?:\.\w+)*): )?")
#: Where a worker died, when its faulthandler file said: "... crashed while running this check (...): Segmentation
#: fault at FILE:LINE in f" (``crash_sites``).
_DIED_AT = re.compile(r"crashed while running this check \([^)]*\): (.+?) at (\S+?:\d+) in \S+$")
#: The loop's files as reports recorded before the package layout name them (``pytest_fullgraph/decode.py``): the
#: committed reports keep those paths, and they stay the loop's.
FLAT_LAYOUT_LOOP_FILES = tuple(f"pytest_fullgraph/{name}.py" for name in (
    "decode", "exported", "planning", "beam", "beam_search", "lookup", "assisted", "speculative", "sampling_noise",
    "loop_steps", "loop_processors", "loop_state", "loop_tracing", "modeling"))
#: Whose fault an error raised at a path is, first matching prefix wins: in this package, the loop's modules are the
#: loop's, the rest (the checks' own comparison or explanation crashing) the plugin's.
_FAULT_OF_PATH = (("transformers/models/", "model"), ("transformers/", "transformers"), ("torch/", "torch"),
                  *((f"{package}/", "runtime") for package in RUNTIME_PACKAGES),
                  *((path, "loop") for path in (*LOOP_PATHS, *FLAT_LAYOUT_LOOP_FILES)), ("pytest_fullgraph/", "plugin"))


def raised_at(message: str) -> tuple[str, str] | None:
    """(``file:line``, exception type or "") of an error's message (for a worker that died: its fatal error, such
    as "Segmentation fault"), or None when it names no place."""
    found = _RAISED_AT.search(message)
    if found is None:
        died = _DIED_AT.search(message)
        return (died.group(2), died.group(1)) if died else None
    return (found.group(1), found.group(3) or "")


def fault_of_origin(origin: str) -> str:
    """The fault a break's origin (``breaks.ORIGINS``) names: a key of ``FAULTS``."""
    return _FAULT_OF_ORIGIN.get(origin, "unknown")


def shown_origin(origin: str, file: str) -> str:
    """A break's stored origin, except the catch-all ``user`` at a place the runtime paths name: ExecuTorch's and
    ONNX Runtime's errors were recorded as ``user`` before the ``runtime`` origin existed."""
    if origin == "user" and any(file.startswith(prefix) for prefix, fault in _FAULT_OF_PATH if fault == "runtime"):
        return "runtime"
    return origin


def fault_of(result: CheckResult) -> str:
    """A key of ``FAULTS`` for a failing check: a break's root-cause origin, else an error's stated blame, else
    where the error was raised."""
    records = result.break_records() if result.outcome == BREAK else []
    if records:
        root = next((record for record in records if record.root_cause), records[0])
        return fault_of_origin(root.origin)
    for pattern, fault in _FAULT_OF_MESSAGE:
        if pattern.search(result.message):
            return fault
    if result.outcome == BREAK:
        return "unknown"
    origin = result.first_break.origin if result.first_break is not None else ""
    if origin in _FAULT_OF_ORIGIN and origin != "user":
        return _FAULT_OF_ORIGIN[origin]
    # "user" is the origin rules' catch-all: a place the path table knows (a runtime's, in reports before the
    # runtime origin) says more
    found = _RAISED_AT.search(result.message)
    place = (found.group(2) or found.group(1)) if found else (raised_at(result.message) or ("", ""))[0]
    return next((fault for prefix, fault in _FAULT_OF_PATH if place.startswith(prefix)),
                "user" if origin == "user" else "unknown")


#: A model class in a reason (``RwkvForCausalLM.forward takes no `cache` argument``), where its code is
#: (``(transformers/models/rwkv/modeling_rwkv.py:683)``), and the loop form named.
_MODEL_CLASS = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:ForCausalLM|LMHeadModel|WithLMHead|Model|Decoder)\b")
_DEFINED_AT = re.compile(r" \([\w/.-]+\.py:\d+\)")
_LOOP_FORM = re.compile(r"\(loop='\w+'\)")
#: The test a crashed worker was running, named in its check's message (``session.record_crash``).
_CRASHED_TEST = re.compile(r"(crashed while running this check) \([^)]*\)")


def error_key(message: str) -> str:
    """One cause however its numbers and names vary: tensor sizes, indices, quoted names and the loop form do not
    split a group (cpmant's ``index 11`` and dory's are the same write past the cache's end)."""
    unnamed = _CRASHED_TEST.sub(r"\1", _LOOP_FORM.sub("", message))
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'…'", unnamed))


def skip_key(message: str) -> str:
    """One reason however many model classes (and where their code is) and loop forms it was given for."""
    return _LOOP_FORM.sub("", _DEFINED_AT.sub("", _MODEL_CLASS.sub("{class}", message)))


@dataclass
class Group:
    """Checks that failed (or were skipped) the same way: one example message stands for them all."""

    key: str
    example: str
    fault: str = "unknown"
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def models(self) -> list[str]:
        return sorted({result.model for result in self.checks})

    @property
    def levels(self) -> list[str]:
        return list(dict.fromkeys(result.level for result in self.checks))


def group(checks: Iterable[CheckResult], key: Callable[[str], str], with_fault: bool = False) -> list[Group]:
    """Checks grouped by ``key`` of their message (and their fault): in the order of ``FAULTS``, then most checks
    first."""
    groups: dict[tuple[str, str], Group] = {}
    for result in checks:
        fault = fault_of(result) if with_fault else "unknown"
        found = groups.setdefault((fault, key(result.message)), Group(key(result.message), result.message, fault))
        found.checks.append(result)
    return sorted(groups.values(), key=lambda g: (list(FAULTS).index(g.fault), -len(g.checks), g.example))
