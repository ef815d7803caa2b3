"""Beam search and beam sampling as one graph, both loop forms, with ``generate``'s sequences and scores.

``generate`` expands each prompt to ``num_beams`` rows, keeps every beam in fixed-size tensors and, after each
step, reorders the cache rows to follow the beams it kept. Here that reorder is an index gather on the cache's
tensors (in place unrolled; loop state in the ``while_loop`` body), and ``generate``'s host-side stop becomes a
flag: the unrolled loop runs every step and a step past the stop changes nothing (``beam_search.kept``); the
``while_loop`` exits on it. After the graph, the host cuts the output as ``generate`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.core.model_facts import initial_positions
from pytest_fullgraph.loop import processors as loop_processors
from pytest_fullgraph.loop import state as loop_state
from pytest_fullgraph.loop import tracing as loop_tracing
from pytest_fullgraph.loop.modes import beam_search
from pytest_fullgraph.loop.modes.beam_search import Beams, BeamSettings, Length
from pytest_fullgraph.loop.modes.table import DecodePlan, Mode
from pytest_fullgraph.loop.steps import forward_kwargs, generate_mask, last_scores

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: The cache tensors that hold one row per beam, by attribute name, and the dimension of those rows (the
#: lengths a layer counts are the same for every row and stay as they are).
ROW_DIMENSION = {"keys": 0, "values": 0, "indexer_keys": 0, "indexer_position_ids": 1, "conv_states": 0,
                 "recurrent_states": 0}
#: Layer classes whose per-row state is all in ``ROW_DIMENSION``'s tensors.
REORDERABLE = loop_state.CARRIED_LAYERS | {"StaticSlidingWindowLayer",
                                          "LinearAttentionAndStaticSlidingWindowAttentionLayer"}
#: ``planning.UNSUPPORTED_SETTINGS`` that beam search honours: its width, how many beams it returns, and its scores.
BEAM_SETTINGS = ("num_beams", "num_return_sequences", "output_scores", "return_dict_in_generate")


class BeamOutput(NamedTuple):
    """What a beam loop returns from its graph: the returned beams at full length, their scores and beam
    indices, the steps run, and each step's processed scores (``output_scores``; else empty)."""

    sequences: torch.Tensor
    scores: torch.Tensor
    indices: torch.Tensor
    steps: torch.Tensor
    step_scores: torch.Tensor


def check_stop_strings(config: Any, assistant: Any, mode: str) -> None:
    """Refuse stop strings with beams: a beam's end is an EOS id or the length limit."""
    if mode in MODE.generation_modes and config.stop_strings is not None:
        raise UnsupportedGeneration("fullgraph_generate does not support stop_strings with beam search "
                                    "(supported: EOS ids and max_new_tokens end beams)")


def check_reorderable(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, cache: Any,
                      loop: str) -> None:
    """Refuse, naming it, a cache layer whose rows cannot follow the beams by a gather."""
    for layer in cache.layers:
        if type(layer).__name__ not in REORDERABLE:
            raise UnsupportedGeneration(f"beam search cannot reorder cache layer {type(layer).__name__} of "
                                        f"{type(model).__name__} (reorderable: {', '.join(sorted(REORDERABLE))})")


def reorder_cache(cache: Any, rows: torch.Tensor) -> None:
    """Make each cache row the row its beam came from, as ``Cache.reorder_cache`` does (new tensors in the layer's
    attributes: some are expanded views that an in-place copy cannot write, qwen4_exp's indexer positions), with
    no check of the cache's fill, which would be a host read."""
    rows = rows.long()
    for layer in cache.layers:
        for attribute, dimension in ROW_DIMENSION.items():
            value = getattr(layer, attribute, None)
            if isinstance(value, torch.Tensor):
                setattr(layer, attribute, value.index_select(dimension, rows))
            elif isinstance(value, dict):
                for key, tensor in list(value.items()):
                    if isinstance(tensor, torch.Tensor):
                        value[key] = tensor.index_select(dimension, rows)


def expanded(plan: DecodePlan, input_ids: torch.Tensor,
             attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt repeated once per beam, as ``generate`` expands its inputs."""
    width = plan.settings(BeamSettings).num_beams
    return input_ids.repeat_interleave(width, dim=0), attention_mask.repeat_interleave(width, dim=0)


def wants_step_scores(plan: DecodePlan) -> bool:
    return bool(plan.config.return_dict_in_generate and plan.config.output_scores)


def _hits(plan: DecodePlan, sequences: torch.Tensor, length: Length, last_step: Any) -> torch.Tensor:
    """Which candidates meet a stopping criterion: an EOS id at ``length``, or the length limit (every one)."""
    tokens = sequences.index_select(2, torch.as_tensor(length, device=sequences.device).reshape(1))[:, :, 0]
    hits = torch.zeros_like(tokens, dtype=torch.bool) | last_step
    if plan.eos is not None:
        hits = hits | torch.isin(tokens, plan.eos)
    return hits


def _step(plan: DecodePlan, beams: Beams, log_probs: torch.Tensor, length: Length, prompt_length: Length,
          divisor: Any, max_new_tokens: Length) -> tuple[Beams, torch.Tensor]:
    """One step's choice, from this step's processed scores: ``generate``'s c. to g. of ``_beam_search``."""
    settings = plan.settings(BeamSettings)
    scores, sequences, indices = beam_search.candidates(settings, plan.do_sample, beams, log_probs, length,
                                                        prompt_length)
    new_tokens = length + 1 - prompt_length
    hits = _hits(plan, sequences, length, torch.as_tensor(new_tokens >= max_new_tokens, device=scores.device))
    never = settings.early_stopping == "never" and settings.length_penalty > 0.0
    return beam_search.advance(settings, beams, scores, sequences, indices, hits, divisor, new_tokens,
                               max_new_tokens if never else new_tokens)


def _log_probs(plan: DecodePlan, logits: torch.Tensor, sequences: torch.Tensor, length: torch.Tensor | None,
               isolated: bool = False) -> torch.Tensor:
    """This step's scores as ``_beam_search`` processes them: log-softmax first, then the processors."""
    scores = torch.log_softmax(last_scores(logits), dim=-1)
    if length is None:
        return loop_processors.process_unrolled(plan.processors, sequences, scores, isolated=isolated)
    return loop_processors.process(plan.processors, sequences, length, scores)


def beam_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              cache: Any) -> BeamOutput:
    """Beam search unrolled: every step in the graph, those after ``generate``'s stop changing nothing."""
    settings = plan.settings(BeamSettings)
    input_ids, attention_mask = expanded(plan, input_ids, attention_mask)
    prompt_length = int(input_ids.shape[1])
    beams = beam_search.initial_beams(input_ids, settings, plan.max_new_tokens)
    running = torch.ones((), dtype=torch.bool, device=input_ids.device)
    steps = torch.zeros((), dtype=torch.long, device=input_ids.device)
    step_input, positions = input_ids, initial_positions(attention_mask)
    step_mask: torch.Tensor | None = attention_mask
    step_scores: list[torch.Tensor] = []
    for step in range(plan.max_new_tokens):
        length = prompt_length + step
        logits = model(input_ids=step_input, cache=cache, **forward_kwargs(plan, positions),
                       attention_mask=generate_mask(model, plan, step_mask, cache, step_input, positions)).logits
        log_probs = _log_probs(plan, logits, beams.running_sequences[:, :, :length].reshape(-1, length), None)
        step_scores.append(log_probs)
        after, go_on = _step(plan, beams, log_probs, length, prompt_length,
                             lambda n: n ** settings.length_penalty, plan.max_new_tokens)
        beams, steps = beam_search.kept(beams, after, running), steps + running.long()
        running = running & go_on
        reorder_cache(cache, after.running_indices[:, :, step].reshape(-1))
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
        step_mask = attention_mask if plan.mask_when_decoding else None
        step_input = beams.running_sequences[:, :, length].reshape(-1, 1)
        positions = positions[:, -1:] + 1
    kept_scores = torch.stack(step_scores) if wants_step_scores(plan) else input_ids.new_zeros((0,))
    return BeamOutput(*beam_search.returned(beams, settings), steps, kept_scores)


def _divisors(plan: DecodePlan, device: torch.device) -> Any:
    """``n ** length_penalty`` for every n the loop can reach, computed as ``generate`` computes it (a Python
    float) and looked up by a tensor ``n``: the ``while_loop`` body's lengths are tensors."""
    penalty = plan.settings(BeamSettings).length_penalty
    # n = 0 never occurs (a step has generated one token at least): its entry only keeps the index simple
    table = torch.tensor([1.0] + [n ** penalty for n in range(1, plan.max_new_tokens + 1)],
                         dtype=torch.float32, device=device)
    return lambda n: table.index_select(0, n.reshape(1))


def beam_while_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor, cache: Any, limit: torch.Tensor | None = None) -> BeamOutput:
    """Beam search with the decode steps as a ``while_loop`` body that exits at ``generate``'s stop (or after
    ``limit`` tokens, at most the plan's): prefill and its choice outside, the cache's tensors as loop state."""

    settings = plan.settings(BeamSettings)
    input_ids, attention_mask = expanded(plan, input_ids, attention_mask)
    device, bound = input_ids.device, plan.max_new_tokens
    prompt_length = torch.full((), input_ids.shape[1], dtype=torch.long, device=device)
    new_tokens = limit if limit is not None else torch.full((), bound, dtype=torch.long, device=device)
    divisor = _divisors(plan, device)
    full_mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], bound - 1))], dim=-1)
    positions = initial_positions(attention_mask)
    logits = model(input_ids=input_ids, cache=cache, **forward_kwargs(plan, positions),
                   attention_mask=generate_mask(model, plan, attention_mask, cache, input_ids, positions)).logits
    beams = beam_search.initial_beams(input_ids, settings, bound)
    log_probs = _log_probs(plan, logits, input_ids, None, isolated=True)
    beams, go_on = _step(plan, beams, log_probs, prompt_length, prompt_length, divisor, new_tokens)
    reorder_cache(cache, beams.running_indices[:, :, 0].reshape(-1))
    step_scores = _first_step_scores(plan, log_probs, bound)
    carried = loop_state.CarriedCache(cache)
    steps = torch.ones((), dtype=torch.long, device=device)
    positions = positions[:, -1:].clone(memory_format=torch.contiguous_format)

    def condition(steps: torch.Tensor, go_on: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        return go_on & (steps < new_tokens)

    def body(steps: torch.Tensor, go_on: torch.Tensor, positions: torch.Tensor, step_scores: torch.Tensor,
             *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        beams, step_cache = Beams(*state[:8]), carried.rebuild(state[8:])
        length = prompt_length + steps
        positions = positions + 1
        step_input = beams.running_sequences.index_select(2, (length - 1).reshape(1)).reshape(-1, 1)
        mask = generate_mask(model, plan, full_mask if plan.mask_when_decoding else None, step_cache, step_input,
                             positions)
        logits = model(input_ids=step_input, attention_mask=mask, cache=step_cache,
                       **forward_kwargs(plan, positions)).logits
        # the processors read the buffer past its valid length too (masked): there generate's fill (-1 without an
        # EOS id) is no token id, so it reads as 0 there, as the greedy loop's buffer holds
        flat = beams.running_sequences.reshape(-1, beams.running_sequences.shape[-1]).clamp(min=0)
        log_probs = _log_probs(plan, logits, flat, length)
        beams, go_on = _step(plan, beams, log_probs, length, prompt_length, divisor, new_tokens)
        reorder_cache(step_cache, beams.running_indices.index_select(2, steps.reshape(1)).reshape(-1))
        if step_scores.numel() > 0:
            step_scores = step_scores.index_copy(0, steps.reshape(1), log_probs[None])
        else:
            step_scores = step_scores.clone()  # a while_loop body may not return its input itself
        return (steps + 1, go_on, positions, step_scores, *beams, *carried.tensors(step_cache))

    state = loop_tracing.run_while(condition, body, (steps, go_on, positions, step_scores, *beams, *carried.tensors()))
    steps, final = state[0], Beams(*state[4:12])
    return BeamOutput(*beam_search.returned(final, settings), steps, state[3])


def _first_step_scores(plan: DecodePlan, log_probs: torch.Tensor, bound: int) -> torch.Tensor:
    """The ``while`` form's buffer of every step's processed scores (``output_scores``), the first written."""
    if not wants_step_scores(plan):
        return log_probs.new_zeros((0,))
    buffer = log_probs.new_zeros((bound, *log_probs.shape))
    return buffer.index_copy(0, torch.zeros(1, dtype=torch.long, device=log_probs.device), log_probs[None])


def beam_result(outputs: tuple[torch.Tensor, ...], plan: DecodePlan | None, input_ids: torch.Tensor) -> Any:
    """What ``generate`` returns for a beam loop's outputs (``BeamOutput``'s): the sequences, or with
    ``return_dict_in_generate`` its ``GenerateBeamDecoderOnlyOutput`` (scores only with ``output_scores``, as
    ``generate`` gives them); an exported program's callable (``plan`` None) returns the sequences."""
    output = BeamOutput(*outputs)
    sequences, scores, indices = beam_search.trimmed_beams(output.sequences, output.scores, output.indices,
                                                           int(input_ids.shape[1]))
    if plan is None or not plan.config.return_dict_in_generate:
        return sequences
    from transformers.generation.utils import GenerateBeamDecoderOnlyOutput

    step_scores = None
    if wants_step_scores(plan):
        step_scores = tuple(output.step_scores[: int(output.steps)].unbind(0))
    return GenerateBeamDecoderOnlyOutput(sequences=cast(Any, sequences),
                                         sequences_scores=scores if plan.config.output_scores else None,
                                         scores=cast(Any, step_scores), beam_indices=cast(Any, indices))


#: Beam search's and beam sampling's row in the mode table: the beams multiply the rows a step samples from.
MODE = Mode("beam", ("beam_search", "beam_sample"), plan=beam_search.beam_settings, check=check_reorderable,
            check_config=check_stop_strings, honours=BEAM_SETTINGS, honoured_in="beam search and beam sampling",
            loops={"unrolled": beam_loop, "while": beam_while_loop}, result=beam_result,
            outputs=len(BeamOutput._fields),
            noise_width=lambda plan, vocab: vocab * plan.settings(BeamSettings).num_beams)
