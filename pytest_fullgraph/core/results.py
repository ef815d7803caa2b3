"""What a check produces: the outcome vocabulary, ``CheckResult``, ``Mismatch`` and ``BreakRecord``.

Plain dataclasses of JSON builtins, so xdist can ship them and report files can hold them. No torch import:
``python -m pytest_fullgraph report ...`` reads and renders reports without loading torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

SCHEMA = "pytest_fullgraph/report"
#: Version 2 added ``run`` (exit status, interrupted), per-check ``device`` and merged-environment fields;
#: version 3 the ``dtype`` of each check (part of its identity), the ``skip`` outcome and ``mismatch.precision``;
#: version 4 each check's ``model_class``, ``parameters``, ``can_compile_fullgraph``, ``stage`` and ``artifact``,
#: and the derived
#: per-model ``models`` section (facts, verdicts by level, flag audit); version 5 each check's ``cudagraph_skips``
#: and the derived ``break_help`` section (PyTorch's hints by GB id); version 6 each break's ``cause`` (the break
#: inside a higher-order op such as ``while_loop``) and each check's ``peak_memory`` (CUDA, bytes); version 7 each
#: check's ``duration_s``; version 8 each check's ``model_file`` (where a class transformers does not export is
#: defined, for its reproducer). Optional fields bump it too: a reader refuses fields it does not know, and the bump
#: turns "malformed report" into "written by a newer pytest_fullgraph: upgrade". The derived top-level
#: ``known_issues`` (the known upstream issues the checks match) came without a bump: it is recomputed from the
#: checks, never read back, and readers pass over top-level fields they do not know.
SCHEMA_VERSION = 8
#: Versions this package reads; older reports load with the newer fields at their defaults (float32).
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8)


@dataclass(frozen=True)
class OutcomeKind:
    """One outcome of a check: its severity (for the baseline gate) and how reports show it."""

    name: str
    rank: int
    cell: str
    short: str
    meaning: str


#: The outcome vocabulary, defined once, least severe first; every rendering and the gate read it from here.
OUTCOMES: dict[str, OutcomeKind] = {kind.name: kind for kind in (
    OutcomeKind("pass", 0, "✅ pass", "pass", "compiled tokens equal eager tokens (torch.equal)"),
    OutcomeKind("skip", 1, "⏭️ skip", "skip",
                "the combination cannot run here (e.g. no kernel for the dtype on this device); nothing was judged"),
    OutcomeKind("nondeterministic", 2, "⚠️ nondet", "NONDET",
                "eager generation differs from itself, so exactness cannot be judged"),
    OutcomeKind("break", 3, "⛔ break", "break", "fullgraph=True hit a graph break, or the one-graph rule failed"),
    OutcomeKind("mismatch", 4, "❌ mismatch", "MISMATCH", "compiled tokens differ from eager tokens"),
    OutcomeKind("error", 5, "💥 error", "ERROR",
                "the model failed to build, eager generation crashed, the compiler crashed or a worker died"),
)}
PASS, SKIP, NONDETERMINISTIC, BREAK, MISMATCH, ERROR = OUTCOMES
#: The dtype a check runs in unless ``--fullgraph-dtype`` says otherwise, and the one older reports imply.
DEFAULT_DTYPE = "float32"
#: Classes of a mismatch, from its float64 reference (see ``PrecisionVerdict``).
ROUNDING, DIVERGENCE = "rounding", "divergence"
#: Outcomes that fail a test whatever the strictness (a break is xfail unless strict).
FAILING_OUTCOMES = (MISMATCH, ERROR, NONDETERMINISTIC)
#: What the ``forward`` level's error says when transformers' loop for the generation mode (beam search) never
#: calls the compiled forward: a fact of transformers' generation code, not of the model or its flag.
MODE_NEVER_COMPILES = "calls the model's forward uncompiled"


class Stage(Enum):
    """The phases of a check, in the order it goes through them; ``CheckResult.stage`` names the last one reached,
    so an error says where it happened and the flag audit can tell a model's eager failure from a compile's."""

    BUILD = "build"
    EAGER = "eager generation"
    #: the level's own loop run eagerly; its label names the loop
    OWN_LOOP = "eager generation by"
    COMPILED = "compiled generation"

    def label(self, own_loop: str | None = None) -> str:
        """How reports spell the stage: ``eager generation by fullgraph_generate(loop='while')``."""
        return f"{self.value} {own_loop or 'the level'}" if self is Stage.OWN_LOOP else self.value

    @classmethod
    def of(cls, label: str) -> Stage | None:
        """The stage a report's label names; None for "" (a check that never started) or an unknown label."""
        for stage in (cls.BUILD, cls.EAGER, cls.COMPILED):
            if label == stage.value:
                return stage
        return cls.OWN_LOOP if label.startswith(cls.OWN_LOOP.value + " ") else None


def outcome_rank(outcome: str) -> int:
    """Severity for the gate; an outcome this version does not know ranks worst."""
    kind = OUTCOMES.get(outcome)
    return kind.rank if kind else len(OUTCOMES)


def first_line(text: object) -> str:
    """The first non-blank line of a message or exception, stripped; "" when there is none."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def add_note(error: BaseException, note: str) -> None:
    """Our diagnosis on someone else's exception, its traceback (and so its site) kept; ``add_note`` of Python
    3.11, written so 3.10 has it too."""
    vars(error)["__notes__"] = [*getattr(error, "__notes__", []), note]


def summary(error: BaseException) -> str:
    """An exception's first line and the notes our code added to it: what a report's message shows."""
    notes = [first_line(note) for note in getattr(error, "__notes__", ())]
    head = first_line(error)
    if notes:  # the note says what the first line's dump meant ("... tree spec:", "Real spec TreeSpec(...)")
        head = head.rstrip(":") if len(head) <= _LONGEST_HEAD else f"{head[:_LONGEST_HEAD].rstrip()} ..."
    return "; ".join(part for part in (head, *notes) if part)


#: how much of an exception's first line a message keeps when our note explains it
_LONGEST_HEAD = 160


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


@dataclass
class PrecisionVerdict:
    """Is a token difference a rounding flip or a divergence? Judged at the first differing step from the
    next-token logits recomputed in float64 from the same weights and the same prefix.

    ``rounding``: the two tokens are tied within the rounding of the check's dtype there (their float64 gap
    is no larger than twice how far the dtype's logits are from float64 at this step, nor than one rounding
    step of the dtype at that magnitude); ``divergence``: one token is clearly ahead.
    """

    kind: str
    dtype: str
    #: float64 reference logits of the reference run's token and of the other run's token
    reference_logit: float
    other_logit: float
    #: reference_logit - other_logit, in float64
    reference_gap: float
    #: one rounding step (unit in the last place) of ``dtype`` at the logits' magnitude
    rounding_step: float
    #: largest difference between the dtype's own logits and float64 at this step (over the vocabulary):
    #: the rounding that piled up through the layers
    noise: float

    @property
    def gap_in_steps(self) -> float:
        return abs(self.reference_gap) / self.rounding_step if self.rounding_step else float("inf")

    def describe(self) -> str:
        return (f"float64 reference logits {self.reference_logit:.6g} vs {self.other_logit:.6g}, gap "
                f"{self.reference_gap:.3g} = {self.gap_in_steps:.3g} {self.dtype} rounding steps there ({self.dtype} "
                f"off float64 by up to {self.noise:.3g}): {self.kind}")


@dataclass
class Mismatch:
    """Where compiled tokens first differ from eager ones, and how close eager's choice was there."""

    row: int
    position: int
    step: int
    eager_token: int | None
    compiled_token: int | None
    eager_logit_gap: float | None = None
    eager_shape: list[int] = field(default_factory=list)
    compiled_shape: list[int] = field(default_factory=list)
    #: rounding flip or divergence, when the tokens (not only the shapes) differ and float64 could judge it
    precision: PrecisionVerdict | None = None
    #: why ``precision`` is None where a verdict was sought (a sampled step, a failed float64 reference)
    precision_note: str = ""

    @property
    def kind(self) -> str | None:
        return self.precision.kind if self.precision else None

    def describe(self, other: str = "compiled") -> str:
        """``other`` names what was compared with eager: the compiled run, or our loop run eagerly."""
        gap = "unknown" if self.eager_logit_gap is None else f"{self.eager_logit_gap:.4g}"
        text = (f"row {self.row}, position {self.position} (new token {self.step}): eager {self.eager_token}, "
                f"{other} {self.compiled_token}; eager top-1/top-2 logit gap there {gap}")
        if self.eager_shape != self.compiled_shape:
            text += f"; shapes eager {tuple(self.eager_shape)} vs {other} {tuple(self.compiled_shape)}"
        if self.precision is not None:
            text += f"; {self.precision.describe()}"
        elif self.precision_note:
            text += f"; {self.precision_note}"
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mismatch:
        fields = dict(data)
        if fields.get("precision"):
            fields["precision"] = PrecisionVerdict(**fields["precision"])
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
        return cls(**fields)


def check_seconds(result: CheckResult) -> float:
    """The seconds a check took: its ``duration_s``, or for reports without it (before v7) its phases' sum."""
    return result.duration_s if result.duration_s is not None else sum(result.timings.values())
