"""How the cache level tells a wrong cache path from rounding: each path's per-step logits against float64
recomputing every step, with a tolerance taken from how far the model's own dtype lands from float64 there.

Measured (float32, 16 steps, tiny llama, gemma2, gpt_neo, mistral, qwen2): the default cache, recompute
(``use_cache=False``) and the static cache land 1e-6 to 3e-5 from float64 at every step, within 3x the dtype's own
full recompute; gpt_neo's static cache, which slices its band mask by the cache's length, lands 6.4 off at the first
step and 7.7 to 15 after. The tolerance (16x the dtype's own distance, at least 64 rounding steps) sits more than
four orders of magnitude from both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fullgraph.core.logits import StepOutputs, rounding_step

if TYPE_CHECKING:
    import torch

#: A path's logits are off at a step when they land further from float64 than this many times the model's own
#: dtype does there (its full recompute), and than ``TOLERANCE_STEPS`` rounding steps at the logits' magnitude.
TOLERANCE_TIMES_NOISE = 16.0
TOLERANCE_STEPS = 64.0
#: transformers PR #48289: ids are compared up to the first step where any row's top two *scores* are this close.
PR_48289_NEAR_TIE = 2e-3


@dataclass(frozen=True)
class Off:
    """Where a path's values first leave float64 by more than rounding: the step (or layer), the row, how far the
    path is and how far the dtype's own recompute is there, and the tolerance that separated them."""

    index: int
    row: int
    distance: float
    noise: float
    tolerance: float

    def describe(self, dtype: str) -> str:
        return (f"{self.distance:.3g} off float64 (row {self.row}), where {dtype}'s own recompute is "
                f"{self.noise:.3g} off (tolerance {self.tolerance:.3g})")


def tolerance(noise: float, magnitude: float, dtype: str) -> float:
    """How far from float64 a right path may land: a multiple of the dtype's own distance, at least a few dozen
    rounding steps at the values' magnitude."""
    return max(TOLERANCE_TIMES_NOISE * noise, TOLERANCE_STEPS * rounding_step(dtype, magnitude))


def first_off(values: Sequence[torch.Tensor], exact: Sequence[torch.Tensor], own: Sequence[torch.Tensor],
              dtype: str) -> Off | None:
    """The first index whose ``values`` (rows x features) leave ``exact`` (float64) by more than the tolerance that
    ``own`` (the dtype's recompute of the same) sets there; None when every index is within it."""
    for index, (value, truth, mine) in enumerate(zip(values, exact, own, strict=False)):
        distance = (value.double() - truth).abs().amax(dim=-1)
        noise = float((mine.double() - truth).abs().max())
        allowed = tolerance(noise, float(truth.abs().max()), dtype)
        row = int(distance.argmax())
        if float(distance[row]) > allowed:
            return Off(index, row, float(distance[row]), noise, allowed)
    return None


def first_off_step(step_logits: Sequence[torch.Tensor], exact: Sequence[StepOutputs], own: Sequence[StepOutputs],
                   dtype: str, steps: int) -> Off | None:
    """The first of the first ``steps`` generation steps where a path's logits are off float64."""
    count = min(steps, len(step_logits), len(exact), len(own))
    return first_off(step_logits[:count], [step.logits for step in exact[:count]],
                     [step.logits for step in own[:count]], dtype)


def first_off_layer(hidden: Sequence[torch.Tensor], exact: StepOutputs, own: StepOutputs, dtype: str) -> Off | None:
    """At a step that is off, the first hidden state (embeddings first, then each layer's output) that is off."""
    if not hidden or len(hidden) != len(exact.hidden) or len(own.hidden) != len(exact.hidden):
        return None
    return first_off(hidden, exact.hidden, own.hidden, dtype)


def near_tie_step(scores: Sequence[torch.Tensor]) -> tuple[int, float] | None:
    """PR #48289's rule on a run's per-step scores: the first step where some row's top two are within
    ``PR_48289_NEAR_TIE``, and that gap; None when no step is."""
    for step, step_scores in enumerate(scores):
        top = step_scores.double().topk(2, dim=-1).values
        gap = float((top[:, 0] - top[:, 1]).min())
        if gap <= PR_48289_NEAR_TIE:
            return step, gap
    return None


def pr_48289_says(scores: Sequence[torch.Tensor], step: int) -> str:
    """What transformers PR #48289's test would make of a token difference at ``step``."""
    tie = near_tie_step(scores)
    if tie is not None and tie[0] <= step:
        return (f"PR #48289's rule stops comparing ids at step {tie[0]}, where a row's top two scores are "
                f"{tie[1]:.3g} apart (<= {PR_48289_NEAR_TIE:g}): it would not see this difference")
    return f"PR #48289's rule (top two scores within {PR_48289_NEAR_TIE:g}) finds no near-tie up to it: it would fail"
