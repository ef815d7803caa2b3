"""What a check produces: ``CheckResult`` with its ``BreakRecord``s, and the report schema's version.

Plain dataclasses of JSON builtins, so xdist can ship them and report files can hold them. No torch import:
``python -m pytest_fullgraph report ...`` reads and renders reports without loading torch. The vocabulary a result
is spelled in lives beside it (``outcomes``, ``mismatch``, ``messages``) and is offered here too, so that a reader
of results imports one module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_fullgraph.core.messages import add_note, first_line, summary
from pytest_fullgraph.core.mismatch import DIVERGENCE, ROUNDING, Mismatch, PrecisionVerdict
from pytest_fullgraph.core.outcomes import (
    BREAK,
    ERROR,
    FAILING_OUTCOMES,
    MISMATCH,
    MODE_NEVER_COMPILES,
    NONDETERMINISTIC,
    OUTCOMES,
    PASS,
    SKIP,
    OutcomeKind,
    Stage,
    outcome_rank,
)
from pytest_fullgraph.core.recompiles import Guard, Variation

__all__ = [
    "BREAK",
    "DEFAULT_DTYPE",
    "DIVERGENCE",
    "ERROR",
    "FAILING_OUTCOMES",
    "MISMATCH",
    "MODE_NEVER_COMPILES",
    "NONDETERMINISTIC",
    "OUTCOMES",
    "PASS",
    "READABLE_SCHEMA_VERSIONS",
    "ROUNDING",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SKIP",
    "BreakRecord",
    "CheckKey",
    "CheckResult",
    "Frame",
    "Guard",
    "Mismatch",
    "OutcomeKind",
    "PrecisionVerdict",
    "Stage",
    "Variation",
    "add_note",
    "check_seconds",
    "first_line",
    "outcome_rank",
    "summary",
]

SCHEMA = "pytest_fullgraph/report"
#: Version 2 added ``run`` (exit status, interrupted), per-check ``device`` and merged-environment fields;
#: version 3 the ``dtype`` of each check (part of its identity), the ``skip`` outcome and ``mismatch.precision``;
#: version 4 each check's ``model_class``, ``parameters``, ``can_compile_fullgraph``, ``stage`` and ``artifact``,
#: and the derived
#: per-model ``models`` section (facts, verdicts by level, flag audit); version 5 each check's ``cudagraph_skips``
#: and the derived ``break_help`` section (PyTorch's hints by GB id); version 6 each break's ``cause`` (the break
#: inside a higher-order op such as ``while_loop``) and each check's ``peak_memory`` (CUDA, bytes); version 7 each
#: check's ``duration_s``; version 8 each check's ``model_file`` (where a class transformers does not export is
#: defined, for its reproducer); version 9 each check's ``variations`` (the second requests of its compiled object,
#: whether each recompiled, and the guards that failed). Optional fields bump it too: a reader refuses fields it
#: does not know, and the bump turns "malformed report" into "written by a newer pytest_fullgraph: upgrade". The
#: derived top-level ``known_issues`` (the known upstream issues the checks match) came without a bump: it is
#: recomputed from the checks, never read back, and readers pass over top-level fields they do not know.
SCHEMA_VERSION = 9
#: Versions this package reads; older reports load with the newer fields at their defaults (float32).
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)
#: The dtype a check runs in unless ``--fullgraph-dtype`` says otherwise, and the one older reports imply.
DEFAULT_DTYPE = "float32"


@dataclass(frozen=True)
class Frame:
    """One user-stack frame, its path shown relative to site-packages or the project root."""

    file: str
    line: int
    function: str
    source: str = ""

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class BreakRecord:
    """One graph break (or compile failure) located in the code under test and given an origin."""

    exception: str
    gb_type: str
    gb_id: str | None
    message: str
    file: str
    line: int
    function: str
    source: str
    origin: str
    root_cause: bool = True
    #: how often dynamo met this break in one run (restarts and resumed frames meet it again)
    hits: int = 1
    stack: list[Frame] = field(default_factory=list)
    #: the break inside a higher-order op (``while_loop``, ``cond``) that made dynamo give the op up: its news
    cause: BreakRecord | None = None

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "<unknown location>"

    def title(self) -> str:
        """The break's type, GB id and location: ``Data-dependent branching [GB0170] at conftest.py:8``."""
        gb = f" [{self.gb_id}]" if self.gb_id else ""
        where = f" at {self.where()}" if self.file else ""
        return f"{self.gb_type}{gb}{where}"

    def summary(self) -> str:
        function = f" in {self.function}" if self.function else ""
        text = f"{self.title()}{function} ({self.origin}): {self.message}"
        return f"{text}; inside it: {self.cause.summary()}" if self.cause is not None else text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BreakRecord:
        fields = dict(data)
        fields["stack"] = [Frame(**frame) for frame in fields.get("stack", [])]
        if fields.get("cause"):
            fields["cause"] = cls.from_dict(fields["cause"])
        return cls(**fields)



#: A check's identity: model, scenario, level, dtype.
CheckKey = tuple[str, str, str, str]


@dataclass
class CheckResult:
    """The outcome of one check, in JSON builtins so xdist and report files can carry it."""

    model: str
    scenario: str
    level: str
    backend: str
    max_new_tokens: int
    outcome: str
    message: str = ""
    first_break: BreakRecord | None = None
    breaks: list[BreakRecord] = field(default_factory=list)
    graph_count: int | None = None
    graph_ops: list[int] = field(default_factory=list)
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    mismatch: Mismatch | None = None
    eos_token_id: int | None = None
    #: where the check's tensors lived ("cpu", "cuda:0"); "" when it never reached a model
    device: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    #: wall seconds the whole check took, its phases and the work between them, the model's build excluded (a model
    #: is built once and shared by its checks); None when unmeasured: a crashed worker's check, reports before v7
    duration_s: float | None = None
    #: the dtype the model ran in; part of the check's identity
    dtype: str = DEFAULT_DTYPE
    #: the model's transformers class, parameter count and transformers' own ``_can_compile_fullgraph`` flag
    #: (the flag audit sets it beside the measured verdicts); empty / None when unknown
    model_class: str = ""
    parameters: int | None = None
    can_compile_fullgraph: bool | None = None
    #: the absolute path of the file defining the model's class when transformers does not export it (a conftest's
    #: subclass, a project's model): ``repro`` imports the class from there; "" for transformers' classes
    model_file: str = ""
    #: the last stage the check reached, as ``Stage.label`` spells it; where an error happened, so a model's eager
    #: failure is not read as a compile's
    stage: str = ""
    #: the saved artifact (``--fullgraph-artifacts``: a passing export check's program), "" when none
    artifact: str = ""
    #: inductor's reasons for running graphs of the compiled run without CUDA graphs (``mode="reduce-overhead"``
    #: levels on CUDA); empty when there were none or no CUDA graphs were asked for
    cudagraph_skips: list[str] = field(default_factory=list)
    #: the most CUDA memory the check's compiled run held at once, in bytes (``torch.cuda.max_memory_allocated``
    #: over that run); None off CUDA
    peak_memory: int | None = None
    #: the second requests made of a passing check's compiled object (``check.variations``), each with whether it
    #: recompiled and the guards that failed; empty when none were made
    variations: list[Variation] = field(default_factory=list)

    @property
    def check_id(self) -> str:
        return f"{self.model}-{self.scenario}-{self.level}-{self.dtype}"

    @property
    def key(self) -> CheckKey:
        return (self.model, self.scenario, self.level, self.dtype)

    def break_records(self) -> list[BreakRecord]:
        """Every recorded break, or the first one alone when no diagnostic pass ran."""
        return self.breaks or ([self.first_break] if self.first_break else [])

    @property
    def every_break_recorded(self) -> bool:
        """Whether ``breaks`` holds every break (a diagnostic pass ran), not the first alone."""
        return bool(self.breaks) or self.first_break is None

    def headline(self) -> str:
        """The message's first line, or the outcome when the message is empty."""
        return first_line(self.message) or self.outcome

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        fields = dict(data)
        if fields.get("first_break"):
            fields["first_break"] = BreakRecord.from_dict(fields["first_break"])
        fields["breaks"] = [BreakRecord.from_dict(b) for b in fields.get("breaks", [])]
        if fields.get("mismatch"):
            fields["mismatch"] = Mismatch.from_dict(fields["mismatch"])
        fields["variations"] = [Variation.from_dict(variation) for variation in fields.get("variations", [])]
        return cls(**fields)


def check_seconds(result: CheckResult) -> float:
    """The seconds a check took: its ``duration_s``, or for reports without it (before v7) its phases' sum."""
    return result.duration_s if result.duration_s is not None else sum(result.timings.values())
