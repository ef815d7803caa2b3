"""Which standalone script shows a check's failure, and what it must find: decided from the ``CheckResult`` alone.

A script reproduces a check when it meets the failure the report recorded: the same kind (an eager error, a graph
break, a compiler crash, nothing compiled, a token mismatch), the same exception type or break type, and the same
``file:line`` where the report has one. Failures that only our own loop meets are not written: a script without
the loop cannot show them, and copying the loop into the script would hand a maintainer our code to debug. No
torch import.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_fullgraph.core.names import OWN_LEVEL_NAMES
from pytest_fullgraph.core.results import BREAK, ERROR, MISMATCH, CheckResult, Stage
from pytest_fullgraph.report.causes import error_key, fault_of

#: What a script finds, as its ``REPRO-RESULT`` line says.
KINDS = ("error", "break", "crash", "not_compiled", "mismatch")
#: The scripts, each a template of ``source``: what each calls.
TEMPLATES = {
    "static_error": 'model.generate(cache_implementation="static") raising where the default cache works',
    "eager_error": "model.generate raising, uncompiled",
    "generate_break": "torch.compile(model.generate, fullgraph=True)",
    "forward_compile": "the forward compiled with fullgraph=True on a StaticCache, as generate feeds it",
    "compiled_generate": 'model.generate(cache_implementation="static") with CompileConfig(fullgraph=True)',
    "not_compiled": 'model.generate(cache_implementation="static") with CompileConfig(fullgraph=True) and a backend '
                    "that counts the graphs it is given",
    "forward_mismatch": "eager and compiled model.generate(cache_implementation=\"static\"), compared with torch.equal",
    "helper_mismatch": "transformers' ExecuTorch helper (TorchExportableModuleWithStaticCache.generate) against "
                       "model.generate, compared with torch.equal",
    "cache_divergence": "model.generate on one cache, each step's logits against float64 recomputing the step from "
                        "its prefix without a cache",
}
#: Built-in levels whose eager reference is ``generate`` with a static cache (``Level.reference_config``); the
#: others' reference is ``generate`` as configured.
STATIC_REFERENCE_LEVELS = frozenset({"forward"})
#: Break origins (``breaks.ORIGINS``) that a non-``generate`` level meets only in transformers' generation code as
#: our loop calls it (its logits processors, its stopping criteria): no script without the loop reaches them.
LOOP_REACHED_ORIGINS = frozenset({"sampling", "eos", "generation", "masking", "loop"})

#: What dynamo raises for a higher-order op it gave up on; the break inside is the one a script meets.
HIGHER_ORDER_OP_FAILURES = frozenset({"UncapturedHigherOrderOpError"})
_FAILED_AT = re.compile(r" failed(?: at (?P<where>\S+:\d+))?: (?P<type>\w+): (?P<message>.*?)(?:; model\.generate|$)",
                        re.DOTALL)
_STATIC_TOO = re.compile(r"model\.generate with a static cache fails too \((?P<type>\w+): (?P<message>.*)\): the "
                         r"model's static-cache path", re.DOTALL)
_CRASHED = re.compile(r"with fullgraph=True the compiler crashed instead: (?P<type>\w+)[^(]*\(\w+\): (?P<message>.*)",
                      re.DOTALL)
_INNER_TYPE = re.compile(r"^(\w+): ")
_DEFAULT_WORKS = "model.generate with the default cache works"
#: The cache level's words for a path whose logits leave float64 (``levels.cache``), and for one that fails.
_CACHE_OFF = re.compile(r"(?:^|; )the (?P<path>default|static) cache \(\w+\) is off at step \d+")
_CACHE_FAILS = re.compile(r"generate with the static cache fails(?: at (?P<where>\S+:\d+)(?: \(called from \S+\))?)?: "
                          r"(?P<type>\w+): (?P<message>.*?) \(the default cache works", re.DOTALL)


@dataclass(frozen=True)
class Expected:
    """The failure a script must meet: ``kind`` of ``KINDS``, the exception or break ``type``, and ``where`` the
    report located it (``file:line``, relative to site-packages; "" when the report does not say)."""

    kind: str
    type: str = ""
    where: str = ""
    #: the report's words for it, for the script's header
    message: str = ""

    def as_found(self) -> dict[str, str]:
        """What the script's ``REPRO-RESULT`` must hold, as the script compares it."""
        return {key: value for key, value in (("kind", self.kind), ("type", self.type), ("where", self.where))
                if value}

    def differs(self, found: Mapping[str, Any] | None) -> str:
        """"" when ``found`` (a script's ``REPRO-RESULT``) is this failure, else what differs, in words."""
        if not found or found.get("status") == "fixed":
            return f"the script ran without failing; the report recorded {self.describe()}"
        if found.get("status") == "other" and found.get("kind") == "unexpected":
            return f"the script failed otherwise ({found.get('type', '?')}); the report recorded {self.describe()}"
        seen = Expected(str(found.get("kind", "")), str(found.get("type", "")), str(found.get("where", "")))
        differ = seen.kind != self.kind or (self.type and seen.type != self.type)
        if differ or (self.where and not same_site(seen.where, self.where)):
            return f"the script found {seen.describe()}; the report recorded {self.describe()}"
        return ""

    def describe(self) -> str:
        words = {"not_compiled": "nothing compiled", "mismatch": "a token mismatch"}.get(self.kind, self.kind)
        return " ".join(part for part in (words, self.type, f"at {self.where}" if self.where else "") if part)


def same_site(found: str, recorded: str) -> bool:
    """Whether a script found the recorded ``file:line``: the same line of a file whose path ends as the recorded
    one (a project's file is absolute in a script's output, relative to the run's directory in the report)."""
    found_file, _, found_line = found.rpartition(":")
    recorded_file, _, recorded_line = recorded.rpartition(":")
    return found_line == recorded_line and f"/{found_file}".endswith(f"/{recorded_file}")


@dataclass(frozen=True)
class Plan:
    """The scripts to try for a check, in order (the first that meets ``expected`` is written)."""

    templates: tuple[str, ...]
    expected: Expected
    #: the generate call of ``eager_error`` uses a static cache (the level's reference does)
    static: bool = False
    #: a cache divergence's tolerance comes from float64 (False where the check says float64 could not run the model)
    float64: bool = True

    def key(self, result: CheckResult) -> tuple[str, ...]:
        """Checks of one model that fail the same way share a script: an error by its type and message (numbers
        and quoted names aside), a break or crash by its type and site."""
        detail = error_key(self.expected.message) if self.expected.kind == "error" else self.expected.where
        return (result.model, result.dtype, self.templates[0], self.expected.kind, self.expected.type, detail)


def crash_type(name: str, message: str) -> str:
    """A compiler crash as ``InternalTorchDynamoError: PendingUnbackedSymbolNotFound``: dynamo's wrapper names the
    exception it wraps at the start of its message."""
    inner = _INNER_TYPE.match(message)
    return f"{name}: {inner.group(1)}" if inner else name


def plan_for(result: CheckResult) -> Plan | str:
    """The plan for a failing check, or why no script is written for it."""
    if result.outcome not in (BREAK, ERROR, MISMATCH):
        return f"a {result.outcome} is not a failure a script can show"
    if result.level.startswith("hf_"):
        return _export_path_plan(result)
    if result.level == "cache":
        return _cache_plan(result)
    if result.level not in OWN_LEVEL_NAMES:  # transformers' export paths (hf_*) are planned above
        return f"level {result.level!r} is not built in: what it runs is not known here"
    if result.message.startswith("timeout after"):
        return f"the check timed out ({result.headline()}): no failure to reproduce"
    stage = Stage.of(result.stage)
    if stage is Stage.BUILD:
        return "the model failed to build, so there is no config to inline"
    if result.outcome == MISMATCH:
        if result.level == "forward":
            return Plan(("forward_mismatch",), Expected("mismatch", message=result.headline()))
        return "a mismatch of pytest_fullgraph's loop: a script without the loop cannot show it"
    if stage in (Stage.EAGER, Stage.OWN_LOOP):
        return _eager_plan(result, stage)
    if result.level == "generate":
        return _generate_plan(result)
    return _compiled_plan(result)


def _export_path_plan(result: CheckResult) -> Plan | str:
    """transformers' export paths: the ExecuTorch helper's tokens against ``generate``'s need only transformers to
    show; its other failures and the exporters' (run by their runners in our host loop) are shown by the check."""
    if result.level == "hf_et_helper" and result.outcome == MISMATCH:
        return Plan(("helper_mismatch",), Expected("mismatch", message=result.headline()))
    return (f"a failure of transformers' export path {result.level}: the check shows it (`pytest "
            f"--fullgraph-levels={result.level} --fullgraph-models={result.model} -k {result.scenario}`)")


def _cache_plan(result: CheckResult) -> Plan | str:
    """The cache level: a path off recompute (a divergence, also where its tokens are still equal) before a static
    cache that fails; the default cache failing is an eager error as any level's; a rounding flip is nobody's bug."""
    stage = Stage.of(result.stage)
    if stage is Stage.EAGER:
        return _eager_plan(result, stage)
    off = _CACHE_OFF.search(result.message)
    if off is not None:
        return Plan(("cache_divergence",), Expected("mismatch", message=result.headline()),
                    static=off["path"] == "static", float64="float64 could not run the model" not in result.message)
    failed = _CACHE_FAILS.search(result.message)
    if failed is not None:
        return Plan(("static_error",), Expected("error", failed["type"], failed["where"] or "", failed["message"]))
    return f"no cache path is off recompute or fails ({result.headline()}): a rounding flip is nobody's bug"


def _eager_plan(result: CheckResult, stage: Stage) -> Plan | str:
    """An eager ``generate`` that fails: with a static cache where the default works, or as the level ran it."""
    if stage is Stage.OWN_LOOP:
        static = _STATIC_TOO.search(result.message)
        if static is None:
            return (f"the failure is in pytest_fullgraph's loop (fault: {fault_of(result)}): "
                    "model.generate does not fail the same way")
        loop = _FAILED_AT.search(result.message)
        same = loop is not None and (loop["type"], loop["message"]) == (static["type"], static["message"])
        where = (loop["where"] or "") if loop is not None and same else ""  # the loop's site is generate's
        return Plan(("static_error",), Expected("error", static["type"], where, static["message"]))
    failed = _FAILED_AT.search(result.message)
    if failed is None:
        return f"the eager failure is not located in the report ({result.headline()})"
    expected = Expected("error", failed["type"], failed["where"] or "", failed["message"])
    if _DEFAULT_WORKS in result.message:
        return Plan(("static_error",), expected)
    return Plan(("eager_error",), expected, static=result.level in STATIC_REFERENCE_LEVELS)


def _generate_plan(result: CheckResult) -> Plan | str:
    record = result.first_break
    if record is None:
        return f"the compiled generate failed without a located failure ({result.headline()})"
    if result.outcome == BREAK:
        return Plan(("generate_break",), Expected("break", record.gb_type, record.where(), record.message))
    return Plan(("generate_break",), Expected("crash", crash_type(record.gb_type, record.message), "", record.message))


def _compiled_plan(result: CheckResult) -> Plan | str:
    """A compiled run of the model's forward (transformers' path or our loop) that broke, crashed or compiled
    nothing: the forward compiled alone shows a break of the model's own code."""
    templates = ("forward_compile", "compiled_generate") if result.level == "forward" else ("forward_compile",)
    if result.outcome == ERROR and result.message.startswith("nothing was compiled"):
        return Plan(("not_compiled",), Expected("not_compiled", message=result.headline()))
    record = result.first_break
    if record is None:
        return f"no break or crash is located in the report ({result.headline()}): the loop's one-graph rule"
    crashed = _CRASHED.search(result.message)
    if crashed is not None:  # dynamo crashed under fullgraph=True where, without it, it breaks at `record`
        name = crash_type(crashed["type"], crashed["message"])
        return Plan(templates, Expected("crash", name, record.where(), crashed["message"]))
    if result.outcome == ERROR:
        return Plan(templates, Expected("crash", crash_type(record.gb_type, record.message), "", record.message))
    inner = record.cause or record  # a higher-order op (while_loop) gives up because of the break inside it
    if inner.origin in LOOP_REACHED_ORIGINS:
        return (f"the break is in code only pytest_fullgraph's loop reaches ({inner.origin}: {inner.where()}): a "
                "script without the loop does not meet it")
    # an op given up without its inner break recorded is located at that break: the site says it, not the type
    kind = "" if inner.gb_type in HIGHER_ORDER_OP_FAILURES else inner.gb_type
    return Plan(templates, Expected("break", kind, inner.where(), inner.message))


#: Scenarios and levels in the order a group picks its representative: the plainest call first.
_SCENARIO_ORDER = ("greedy", "padded", "sample", "eos")
_LEVEL_ORDER = ("forward", "generate", "decode", "export", "while")


@dataclass
class Group:
    """Checks one script stands for: the script rebuilds ``representative`` and must meet its plan's failure."""

    plans: dict[str, tuple[CheckResult, Plan]] = field(default_factory=dict)

    @property
    def representative(self) -> CheckResult:
        """The plainest member whose failure is located: greedy before sampling, ``forward`` before our loop."""
        def rank(member: tuple[CheckResult, Plan]) -> tuple[bool, int, int]:
            result, plan = member
            scenario, level = result.scenario, result.level
            return (not plan.expected.where,
                    _SCENARIO_ORDER.index(scenario) if scenario in _SCENARIO_ORDER else len(_SCENARIO_ORDER),
                    _LEVEL_ORDER.index(level) if level in _LEVEL_ORDER else len(_LEVEL_ORDER))

        return min(self.plans.values(), key=rank)[0]

    @property
    def plan(self) -> Plan:
        return self.plans[self.representative.check_id][1]

    @property
    def check_ids(self) -> list[str]:
        return sorted(self.plans)


def grouped(checks: Iterable[CheckResult]) -> tuple[list[Group], dict[str, str]]:
    """The groups one script each stands for, and the checks no script is written for, with why."""
    groups: dict[tuple[str, ...], Group] = {}
    skipped: dict[str, str] = {}
    for result in checks:
        found = plan_for(result)
        if isinstance(found, str):
            skipped[result.check_id] = found
            continue
        groups.setdefault(found.key(result), Group()).plans[result.check_id] = (result, found)
    return sorted(groups.values(), key=lambda group: group.representative.check_id), skipped
