"""Where two runs' tokens first differ (``Mismatch``) and whether the difference is a rounding flip or a divergence
(``PrecisionVerdict``, judged against float64). Plain dataclasses of JSON builtins, as every result is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: Classes of a mismatch, from its float64 reference (see ``PrecisionVerdict``).
ROUNDING, DIVERGENCE = "rounding", "divergence"


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


def first_difference(eager: torch.Tensor, compiled: torch.Tensor, prompt_width: int) -> Mismatch:
    """The first (row, position) where two token tensors differ, shapes allowed to differ."""
    rows = min(eager.shape[0], compiled.shape[0])
    length = min(eager.shape[1], compiled.shape[1])
    for position in range(length):
        for row in range(rows):
            if int(eager[row, position]) != int(compiled[row, position]):
                return Mismatch(row, position, position - prompt_width, int(eager[row, position]),
                                int(compiled[row, position]), None, list(eager.shape), list(compiled.shape))
    longer = eager if eager.shape[1] > length else compiled
    token = int(longer[0, length]) if longer.shape[1] > length else None
    return Mismatch(0, length, length - prompt_width, token if longer is eager else None,
                    token if longer is compiled else None, None, list(eager.shape), list(compiled.shape))
