"""Per-model facts and verdicts, and the audit of transformers' hand-set ``_can_compile_fullgraph`` flag.

transformers compiles a model's forward inside ``generate`` only when its class sets ``_can_compile_fullgraph``;
the flag is set by hand and is conservative. The audit puts it beside what the checks measured: the ``forward``
level (transformers' own compiled forward) and the ``decode`` level (the model's forward compiled inside our
single-graph loop), and names every model where the two disagree, in both directions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_fullgraph.core.results import (
    BREAK,
    ERROR,
    MODE_NEVER_COMPILES,
    PASS,
    SKIP,
    CheckResult,
    Stage,
    outcome_rank,
)

#: The levels the audit reads: the flag governs ``forward``; ``decode`` shows whether the forward compiles anyway.
AUDIT_LEVELS = ("forward", "decode")
FLAG_BUT_BREAKS, COMPILES_ANYWAY = "flag True, forward does not compile", "flag False, compiles anyway"


@dataclass
class ModelSummary:
    """One model across a report: what it is, its worst outcome per level, and whether the flag agrees."""

    model: str
    model_class: str = ""
    parameters: int | None = None
    can_compile_fullgraph: bool | None = None
    #: level → the level's worst outcome over the model's scenarios and dtypes (skips count only when alone)
    verdicts: dict[str, str] = field(default_factory=dict)
    #: ``FLAG_BUT_BREAKS``, ``COMPILES_ANYWAY`` or "" (agrees, or not enough was measured to tell: a model that
    #: fails eagerly says nothing of its flag)
    disagreement: str = ""
    #: why, in one line: the first failing check's headline, or the passing levels
    evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _worst(results: list[CheckResult]) -> CheckResult | None:
    judged = [result for result in results if result.outcome != SKIP] or results
    return max(judged, key=lambda result: (outcome_rank(result.outcome), result.key), default=None)


def model_summaries(checks: list[CheckResult]) -> list[ModelSummary]:
    """One summary per model in ``checks``, sorted by name."""
    by_model: dict[str, list[CheckResult]] = {}
    for result in checks:
        by_model.setdefault(result.model, []).append(result)
    summaries = []
    for model, results in sorted(by_model.items()):
        summary = ModelSummary(model)
        for result in results:  # facts come from whichever check knew them
            summary.model_class = summary.model_class or result.model_class
            summary.parameters = summary.parameters if summary.parameters is not None else result.parameters
            if summary.can_compile_fullgraph is None:
                summary.can_compile_fullgraph = result.can_compile_fullgraph
        worst_by_level = {level: _worst([r for r in results if r.level == level]) for level in
                          dict.fromkeys(r.level for r in results)}
        summary.verdicts = {level: worst.outcome for level, worst in worst_by_level.items() if worst is not None}
        _audit(summary, results)
        summaries.append(summary)
    return summaries


def _compile_failed(result: CheckResult) -> bool:
    """A break, or an error of the compiled stage (a compiler crash, "nothing was compiled"); an error before it
    (eager generation, the build) says nothing of the flag, nor does a generation mode whose loop in
    transformers never calls the compiled forward (beam search)."""
    if result.outcome == ERROR and MODE_NEVER_COMPILES in result.message:
        return False
    return result.outcome == BREAK or (result.outcome == ERROR and Stage.of(result.stage) is Stage.COMPILED)


def _audit(summary: ModelSummary, results: list[CheckResult]) -> None:
    forward = [result for result in results if result.level == "forward"]
    decode = [result for result in results if result.level == "decode" and result.outcome != SKIP]
    failed = next((result for result in sorted(forward, key=lambda r: r.key) if _compile_failed(result)), None)
    if summary.can_compile_fullgraph is True and failed is not None:
        summary.disagreement = FLAG_BUT_BREAKS
        summary.evidence = f"{failed.check_id} {failed.outcome}: {failed.headline()}"
    elif summary.can_compile_fullgraph is False and decode and all(result.outcome == PASS for result in decode):
        summary.disagreement = COMPILES_ANYWAY
        summary.evidence = "every decode check is one graph with eager's tokens"


def disagreements(summaries: list[ModelSummary]) -> list[ModelSummary]:
    return [summary for summary in summaries if summary.disagreement]


def has_flags(summaries: list[ModelSummary]) -> bool:
    """Whether any model's flag is known (reports before schema version 4 do not carry it)."""
    return any(summary.can_compile_fullgraph is not None for summary in summaries)
