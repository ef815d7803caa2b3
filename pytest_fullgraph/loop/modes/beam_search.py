"""One step of beam search as tensor work only: ``generate``'s ``_beam_search`` bookkeeping without its host loop.

``generate`` already keeps its beams in fixed-size tensors (running and finished beams, ``batch x num_beams x
max_length``); what keeps it on the host is its loop condition and Python-int lengths. Here a step takes the
length as a Python int (the unrolled loop) or a 0-d tensor (the ``while_loop`` body), writes with ``index_copy``
instead of slicing, and leaves every decision that ``generate`` makes once (beams to keep, early-stopping mode)
to the plan. The arithmetic is ``generate``'s, in its order, so scores come out bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from pytest_fullgraph.loop import sampling_noise
from pytest_fullgraph.loop.modes.table import PlanRequest

#: what ``generate`` adds to a score to rule a beam out
EXCLUDED = -1.0e9
#: a length as the unrolled loop knows it (a Python int) or the ``while_loop`` body (a 0-d tensor)
Length = int | torch.Tensor


@dataclass(frozen=True)
class BeamSettings:
    """What beam search decides on the host (``generate``'s ``_beam_search`` reads them from the config)."""

    num_beams: int
    num_return_sequences: int
    length_penalty: float
    #: True, False or "never", as ``GenerationConfig.early_stopping``
    early_stopping: bool | str
    #: candidates kept per row each step: enough that ``num_beams`` stay unfinished if every top one ends
    beams_to_keep: int
    #: what unwritten positions of the output hold (``generate``'s ``output_fill_value``)
    fill: int


class Beams(NamedTuple):
    """The beams between steps, each ``batch x num_beams`` (x positions): running and finished."""

    running_sequences: torch.Tensor
    running_scores: torch.Tensor
    #: the flat row each generated token's beam came from, -1 where none yet (``generate``'s ``beam_indices``)
    running_indices: torch.Tensor
    sequences: torch.Tensor
    scores: torch.Tensor
    indices: torch.Tensor
    finished: torch.Tensor
    #: per row: whether a running beam may still beat the worst finished one
    improvable: torch.Tensor


def beam_settings(request: PlanRequest) -> BeamSettings | None:
    """For a config with beams, the settings ``_beam_search`` derives from it before its loop, as it derives them."""
    config, eos, pad = request.config, request.eos, request.pad
    if int(config.num_beams) <= 1:
        return None
    eos_count = int(eos.shape[0]) if eos is not None else 0
    num_beams = int(config.num_beams)
    # generate's `pad_token_id or eos_token_id[0]` (a pad id of 0 counts as none), -1 without EOS ids
    fill = -1 if eos is None else int(pad) if pad is not None and bool(pad) else int(eos[0])
    return BeamSettings(num_beams, int(config.num_return_sequences), float(config.length_penalty),
                        config.early_stopping, max(2, 1 + eos_count) * num_beams, fill)


def initial_beams(input_ids: torch.Tensor, settings: BeamSettings, max_new_tokens: int) -> Beams:
    """Every beam holds the prompt; only the first may be extended at the first step (the others score -1e9),
    so the beams do not all pick the same tokens."""
    beams = settings.num_beams
    batch = input_ids.shape[0] // beams
    running = torch.cat([input_ids, input_ids.new_full((input_ids.shape[0], max_new_tokens), settings.fill)], 1)
    running = running.reshape(batch, beams, -1)
    scores = torch.zeros((batch, beams), dtype=torch.float32, device=input_ids.device)
    scores[:, 1:] = EXCLUDED
    indices = torch.full((batch, beams, max_new_tokens), -1, dtype=torch.int32, device=input_ids.device)
    return Beams(running, scores, indices, running.clone(), torch.full_like(scores, EXCLUDED), indices.clone(),
                 torch.zeros((batch, beams), dtype=torch.bool, device=input_ids.device),
                 torch.ones((batch, 1), dtype=torch.bool, device=input_ids.device))


def gather_beams(tensor: torch.Tensor, picked: torch.Tensor) -> torch.Tensor:
    """``tensor[row, picked[row, j], ...]`` for every row and j."""
    while picked.dim() < tensor.dim():
        picked = picked.unsqueeze(-1)
    return torch.take_along_dim(tensor, picked, dim=1)


def write_at(buffer: torch.Tensor, position: Length, values: torch.Tensor) -> torch.Tensor:
    """``buffer`` with ``values`` (``batch x beams``) written at ``position`` of its last dimension."""
    index = torch.as_tensor(position, device=buffer.device).reshape(1)
    return buffer.index_copy(2, index, values.to(buffer.dtype)[:, :, None])


def candidates(settings: BeamSettings, do_sample: bool, beams: Beams, log_probs: torch.Tensor,
               length: Length, prompt_length: Length) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``beams_to_keep`` best (or sampled) continuations of each row over all its beams: their scores,
    sequences (the token written at ``length``) and beam indices, as ``_get_top_k_continuations`` picks them."""
    batch, width = beams.running_scores.shape
    totals = log_probs.reshape(batch, width, -1) + beams.running_scores[:, :, None]
    totals = totals.reshape(batch, -1)
    if do_sample:
        picked = sampling_noise.multinomial(torch.softmax(totals, dim=-1), num_samples=settings.beams_to_keep)
        scores, order = torch.gather(totals, 1, picked).sort(dim=-1, descending=True)
        picked = picked.gather(-1, order)
    else:
        scores, picked = torch.topk(totals, k=settings.beams_to_keep)
    vocab = totals.shape[-1] // width
    source = picked // vocab
    sequences = write_at(gather_beams(beams.running_sequences, source), length, picked % vocab)
    rows = source + torch.arange(batch, device=source.device).reshape(-1, 1) * width
    indices = write_at(gather_beams(beams.running_indices, source), length - prompt_length, rows)
    return scores, sequences, indices


def advance(settings: BeamSettings, beams: Beams, scores: torch.Tensor, sequences: torch.Tensor,
            indices: torch.Tensor, hits: torch.Tensor, divisor: Callable[[Length], Any], new_tokens: Length,
            best_length: Length) -> tuple[Beams, torch.Tensor]:
    """The beams after a step whose candidates are given, and whether ``generate`` would run another step.

    ``hits``: which candidates meet a stopping criterion; ``divisor(n)``: ``n ** length_penalty`` as ``generate``
    computes it; ``new_tokens``: tokens generated after this step; ``best_length``: the length the early-stop
    heuristic assumes the best running beam reaches (``best_hypothetical_length``).
    """
    width = settings.num_beams
    open_scores = scores + hits.to(torch.float32) * EXCLUDED
    keep = torch.topk(open_scores, k=width)[1]
    running = (gather_beams(sequences, keep), gather_beams(open_scores, keep), gather_beams(indices, keep))
    sequences_, scores_, indices_, finished = _finished(settings, beams, scores, sequences, indices, hits,
                                                        divisor(new_tokens))
    best_running = running[1][:, :1] / divisor(best_length)
    worst_finished = torch.where(finished, torch.min(scores_, dim=1, keepdim=True)[0], EXCLUDED)
    improvable = beams.improvable & torch.any(best_running > worst_finished, dim=-1, keepdim=True)
    go_on = torch.any(improvable) & ~torch.all(hits)
    if settings.early_stopping is True:
        go_on = go_on & ~torch.all(finished)
    return Beams(*running, sequences_, scores_, indices_, finished, improvable), go_on


def _finished(settings: BeamSettings, beams: Beams, scores: torch.Tensor, sequences: torch.Tensor,
              indices: torch.Tensor, hits: torch.Tensor,
              divisor: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The finished beams, merged with the candidates among the top ``num_beams`` that just finished, scored
    with the length penalty (``_update_finished_beams``: its additions in its order, for the same floats)."""
    width = settings.num_beams
    just_finished = hits & (torch.arange(hits.shape[1], device=hits.device) < width)[None, :]
    scores = scores / divisor
    if settings.early_stopping is True:  # a row whose finished beams are all set takes no more
        scores = scores + torch.all(beams.finished, dim=-1, keepdim=True).to(torch.float32) * EXCLUDED
    scores = scores + (~beams.improvable).to(torch.float32) * EXCLUDED
    scores = scores + (~just_finished) * EXCLUDED
    merged_scores = torch.cat((beams.scores, scores), dim=1)
    best = torch.topk(merged_scores, k=width)[1]
    return (gather_beams(torch.cat((beams.sequences, sequences), dim=1), best), gather_beams(merged_scores, best),
            gather_beams(torch.cat((beams.indices, indices), dim=1), best),
            gather_beams(torch.cat((beams.finished, just_finished), dim=1), best))


def kept(before: Beams, after: Beams, running: torch.Tensor) -> Beams:
    """``after`` where ``generate`` would still have run this step (``running``, 0-d), else ``before``: the
    unrolled loop runs every step, and the ones past ``generate``'s stop must change nothing."""
    return Beams(*(torch.where(running, new, old) for new, old in zip(after, before, strict=True)))


def returned(beams: Beams, settings: BeamSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best ``num_return_sequences`` finished beams of each row, flattened as ``generate`` returns them:
    sequences, their scores and beam indices, still at full length (``trimmed_beams`` cuts them)."""
    count = settings.num_return_sequences

    def flat(tensor: torch.Tensor) -> torch.Tensor:
        return tensor[:, :count].reshape(-1, *tensor.shape[2:])

    return flat(beams.sequences), flat(beams.scores), flat(beams.indices)


def trimmed_beams(sequences: torch.Tensor, scores: torch.Tensor, indices: torch.Tensor,
                  prompt_length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """After the graph, on the host as ``generate`` does: cut to the longest returned beam, which the beam
    indices tell (-1 where a beam generated nothing)."""
    generated = int((indices + 1).bool().sum(dim=1).max())
    return sequences[:, :prompt_length + generated], scores, indices[:, :generated]
