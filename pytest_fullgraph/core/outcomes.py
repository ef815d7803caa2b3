"""The outcome vocabulary a check's verdict is spelled in (``OUTCOMES``, least severe first) and the stages a check
goes through (``Stage``): defined once, so every rendering and the gate read them from here. No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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

