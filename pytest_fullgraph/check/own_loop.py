"""Whose fault a difference from ``generate`` is, for a level with a loop of its own: that loop run eagerly on the
same inputs tells the loop's (or the model's static-cache path's) difference from the compiler's. The first call of a
check and its second requests (``check.variations``) are judged the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_fullgraph.check.compare import REFERENCE_BLAMED, reference_against_recompute, static_cache_verdict
from pytest_fullgraph.check.state import CheckRun, explained_difference
from pytest_fullgraph.core.generation import seeded

if TYPE_CHECKING:
    import torch

    from pytest_fullgraph.core.mismatch import Mismatch


def own_loop_eagerly(run: CheckRun) -> torch.Tensor | None:
    """The level's own loop run eagerly on ``run``'s inputs and reference config; None for a level without one."""
    return seeded(run.seed, lambda: run.level.run_own_loop_eagerly(run.model, run.inputs, run.reference))


def own_loop_difference(run: CheckRun, eager: torch.Tensor, ours: torch.Tensor) -> tuple[Mismatch, str] | None:
    """Where the level's own loop run eagerly (``ours``) first differs from ``generate``'s ``eager`` tokens, and the
    verdict on why (the model's static-cache path, the default cache, or the loop); None when they are equal."""
    import torch

    if torch.equal(eager, ours):
        return None
    level, config = run.level, run.reference
    mismatch = explained_difference(run, eager, ours)
    verdict = static_cache_verdict(run.model, run.inputs, config, run.seed, eager, level.own_loop_blame,
                                   level.prompt_bound(run.inputs, config))
    if REFERENCE_BLAMED not in verdict:
        verdict += reference_against_recompute(run.model, run.inputs, config, run.seed, eager)
    return mismatch, verdict
