"""Sampling with a draft in one graph: assisted decoding and prompt lookup with ``do_sample=True`` drawing
``generate``'s random numbers, as many and in the same order.

Per step, with a draft model, ``generate`` draws one ``torch.multinomial`` per token the draft samples (in its own
``generate``, which stops at an EOS, an unsure token or its budget), then ``torch.rand_like`` over the draft's
length and one ``torch.multinomial`` for the target's next token (``_speculative_sampling``; with no draft, only
that last draw). Prompt lookup's draft has no scores: the target's tokens are one draw over the draft's length
plus one rows (``lookup.sampled_selection``). Those counts are data here, so every draw whose count varies sits in a
``torch.cond`` that runs it only where ``generate`` runs it. A graph draws from torch's generator as eager code
does (measured on CPU: compiled with ``aot_eager``, exported, and in a ``while_loop`` body, the draws and the
generator's state after them are eager's), so a seed gives ``generate``'s tokens. Uncompiled, a Python ``if``
takes the branch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pytest_fullgraph.loop.tracing import traced


def draw_if(pred: torch.Tensor, draw: Callable[[], torch.Tensor], otherwise: torch.Tensor) -> torch.Tensor:
    """``draw()`` where ``pred`` (0-d bool) holds, else ``otherwise`` (same shape and dtype), without drawing."""
    if traced():
        return torch.cond(pred, draw, lambda: otherwise.clone())
    return draw() if bool(pred) else otherwise


def sample_draft_token(scores: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """The draft model's token from its float32 scores (``1 x vocab``), drawn as its ``generate`` samples it, only
    where it still drafts; 0 elsewhere (a token past the draft's length, never kept)."""
    return draw_if(active, lambda: torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1)[:, 0],
                   torch.zeros(scores.shape[:1], dtype=torch.long, device=scores.device))


def draws_of_length(length: torch.Tensor, most: int, draw: Callable[[int], torch.Tensor],
                    otherwise: torch.Tensor) -> torch.Tensor:
    """``draw(length)`` (a 1-d draw of that many values) zero-padded to ``most``, or ``otherwise`` when ``length``
    is 0: one branch per length, so exactly one call of exactly ``generate``'s size runs, and the generator
    advances as in ``generate`` on any device."""
    drawn = otherwise
    for size in range(1, most + 1):
        def sized(size: int = size) -> torch.Tensor:
            return torch.nn.functional.pad(draw(size), (0, most - size))

        drawn = draw_if(length == size, sized, drawn)
    return drawn


def uniform_draws(count: torch.Tensor, size: int, device: torch.device) -> torch.Tensor:
    """``torch.rand(count)`` in the first ``count`` of ``size`` entries (0 after), as ``rand_like`` draws it."""
    return draws_of_length(count, size, lambda length: torch.rand(length, dtype=torch.float32, device=device),
                           torch.zeros(size, dtype=torch.float32, device=device))


def leading(accepted: torch.Tensor) -> torch.Tensor:
    """How many entries of a 1-d bool tensor hold before the first that does not (0-d)."""
    return torch.cumprod(accepted.long(), dim=0).sum()


def speculative_selection(tokens: torch.Tensor, count: torch.Tensor, logits: torch.Tensor, draft_scores: torch.Tensor,
                          running: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``_speculative_sampling`` over the draft buffer (a ``drafting.Selection`` once ``draft_scores`` is bound): the
    tokens the step keeps (the accepted draft, then the target's draw at ``valid - 1``; past it arbitrary) and how
    many. ``tokens``: the buffer (``K``), ``count`` of them drafted; ``logits``: the target's after the last token
    and each buffered one (``1 x K+1 x vocab``, float32); ``draft_scores``: the draft's (``K x vocab``). Nothing
    is drawn once generation has ended (``running`` false: the unrolled loop's steps past the end), so the
    generator is left as ``generate`` leaves it."""
    size = int(tokens.shape[0])
    q = torch.softmax(draft_scores, dim=-1)
    p = torch.softmax(logits[0], dim=-1)
    ratio = p[:size].gather(1, tokens[:, None])[:, 0] / q.gather(1, tokens[:, None])[:, 0]
    offsets = torch.arange(size, device=tokens.device)
    accepted = (uniform_draws(torch.where(running, count, 0), size, tokens.device) <= ratio) & (offsets < count)
    matches = leading(accepted)
    p_next = p.index_select(0, matches.reshape(1))
    residual = torch.clamp(p_next - q.index_select(0, matches.clamp(max=size - 1).reshape(1)), min=0)
    p_prime = torch.where(matches < count, residual / residual.sum(), p_next)
    drawn = draw_if(running, lambda: torch.multinomial(p_prime, num_samples=1)[0],
                    torch.zeros(1, dtype=torch.long, device=tokens.device))
    kept = torch.cat([tokens, drawn])
    selected = torch.where(torch.arange(size + 1, device=tokens.device) < matches, kept, drawn)
    return selected, matches + 1
