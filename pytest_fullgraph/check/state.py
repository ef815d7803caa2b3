"""A check in progress (``CheckRun``): what ``run_check``'s phases share, and where two of its runs first differ,
explained. Its own module so that the eager phases (``run``) and the compiled one (``compiled``) share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.check.compare import eager_logit_gap, first_difference, precision_verdict, top1_steps
from pytest_fullgraph.core.outcomes import Stage

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.check.scenarios import Scenario
    from pytest_fullgraph.core.mismatch import Mismatch
    from pytest_fullgraph.core.results import CheckResult
    from pytest_fullgraph.levels.base import Level


@dataclass
class CheckRun:
    """A check in progress: what its phases share, and the phase it is in."""

    result: CheckResult
    model: PreTrainedModel
    scenario: Scenario
    level: Level
    inputs: dict[str, Any]
    diagnose: bool
    #: whether a pass calls its compiled object again with the level's variations (``check.variations``)
    second_requests: bool = True
    stage: Stage = Stage.EAGER
    #: the scenario's generation config, and the level's reference config built from it
    base: GenerationConfig | None = None
    config: GenerationConfig | None = None

    @property
    def seed(self) -> int:
        return self.scenario.seed

    @property
    def reference(self) -> GenerationConfig:
        """The level's reference config: set by the first phase, before any phase that runs the model again."""
        assert self.config is not None
        return self.config

    @property
    def prompt_width(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


def explained_difference(run: CheckRun, eager: torch.Tensor, other: torch.Tensor) -> Mismatch:
    """Where two runs first differ, eager's logit gap there and, for a greedy step, whether the difference
    is a rounding flip or a divergence (sampled steps depend on the random draw, which float64 cannot replay)."""
    mismatch = first_difference(eager, other, run.prompt_width)
    mismatch.eager_logit_gap = eager_logit_gap(run.model, run.inputs, run.reference, run.seed, mismatch)
    if top1_steps(run.reference):
        mismatch.precision = precision_verdict(run.model, run.inputs, eager, mismatch)
    elif run.result.dtype != "float32":
        mismatch.precision_note = ("rounding is judged at greedy steps only: a sampled token depends on the whole "
                                   "distribution, a beam's on its summed score against every other beam's, not on "
                                   "which of two logits is ahead")
    return mismatch
