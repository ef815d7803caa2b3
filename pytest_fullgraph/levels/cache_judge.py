"""How the cache level tells a wrong cache path from rounding: each cached path's per-step logits against
``generate(use_cache=False)``'s (recomputing every step: transformers PR #48289's reference), with a tolerance taken
from how far the model's own dtype lands from float64 when that step is recomputed from its prefix.

Measured (float32, 16 steps, every model type, the basic scenarios): a right cache path lands within 3x the dtype's own
distance from float64 on the tiny llama, gemma2, mistral and qwen2, and at most 16.5x (granitemoe_swa's padded rows at
the last step); the closest wrong one is 124x off (dots3_note's sliding layers, padded), most are 10^3 to 10^6 off
(gpt_neo's static cache, which slices its band mask by the cache's length: 6.4 at the first step). The bar, 64x the
dtype's own distance and at least 64 rounding steps, sits between the two. Where float64 cannot run the model (a model
that builds float32 tensors of its own), the tolerance is ``WITHOUT_FLOAT64_STEPS`` rounding steps, and the verdict
says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fullgraph.core.logits import StepOutputs, rounding_step

if TYPE_CHECKING:
    import torch

#: A path's logits are off at a step when they are further from recompute's than this many times the model's own
#: dtype lands from float64 there, and than ``TOLERANCE_STEPS`` rounding steps at the logits' magnitude.
TOLERANCE_TIMES_NOISE = 64.0
TOLERANCE_STEPS = 64.0
#: Without a float64 reference: rounding steps at the logits' magnitude (about 1e-3 at logits of 10 in float32).
WITHOUT_FLOAT64_STEPS = 1024.0
#: transformers PR #48289: ids are compared up to the first step where any row's top two *scores* are this close.
PR_48289_NEAR_TIE = 2e-3


@dataclass(frozen=True)
class Off:
    """Where a path's values first leave the reference's by more than rounding: the step (or layer), the row, how far,
    how far the dtype's own recompute is from float64 there (None: not measured), and the tolerance."""

    index: int
    row: int
    distance: float
    noise: float | None
    tolerance: float

    def describe(self, dtype: str) -> str:
        own = (f"{dtype}'s own recompute is {self.noise:.3g} off float64" if self.noise is not None else
               f"float64 could not run the model, so the tolerance is {WITHOUT_FLOAT64_STEPS:g} {dtype} rounding steps")
        return f"{self.distance:.3g} off recompute's (row {self.row}), where {own} (tolerance {self.tolerance:.3g})"


def tolerance(noise: float | None, magnitude: float, dtype: str) -> float:
    """How far from the reference a right path may land: a multiple of the dtype's own distance from float64, at least
    a few dozen rounding steps at the values' magnitude; without a float64 measure, a thousand rounding steps."""
    step = rounding_step(dtype, magnitude if math.isfinite(magnitude) else 0.0)
    if noise is None:
        return WITHOUT_FLOAT64_STEPS * step
    return max(TOLERANCE_TIMES_NOISE * noise, TOLERANCE_STEPS * step)


def noise_of(own: torch.Tensor, exact: torch.Tensor) -> float | None:
    """How far the dtype's values land from float64's over the rows where float64 is finite (a fully masked padding
    row makes NaN in float64 in some models: gemma2); None when no row is."""
    rows = exact.shape[0]
    finite = exact.reshape(rows, -1).isfinite().all(dim=-1)
    if not bool(finite.any()):
        return None
    return float((own.double() - exact).reshape(rows, -1)[finite].abs().max())


def first_off(values: Sequence[torch.Tensor], reference: Sequence[torch.Tensor], noises: Sequence[float | None],
              dtype: str) -> Off | None:
    """The first index whose ``values`` (rows x features) leave ``reference`` by more than the tolerance its noise
    sets there; None when every index is within it."""
    for index, (value, truth, noise) in enumerate(zip(values, reference, noises, strict=False)):
        # one row per prompt, whatever else a model keeps per position (hy_v4's hidden states have streams)
        distance = (value.double() - truth.double()).reshape(value.shape[0], -1).abs().amax(dim=-1)
        allowed = tolerance(noise, float(truth.double().abs().max()), dtype)
        row = int(distance.argmax())
        if float(distance[row]) > allowed:
            return Off(index, row, float(distance[row]), noise, allowed)
    return None


def step_noises(exact: Sequence[StepOutputs] | None, own: Sequence[StepOutputs] | None,
                steps: int) -> list[float | None]:
    """Per step, how far the dtype's recompute lands from float64's (None where either could not run)."""
    if exact is None or own is None:
        return [None] * steps
    return [noise_of(mine.logits, truth.logits) for mine, truth in zip(own, exact, strict=False)] + \
        [None] * max(0, steps - len(exact))


def layer_noises(exact: StepOutputs | None, own: StepOutputs | None, layers: int) -> list[float | None]:
    """Per hidden state at one step, how far the dtype's recompute lands from float64's."""
    if exact is None or own is None or len(exact.hidden) != layers or len(own.hidden) != layers:
        return [None] * layers
    return [noise_of(mine, truth) for mine, truth in zip(own.hidden, exact.hidden, strict=True)]


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
