"""Prompt-lookup decoding as one graph: ``generate``'s assisted loop with ``PromptLookupCandidateGenerator``'s
candidates, greedy or sampling (``sampled_selection``), with ``generate``'s tokens.

``generate`` drafts up to ``prompt_lookup_num_tokens`` tokens by finding the last n-gram earlier in the sequence
(``get_candidates``), runs the model once over the last token and the draft, keeps the draft up to the first
token the model disagrees with plus the model's own next token, and crops the cache back. Every length there is
data: how many tokens were drafted, how many were kept. Here the draft is a fixed-size buffer with its length as
a tensor, the model always reads ``1 + prompt_lookup_num_tokens`` tokens (the ones past the draft come after the
valid ones, so causal attention keeps them out of the valid logits), tokens are written with masks, and the
cache's rollback is a reset of its fill counter (the positions past it are rewritten before they are read).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.loop import processors as loop_processors
from pytest_fullgraph.loop import tracing as loop_tracing
from pytest_fullgraph.loop.modes import speculative
from pytest_fullgraph.loop.steps import DecodePlan, DraftSettings, LookupSettings, forward_kwargs

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Cache layer classes whose state a rollback restores by resetting the fill counter: full-length attention
#: layers, and sliding-window ones kept whole (``loop_state.WholeSlidingLayer``: every position kept, the mask
#: limits attention to the window), sparse attention's indexed layers and the empty layers of shared KV; a recurrent
#: state cannot be un-updated.
ROLLBACK_LAYERS = frozenset({"StaticLayer", "WholeSlidingLayer", "StaticIndexedLayer", "DummyLayer"})


def roll_back(cache: Any, length: torch.Tensor) -> None:
    """Make the cache hold ``length`` positions: its fill counters reset (``Cache.crop`` for static layers; a
    sparse-attention layer's indexer keys have a counter of their own)."""
    for layer in cache.layers:
        if type(layer).__name__ == "DummyLayer":
            continue  # a layer that reads another's keys and values (gemma3n's shared KV) holds nothing
        layer.cumulative_length.copy_(length)
        indexer = getattr(layer, "indexer_cumulative_length", None)
        if isinstance(indexer, torch.Tensor):
            indexer.copy_(length)


class Lookup(NamedTuple):
    """The loop's state: the sequence buffer, its valid length, and whether it still generates (0-d)."""

    sequence: torch.Tensor
    length: torch.Tensor
    running: torch.Tensor


def lookup_settings(config: Any) -> LookupSettings:
    return LookupSettings(int(config.prompt_lookup_num_tokens), int(config.max_length),
                          int(config.max_matching_ngram_size or 2))


def check_lookup(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, cache: Any) -> None:
    """Refuse, naming it, what this loop does not do with prompt lookup (``generate`` refuses a batch too)."""
    if int(input_ids.shape[0]) != 1:
        raise UnsupportedGeneration(f"prompt lookup decoding takes one prompt, as generate's assisted decoding "
                                    f"does (got batch {int(input_ids.shape[0])})")
    if len(plan.processors) > 0:
        names = ", ".join(type(processor).__name__ for processor in plan.processors)
        raise UnsupportedGeneration(f"prompt lookup decoding with logits processors ({names}): generate filters "
                                    "the draft through them token by token; supported: none")
    check_rollback(model, cache, "prompt lookup decoding")


def check_rollback(model: PreTrainedModel, cache: Any, mode: str) -> None:
    """Refuse a cache with a layer that a reset of its fill counter cannot roll back (see ``ROLLBACK_LAYERS``)."""
    for layer in cache.layers:
        if type(layer).__name__ not in ROLLBACK_LAYERS:
            raise UnsupportedGeneration(f"{mode} cannot roll back cache layer {type(layer).__name__} of "
                                        f"{type(model).__name__} (supported: {', '.join(sorted(ROLLBACK_LAYERS))})")


def draft(settings: LookupSettings, sequence: torch.Tensor, length: torch.Tensor, eos: torch.Tensor | None,
          max_length: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``get_candidates`` on ``sequence[0, :length]``: the drafted tokens (``settings.draft`` of them, those past
    the draft's length arbitrary) and the draft's length. The longest n-gram first; within it, the earliest
    match whose continuation starts before the end."""
    row = sequence[0]
    positions = torch.arange(row.shape[0], device=row.device)
    start = torch.zeros((), dtype=torch.long, device=row.device)
    found = torch.zeros((), dtype=torch.bool, device=row.device)
    for size in range(settings.ngram, 0, -1):
        last = row.index_select(0, (length - size + torch.arange(size, device=row.device)).clamp(min=0))
        windows = torch.stack([row.roll(-offset) for offset in range(size)], dim=1)  # windows[i] = row[i:i+size]
        begins = positions + size  # where each window's continuation starts
        hits = (windows == last).all(dim=1) & (begins < length) & (begins < max_length)
        hits = hits & (size <= length - 1)
        first = torch.where(hits, positions, row.shape[0]).min()
        take = ~found & hits.any()
        start, found = torch.where(take, first + size, start), found | take
    end = torch.minimum(start + settings.draft, length)
    end = torch.minimum(end, torch.as_tensor(max_length, device=length.device))
    count = torch.where(found, end - start, 0)
    tokens = row.index_select(0, (start + torch.arange(settings.draft, device=row.device)).clamp(max=row.shape[0] - 1))
    if eos is not None:  # the draft stops before its first EOS
        is_eos = torch.isin(tokens, eos) & (torch.arange(settings.draft, device=row.device) < count)
        count = torch.where(is_eos.any(), torch.argmax(is_eos.long()), count)
    count = torch.where(length + 1 == max_length, 0, count)
    return tokens, count


def verified_logits(model: PreTrainedModel, plan: DecodePlan, chunk: torch.Tensor, positions: torch.Tensor,
             mask: torch.Tensor, cache: Any, keep: int) -> torch.Tensor:
    """The logits of the chunk's last ``keep`` positions, in float32 (``generate`` asks for exactly these)."""
    kwargs = forward_kwargs(plan, positions)
    if plan.logits_to_keep:
        kwargs["logits_to_keep"] = keep
    logits = model(input_ids=chunk, cache=cache, attention_mask=mask, **kwargs).logits
    return logits[:, -keep:].to(dtype=torch.float32)


#: How a step picks the tokens it keeps from the draft (``tokens``, ``count`` of them drafted) and the model's
#: logits after the last token and each drafted one: the tokens (the kept draft, then the model's own; past them
#: arbitrary) and how many.
Selection = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def greedy_selection(tokens: torch.Tensor, count: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor,
                                                                                                torch.Tensor]:
    """The draft up to the model's first disagreement, then the model's next token (greedy)."""
    return _until_disagreement(tokens, count, torch.argmax(logits[0], dim=-1))


def sampled_selection(tokens: torch.Tensor, count: torch.Tensor, logits: torch.Tensor,
                      running: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampling against a draft without scores (prompt lookup's): ``generate`` draws the model's token after the
    last token and after each drafted one in one ``torch.multinomial`` over ``count + 1`` rows (nothing once
    generation has ended), and keeps the draft up to its first disagreement with them."""
    size = int(tokens.shape[0])
    probs = torch.softmax(logits[0], dim=-1)
    drawn = speculative.draws_of_length(torch.where(running, count + 1, 0), size + 1,
                                        lambda rows: torch.multinomial(probs[:rows], num_samples=1)[:, 0],
                                        torch.zeros(size + 1, dtype=torch.long, device=tokens.device))
    return _until_disagreement(tokens, count, drawn)


def _until_disagreement(tokens: torch.Tensor, count: torch.Tensor,
                        selected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``selected``, the model's token after the last token and each drafted one, and how many to keep: the draft
    up to its first token the model did not pick, then the model's own."""
    offsets = torch.arange(tokens.shape[0], device=selected.device)
    return selected, speculative.leading((tokens == selected[:-1]) & (offsets < count)) + 1


def accept(settings: DraftSettings, plan: DecodePlan, state: Lookup, selected: torch.Tensor, valid: torch.Tensor,
           cache: Any, max_length: Any) -> Lookup:
    """Keep the ``valid`` tokens a selection picked, cut at the length limit and after an EOS, as
    ``_assisted_decoding`` does; roll the cache back to the tokens kept."""
    offsets = torch.arange(settings.draft + 1, device=selected.device)
    valid = torch.minimum(valid, max_length - state.length)
    if plan.eos is not None:
        is_eos = torch.isin(selected, plan.eos) & (offsets < valid)
        valid = torch.where(is_eos.any(), torch.argmax(is_eos.long()) + 1, valid)
    valid = torch.where(state.running, valid, 0)
    where = torch.arange(state.sequence.shape[1], device=selected.device)
    written = (where >= state.length) & (where < state.length + valid)
    sequence = torch.where(written, selected[(where - state.length).clamp(0, settings.draft)], state.sequence)
    length = state.length + valid
    roll_back(cache, length - 1)  # the cache holds every token but the newest
    last = sequence[0].index_select(0, (length - 1).reshape(1))
    running = state.running & (length < max_length)
    if plan.eos is not None:
        running = running & ~torch.isin(last, plan.eos)[0]
    return Lookup(sequence, length, running)


def start(settings: DraftSettings, input_ids: torch.Tensor,
          attention_mask: torch.Tensor) -> tuple[Lookup, torch.Tensor, torch.Tensor]:
    """The state before the first step, the full attention mask and the prompt's padding count."""
    width = settings.max_length + settings.draft  # as wide as the cache (``cache_length``)
    prompt_length = int(input_ids.shape[1])
    sequence = torch.cat([input_ids, input_ids.new_zeros((1, width - prompt_length))], dim=1)
    mask = torch.cat([attention_mask, attention_mask.new_ones((1, width - prompt_length))], dim=1)
    pads = (attention_mask.shape[1] - attention_mask.sum()).reshape(1, 1)
    state = Lookup(sequence, torch.full((), prompt_length, dtype=torch.long, device=input_ids.device),
                   torch.ones((), dtype=torch.bool, device=input_ids.device))
    return state, mask, pads


def _step(model: PreTrainedModel, plan: DecodePlan, settings: LookupSettings, state: Lookup, cache: Any,
          mask: torch.Tensor, pads: torch.Tensor, max_length: Any, prompt: torch.Tensor | None = None) -> Lookup:
    """One draft-and-verify step towards ``max_length`` (an int, or a 0-d tensor in the ``while`` form, whose
    program takes its length as an input); ``prompt`` on the first, which reads the prompt and the draft in one
    forward, as ``generate``'s first step does."""
    tokens, count = draft(settings, state.sequence, state.length, plan.eos, max_length)
    select = partial(sampled_selection, running=state.running) if plan.do_sample else greedy_selection
    return verify(model, plan, settings, state, tokens, count, cache, mask, pads, max_length, prompt, select)


def verify(model: PreTrainedModel, plan: DecodePlan, settings: DraftSettings, state: Lookup, tokens: torch.Tensor,
           count: torch.Tensor, cache: Any, mask: torch.Tensor, pads: torch.Tensor, max_length: Any,
           prompt: torch.Tensor | None = None, select: Selection = greedy_selection) -> Lookup:
    """The model's verification of a draft, whoever drafted it: one forward over the last token (the prompt on the
    first step) and the draft buffer, ``select`` (greedy, or speculative sampling's), then ``accept``."""
    if prompt is not None:
        chunk = torch.cat([prompt, tokens[None]], dim=1)
        begin = torch.zeros((), dtype=torch.long, device=chunk.device)
    else:
        chunk = torch.cat([state.sequence.index_select(1, (state.length - 1).reshape(1)), tokens[None]], dim=1)
        begin = state.length - 1
    logits = verified_logits(model, plan, chunk, chunk_positions(begin, chunk, pads), mask, cache,
                             settings.draft + 1)
    if len(plan.processors) > 0:
        logits = processed_logits(plan, state, tokens, logits)
    return accept(settings, plan, state, *select(tokens, count, logits), cache, max_length)


def processed_logits(plan: DecodePlan, state: Lookup, tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The plan's processors on the model's logits after the last token and after each drafted one, each seeing
    the sequence up to it, as ``_assisted_decoding`` runs them position by position (past the draft's length the
    sequence holds arbitrary tokens: those positions are never kept)."""
    size = int(tokens.shape[0])
    where = torch.arange(state.sequence.shape[1], device=tokens.device)
    drafted = (where >= state.length) & (where < state.length + size)
    sequence = torch.where(drafted, tokens[(where - state.length).clamp(0, size - 1)], state.sequence)
    return torch.stack([loop_processors.process(plan.processors, sequence, state.length + index, logits[:, index])
                        for index in range(size + 1)], dim=1)


def chunk_positions(begin: torch.Tensor, chunk: torch.Tensor, pads: torch.Tensor) -> torch.Tensor:
    """The position ids of a chunk whose first token sits at ``begin`` in the (left-padded) sequence."""
    return ((begin + torch.arange(chunk.shape[1], device=chunk.device))[None] - pads).clamp(min=0)


def lookup_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt lookup unrolled: ``max_new_tokens`` steps (each keeps a token at least), those after the last token
    changing nothing; returns the sequence buffer and the tokens generated (``exported.trimmed`` cuts it)."""
    assert plan.lookup is not None
    settings = plan.lookup
    state, mask, pads = start(settings, input_ids, attention_mask)
    state = _step(model, plan, settings, state, cache, mask, pads, settings.max_length, prompt=input_ids)
    for _ in range(plan.max_new_tokens - 1):
        state = _step(model, plan, settings, state, cache, mask, pads, settings.max_length)
    return state.sequence, state.length - input_ids.shape[1]


def lookup_while_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor, cache: Any,
                      limit: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt lookup with the steps after the first as a ``while_loop`` body, exiting when generation ends (or
    ``limit`` tokens are reached: the buffers stay sized for the plan)."""

    from pytest_fullgraph.loop import state as loop_state

    assert plan.lookup is not None
    settings = plan.lookup
    state, mask, pads = start(settings, input_ids, attention_mask)
    # a shorter generation ends at the prompt plus the limit, as generate's max_length would
    max_length = settings.max_length if limit is None else input_ids.shape[1] + limit
    state = _step(model, plan, settings, state, cache, mask, pads, max_length, prompt=input_ids)
    carried = loop_state.CarriedCache(cache)

    def condition(sequence: torch.Tensor, length: torch.Tensor, running: torch.Tensor,
                  *tensors: torch.Tensor) -> torch.Tensor:
        return running.clone()

    def body(sequence: torch.Tensor, length: torch.Tensor, running: torch.Tensor,
             *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        step_cache = carried.rebuild(tensors)
        after = _step(model, plan, settings, Lookup(sequence, length, running), step_cache, mask, pads, max_length)
        return (*after, *carried.tensors(step_cache))

    final = loop_tracing.run_while(condition, body, (*state, *carried.tensors()))
    return final[0], final[1] - input_ids.shape[1]


#: The prompt-lookup loop of each loop form.
LOOKUP_LOOPS = {"unrolled": lookup_loop, "while": lookup_while_loop}
