"""A compiled difference judged against float64, with the scripted model: the static cache is blamed only for a
divergence, and each difference gets its float64 class."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.check.scripted import DIFFERENT, FakeLevel, ScriptedModel, check


class ScriptedForward(ScriptedModel):
    """Also runs a forward: its next-token logits make tokens 12 and 99 tied (in float64) or far apart."""

    def __init__(self, *, tied: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tied, self.dtype = tied, torch.float32

    def to(self, dtype: torch.dtype) -> ScriptedForward:
        self.dtype = dtype
        return self

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, use_cache: bool) -> Any:
        logits = torch.zeros(1, input_ids.shape[1], 128, dtype=torch.float64)
        logits[0, -1, 12], logits[0, -1, 99] = 5.0, 5.0 if self.tied else 1.0
        return SimpleNamespace(logits=logits.to(self.dtype))


@pytest.mark.parametrize(("tied", "kind", "verdict"), [
    (True, "rounding", "in float32 the two caches round differently, which shows neither the model's static-cache "
                       "path nor the loop wrong"),
    (False, "divergence", "the model's static-cache path is wrong, not the loop"),
])
def test_static_cache_is_blamed_only_for_a_divergence(tied: bool, kind: str, verdict: str) -> None:
    result = check(ScriptedForward(tied=tied, static=DIFFERENT), FakeLevel(own_loop=DIFFERENT))
    assert result.outcome == "mismatch" and result.mismatch is not None
    assert result.mismatch.kind == kind and result.message.endswith(verdict)
    assert f"float64 reference logits 5 vs {5 if tied else 1}" in result.message


def test_a_compiled_difference_gets_its_float64_class() -> None:
    result = check(ScriptedForward(tied=True), FakeLevel(compiled=DIFFERENT))
    assert result.mismatch is not None and result.mismatch.precision is not None
    assert (result.mismatch.kind, result.mismatch.precision.reference_gap) == ("rounding", 0.0)
    assert result.message.endswith("gap 0 = 0 float32 rounding steps there (float32 off float64 by up to 0): "
                                   "rounding")
