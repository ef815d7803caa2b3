"""Logits processors inside the ``while`` form's body, which sees a full-size sequence buffer with its valid length.

Processors are traced once, on the loop's full-size sequence buffer: those that read only the scores run
unchanged, those that read which tokens occurred see the unused tail filled with the last valid token (a
token already present, so the set they read is unchanged), and those that read the sequence's length are
re-expressed with the loop's length tensor. Anything else raises ``UnsupportedGeneration`` naming it. The
unrolled loop runs transformers' own processors (``process_unrolled``), but for the n-gram ban's device form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.loop.tracing import view

#: Processors that read only the scores: traced once, they do in every step what they do in ``generate``.
SCORE_ONLY = frozenset({
    "TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "TopHLogitsWarper", "MinPLogitsWarper",
    "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "InfNanRemoveLogitsProcessor",
    "LogitNormalization", "SuppressTokensLogitsProcessor",
})
#: Processors that read which tokens the sequence holds, not its length or order.
TOKEN_SET = frozenset({"RepetitionPenaltyLogitsProcessor"})
#: Processors that read only the sequence's last tokens (transformers' tensorised sequence bias, of which bad
#: words are the -inf case): given a fixed-width window of them, as many as their longest prefix.
TAIL_WINDOW = frozenset({"SequenceBiasLogitsProcessor", "NoBadWordsLogitsProcessor"})


def _masked(scores: torch.Tensor, token_ids: torch.Tensor, when: torch.Tensor) -> torch.Tensor:
    """``scores`` with ``token_ids`` set to -inf where ``when`` holds (``generate``'s EOS suppression)."""
    vocab = torch.arange(scores.shape[-1], device=scores.device)
    return torch.where(torch.isin(vocab, token_ids.to(scores.device)) & when, -math.inf, scores)


def _forced(scores: torch.Tensor, token_ids: Any, when: torch.Tensor) -> torch.Tensor:
    """Every token -inf but ``token_ids`` (0) where ``when`` holds (``generate``'s forced BOS/EOS)."""
    forced = torch.full_like(scores, -math.inf)
    forced[:, token_ids] = 0
    return torch.where(when, forced, scores)


#: Processors that read the sequence's length, given the length (a 0-d tensor) instead of a sequence of it.
LENGTH_RULES: dict[str, Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "MinLengthLogitsProcessor": lambda p, length, scores: _masked(scores, p.eos_token_id, length < p.min_length),
    "MinNewTokensLengthLogitsProcessor": lambda p, length, scores: _masked(
        scores, p.eos_token_id, length - p.prompt_length_to_skip < p.min_new_tokens),
    "SuppressTokensAtBeginLogitsProcessor": lambda p, length, scores: _masked(
        scores, p.begin_suppress_tokens, length == p.begin_index),
    "ForcedEOSTokenLogitsProcessor": lambda p, length, scores: _forced(scores, p.eos_token_id,
                                                                       length == p.max_length - 1),
    "ForcedBOSTokenLogitsProcessor": lambda p, length, scores: _forced(scores, p.bos_token_id, length == 1),
    "ExponentialDecayLengthPenalty": lambda p, length, scores: _decay_penalty(p, length, scores),
}


def _decay_penalty(processor: Any, length: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """``ExponentialDecayLengthPenalty`` with the length a tensor: EOS scores raised by
    ``|score| * (factor ** (length - start) - 1)`` past the start. The power is taken in float64, as Python's
    ``pow`` takes it in ``generate``, then used at the scores' dtype as Python's float is."""
    eos = processor.eos_token_id.to(scores.device)
    steps = (length - processor.regulation_start).to(torch.float64)
    growth = (torch.tensor(processor.regulation_factor, dtype=torch.float64, device=scores.device) ** steps - 1)
    eos_scores = scores[:, eos]
    penalty = (eos_scores.abs() * growth.to(scores.dtype)).masked_fill(~torch.isfinite(eos_scores), 0.0)
    raised = scores.index_add(1, eos, penalty)
    return torch.where(length > processor.regulation_start, raised, scores)


def banned_ngrams(ngram_size: int, sequence: torch.Tensor, length: torch.Tensor | int,
                  scores: torch.Tensor) -> torch.Tensor:
    """``NoRepeatNGramLogitsProcessor`` on the device: every token that would complete an n-gram already in
    ``sequence[:, :length]`` is -inf. transformers builds a Python dict of n-grams per row on the host; here each
    earlier window is compared with the last n - 1 tokens at once, so the graph does not depend on the tokens."""
    width = sequence.shape[1]
    positions = torch.arange(width, device=sequence.device)
    if ngram_size == 1:
        seen = (positions < length).expand_as(sequence)
        return scores.masked_fill(_token_hits(scores, sequence, seen), -math.inf)
    if width < ngram_size:
        return scores  # no n-gram fits yet (a static shape: the branch is taken at trace time)
    prefix = ngram_size - 1
    starts = positions[: width - prefix]
    tail = (length - prefix + torch.arange(prefix, device=sequence.device)).reshape(-1).clamp(min=0)
    last = sequence.index_select(1, tail)
    windows = sequence.unfold(1, prefix, 1)[:, : width - prefix]  # (batch, starts, prefix)
    # an n-gram counts once its last token is inside the valid length; the window ending at the tail is the
    # current prefix itself and completes nothing yet
    valid = starts + prefix < length
    matches = (windows == last[:, None, :]).all(-1) & valid
    return scores.masked_fill(_token_hits(scores, sequence[:, prefix:], matches), -math.inf)


def _token_hits(scores: torch.Tensor, tokens: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """A vocabulary mask of the ``tokens`` at the positions ``where`` holds (counted, so repeats and the
    positions left out cannot overwrite each other)."""
    counts = torch.zeros(scores.shape, dtype=torch.long, device=scores.device)
    counts.scatter_add_(1, tokens, where.long())
    return counts > 0


def process_unrolled(processors: Any, sequence: torch.Tensor, scores: torch.Tensor,
                     isolated: bool = False) -> torch.Tensor:
    """``processors(sequence, scores)`` for the unrolled loop, whose sequence has its true length: transformers'
    own code, but for processors that cannot be one graph as written (the n-gram ban builds Python dicts of
    the tokens), which run their device form.

    ``isolated``: run copies, so attribute writes stay out of the processors (the ``while`` form's prefill: a
    processor that re-assigns ``self.eos_token_id = self.eos_token_id.to(device)`` would otherwise hand the loop
    body a second name for one tensor, which ``while_loop`` refuses as input aliasing).
    """
    for processor in processors:
        if type(processor).__name__ == NGRAM:
            scores = banned_ngrams(processor.ngram_size, sequence, sequence.shape[1], scores)
        else:
            scores = (view(processor) if isolated else processor)(sequence, scores)
    return scores


def check_processors(processors: Any, where: str = "loop='while'", instead: str = "; use loop='unrolled'") -> None:
    """Refuse, naming it, a processor the loop cannot trace once for every step (``where``: the loop that runs
    ``process``, ``instead``: what the user can do)."""
    for processor in processors:
        name = type(processor).__name__
        if name not in SCORE_ONLY | TOKEN_SET | TAIL_WINDOW | set(LENGTH_RULES) | {NGRAM}:
            raise UnsupportedGeneration(f"{where} does not support {name}: it reads the growing sequence in "
                                        f"a way one traced step cannot repeat{instead}")


def process(processors: Any, buffer: torch.Tensor, length: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """``processors(sequence, scores)`` where the sequence is ``buffer[:, :length]``, without slicing to a
    data-dependent shape."""
    visible: torch.Tensor | None = None
    for processor in processors:
        name = type(processor).__name__
        if name in SCORE_ONLY:
            scores = processor(buffer, scores)
        elif name in TOKEN_SET:
            if visible is None:
                last = buffer.index_select(1, (length - 1).reshape(1))
                visible = torch.where(torch.arange(buffer.shape[1], device=buffer.device) < length, buffer, last)
            # a stand-in made in the step: the processor's no-op device moves (attribute writes) stay in it
            scores = view(processor)(visible, scores)
        elif name in TAIL_WINDOW:
            scores = view(processor)(tail(buffer, length, _longest_prefix(processor)), scores)
        elif name == NGRAM:
            scores = banned_ngrams(processor.ngram_size, buffer, length, scores)
        else:
            scores = LENGTH_RULES[name](processor, length, scores)
    return scores


NGRAM = "NoRepeatNGramLogitsProcessor"


def _longest_prefix(processor: Any) -> int:
    return max([len(sequence) - 1 for sequence in processor.sequence_bias] + [1])


def tail(buffer: torch.Tensor, length: torch.Tensor, width: int, filler: int = -1) -> torch.Tensor:
    """The last ``width`` valid tokens of each row of a buffer, ``filler`` (no token) before the sequence's
    start."""
    indices = (length - width + torch.arange(width, device=buffer.device)).reshape(-1)
    tokens = buffer.index_select(1, indices.clamp(min=0))
    return torch.where(indices >= 0, tokens, filler)
