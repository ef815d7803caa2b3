"""Beam search written the plain way, over the oracle model: lists of hypotheses, a loop per row, no batching.

It follows the rules of transformers' ``_beam_search`` (keep ``max(2, 1 + #EOS) x num_beams`` candidates; only
the top ``num_beams`` of them may finish; length penalty on finishing; the early-stop heuristic and modes) but
none of its tensor layout, so a bug in the layout that ``generate`` and our loop shared would show here. Scores
are float32 additions in ``generate``'s order, so they are compared exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pytest_fullgraph.models.oracle import SCORE_TABLE, oracle_key, oracle_scores

EXCLUDED = -1.0e9


@dataclass(frozen=True)
class Search:
    num_beams: int
    max_new_tokens: int
    eos: tuple[int, ...] = ()
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1


def _log_probs(prompt: list[int], pads: int, generated: list[int], vocab_size: int) -> torch.Tensor:
    """The oracle's processed scores after ``prompt`` (``pads`` of them left padding) + ``generated``."""
    tokens = torch.tensor(prompt + generated)
    positions = torch.clamp(torch.arange(len(tokens)) - pads, min=0)
    prefix_sum = oracle_key(tokens, positions).sum().to(torch.float32)
    table = torch.tensor(SCORE_TABLE, dtype=torch.float32)
    return torch.log_softmax(oracle_scores(prefix_sum, table, vocab_size), dim=-1)


def search_row(prompt: list[int], pads: int, search: Search, vocab_size: int) -> list[tuple[float, list[int]]]:
    """The finished beams of one row, best first: (score, generated tokens)."""
    width = search.num_beams
    keep = max(2, 1 + len(search.eos)) * width
    running: list[tuple[torch.Tensor, list[int]]] = [(torch.tensor(0.0 if beam == 0 else EXCLUDED), [])
                                                      for beam in range(width)]
    finished: list[tuple[torch.Tensor, list[int]]] = []
    improvable = True
    for step in range(search.max_new_tokens):
        candidates = []
        for score, generated in running:
            log_probs = _log_probs(prompt, pads, generated, vocab_size)
            candidates += [(score + log_probs[token], [*generated, token]) for token in range(vocab_size)]
        candidates = sorted(candidates, key=lambda candidate: -float(candidate[0]))[:keep]
        last = step == search.max_new_tokens - 1
        ends = [last or sequence[-1] in search.eos for _, sequence in candidates]
        full = len(finished) == width and search.early_stopping is True
        if improvable and not full:
            finished += [(score / ((step + 1) ** search.length_penalty), sequence)
                         for (score, sequence), end in zip(candidates[:width], ends[:width], strict=True) if end]
            finished = sorted(finished, key=lambda item: -float(item[0]))[:width]
        running = [candidate for candidate, end in zip(candidates, ends, strict=True) if not end][:width]
        if last:
            break
        never = search.early_stopping == "never" and search.length_penalty > 0
        best_length = search.max_new_tokens if never else step + 1
        best_running = running[0][0] / (best_length ** search.length_penalty)
        if len(finished) == width:
            improvable = improvable and bool(best_running > min(float(score) for score, _ in finished))
    return [(float(score), sequence) for score, sequence in finished]
