"""Where a sampling step's randomness comes from: torch's generator (``torch.multinomial``, as ``generate`` draws),
or noise given to an exported program as an input, for runtimes that have no generator (ExecuTorch).

``torch.multinomial(probs, k)`` without replacement draws ``q``, Exp(1) noise of ``probs``' shape, from the
generator and returns the ``k`` largest of ``probs / q`` (the arg-max for ``k = 1``); measured equal, same seed,
on 200 draws each for k = 1 and k = 8 (``tests/loop/test_sampling_noise.py`` keeps checking k = 1 and 5 on the
installed torch). A program fed the
same draws, made on the host from the same generator state, one per step in the order ``generate`` makes them, so
picks exactly ``generate``'s tokens, and its only random operator is gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pytest_fullgraph.core.generation import UnsupportedGeneration

if TYPE_CHECKING:
    import torch

#: The noise of the steps still to sample, innermost program last, while a program that takes its noise is traced
#: or run; empty: draw. A plain list, not a ContextVar: dynamo traces a read of it (``if not _ACTIVE``) and would
#: break on ``ContextVar.get`` in every compiled sampling loop.
_ACTIVE: list[list[torch.Tensor]] = []


@contextlib.contextmanager
def noise_from(noise: torch.Tensor) -> Iterator[None]:
    """Sampling steps inside take ``noise[0]``, ``noise[1]``, ... instead of drawing."""
    _ACTIVE.append(list(noise.unbind(0)))
    try:
        yield
    finally:
        _ACTIVE.pop()


def multinomial(probs: torch.Tensor, num_samples: int) -> torch.Tensor:
    """``torch.multinomial(probs, num_samples)`` (without replacement), from the given noise when there is some."""
    import torch

    if not _ACTIVE:
        return torch.multinomial(probs, num_samples=num_samples)
    steps = _ACTIVE[-1]
    if not steps:
        raise UnsupportedGeneration("the noise input holds fewer steps than the program samples")
    ratio = probs / steps.pop(0)
    if num_samples == 1:
        return ratio.argmax(dim=-1, keepdim=True)
    return ratio.topk(num_samples, dim=-1).indices


def draws(steps: int, shape: Sequence[int], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``steps`` draws of Exp(1) noise of ``shape``, one after another from torch's generator as ``generate``'s
    ``torch.multinomial`` calls make them, stacked: the noise input of a program exported with ``noise_input``."""
    import torch

    return torch.stack([torch.empty(tuple(shape), dtype=dtype, device=device).exponential_(1)
                        for _ in range(steps)])
