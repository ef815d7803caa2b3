"""What every draft-and-verify mode shares (prompt lookup, ``lookup``; assisted decoding, ``assisted``): the loop of
``generate``'s ``_assisted_decoding`` around a draft, written once for both loop forms, and the verification.

Each step a mode drafts up to ``draft`` tokens its own way; the model then reads the last token and the draft buffer
in one forward, keeps the draft up to the first token it disagrees with plus its own next token, and the cache is
cropped back. Every length there is data: the draft is a fixed-size buffer with its length as a tensor, the model
always reads ``1 + draft`` tokens (the ones past the draft come after the valid ones, so causal attention keeps them
out of the valid logits), tokens are written with masks, and the cache's rollback is a reset of its fill counter
(the positions past it are rewritten before they are read). Sampling's arithmetic is ``speculative``'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.loop import processors as loop_processors
from pytest_fullgraph.loop import state as loop_state
from pytest_fullgraph.loop import tracing as loop_tracing
from pytest_fullgraph.loop.modes import speculative
from pytest_fullgraph.loop.modes.table import DecodePlan, Mode, Refusal
from pytest_fullgraph.loop.steps import forward_kwargs

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Cache layer classes whose state a rollback restores by resetting the fill counter: full-length attention
#: layers, and sliding-window ones kept whole (``loop_state.WholeSlidingLayer``: every position kept, the mask
#: limits attention to the window), sparse attention's indexed layers and the empty layers of shared KV; a recurrent
#: state cannot be un-updated.
ROLLBACK_LAYERS = frozenset({"StaticLayer", "WholeSlidingLayer", "StaticIndexedLayer", "DummyLayer"})


@dataclass(frozen=True)
class DraftSettings:
    """What every draft-and-verify mode's settings hold: the draft buffer's size and the generation's length limit."""

    #: tokens drafted at most per step: the fixed size of the draft buffer the model verifies
    draft: int
    max_length: int


class State(NamedTuple):
    """The loop's state: the sequence buffer, its valid length, and whether it still generates (0-d)."""

    sequence: torch.Tensor
    length: torch.Tensor
    running: torch.Tensor


def row(name: str, title: str, **fields: Any) -> Mode:
    """A draft-and-verify mode's row: what they share (``generate``'s assisted generation, a cache rolled back and a
    draft's positions longer, one prompt: no dynamic export; draws that vary in number: no noise input), beside its
    own ``fields``."""
    dynamic = Refusal(f"export_generate(dynamic=True) does not support {title}: it takes one prompt (batch 1), "
                      "which dynamic shapes cannot hold; export with dynamic=False")
    noise = Refusal("noise_input=True takes sampling or beam sampling, not speculative sampling: its draws (per "
                    "drafted token, then over the draft's length) vary in number per step, so no fixed noise input "
                    "holds them")
    return Mode(name, ("assisted_generation",), rolls_back=True, extra_positions=_draft_positions,
                exports={"static": True, "dynamic": dynamic, "noise_input": noise}, **fields)


def _draft_positions(plan: DecodePlan) -> int:
    """Each step reads a whole draft past the last token: the cache holds prompt + max_new_tokens + the draft (the
    assistant's own cache is as long)."""
    return plan.settings(DraftSettings).draft + 1


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


def check_rollback(model: PreTrainedModel, cache: Any, mode: str) -> None:
    """Refuse a cache with a layer that a reset of its fill counter cannot roll back (see ``ROLLBACK_LAYERS``)."""
    for layer in cache.layers:
        if type(layer).__name__ not in ROLLBACK_LAYERS:
            raise UnsupportedGeneration(f"{mode} cannot roll back cache layer {type(layer).__name__} of "
                                        f"{type(model).__name__} (supported: {', '.join(sorted(ROLLBACK_LAYERS))})")


def start(settings: DraftSettings, input_ids: torch.Tensor,
          attention_mask: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
    """The state before the first step, the full attention mask and the prompt's padding count."""
    width = settings.max_length + settings.draft  # as wide as the cache (``cache_length``)
    prompt_length = int(input_ids.shape[1])
    sequence = torch.cat([input_ids, input_ids.new_zeros((1, width - prompt_length))], dim=1)
    mask = torch.cat([attention_mask, attention_mask.new_ones((1, width - prompt_length))], dim=1)
    pads = (attention_mask.shape[1] - attention_mask.sum()).reshape(1, 1)
    state = State(sequence, torch.full((), prompt_length, dtype=torch.long, device=input_ids.device),
                  torch.ones((), dtype=torch.bool, device=input_ids.device))
    return state, mask, pads


#: One step of a mode, its model, plan, settings, mask and padding bound: ``(state, caches, max_length, prompt)`` to
#: the state after it. ``prompt`` on the first step only, which reads the prompt and the draft in one forward, as
#: ``generate``'s first step does; ``max_length`` an int, or a 0-d tensor in the ``while`` form, whose program takes
#: its length as an input.
Step = Callable[[Any, tuple[Any, ...], Any, Any], Any]


def unrolled_loop(step: Step, state: Any, caches: tuple[Any, ...], input_ids: torch.Tensor, max_length: int,
                  steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loop unrolled: ``steps`` steps (each keeps a token at least), those after the last token changing nothing;
    returns the sequence buffer and the tokens generated (``exported.trimmed`` cuts it)."""
    state = step(state, caches, max_length, input_ids)
    for _ in range(steps - 1):
        state = step(state, caches, max_length, None)
    return state.sequence, state.length - input_ids.shape[1]


def while_loop(step: Step, state: Any, caches: tuple[Any, ...], input_ids: torch.Tensor,
               max_length: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The loop with the steps after the first as a ``while_loop`` body carrying every cache (the model's, a draft
    model's) as loop state, exiting when generation ends (``max_length``: the buffers stay sized for the plan)."""
    state = step(state, caches, max_length, input_ids)
    kind, fields, running = type(state), len(state), type(state)._fields.index("running")
    carried = [loop_state.CarriedCache(cache) for cache in caches]
    ends = list(itertools.accumulate(len(each.slots) for each in carried))
    spans = list(zip([0, *ends[:-1]], ends, strict=True))

    def condition(*values: torch.Tensor) -> torch.Tensor:
        return values[running].clone()

    def body(*values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tensors = values[fields:]
        step_caches = tuple(each.rebuild(tensors[begin:end]) for each, (begin, end) in zip(carried, spans, strict=True))
        after = list(step(kind(*values[:fields]), step_caches, max_length, None))
        for each, cache in zip(carried, step_caches, strict=True):
            after.extend(each.tensors(cache))
        return tuple(after)

    initial = [*state]
    for each in carried:
        initial.extend(each.tensors())
    final = loop_tracing.run_while(condition, body, tuple(initial))
    return final[0], final[1] - input_ids.shape[1]


def chunk_positions(begin: torch.Tensor, chunk: torch.Tensor, pads: torch.Tensor,
                    max_length: Any = None) -> torch.Tensor:
    """The position ids of a chunk whose first token sits at ``begin`` in the (left-padded) sequence.

    With ``max_length``, slots at or past it take the last position's id: a fixed-width chunk near the end reaches
    past the sequence (a draft is read in full, however much of it may still be kept), and a model with a learned
    position table holds rows only up to its declared positions (gpt2: an index error). Those slots are never
    kept, and the kept ones before them never attend to them, so their ids change no kept token."""
    positions = ((begin + torch.arange(chunk.shape[1], device=chunk.device))[None] - pads).clamp(min=0)
    return positions if max_length is None else positions.clamp(max=max_length - 1)


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
    return until_disagreement(tokens, count, torch.argmax(logits[0], dim=-1))


def until_disagreement(tokens: torch.Tensor, count: torch.Tensor,
                       selected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``selected``, the model's token after the last token and each drafted one, and how many to keep: the draft
    up to its first token the model did not pick, then the model's own."""
    offsets = torch.arange(tokens.shape[0], device=selected.device)
    return selected, speculative.leading((tokens == selected[:-1]) & (offsets < count)) + 1


def verify(model: PreTrainedModel, plan: DecodePlan, settings: DraftSettings, state: State, tokens: torch.Tensor,
           count: torch.Tensor, cache: Any, mask: torch.Tensor, pads: torch.Tensor, max_length: Any,
           prompt: torch.Tensor | None = None, select: Selection = greedy_selection) -> State:
    """The model's verification of a draft, whoever drafted it: one forward over the last token (the prompt on the
    first step) and the draft buffer, ``select`` (greedy, or speculative sampling's), then ``accept``."""
    if prompt is not None:
        chunk = torch.cat([prompt, tokens[None]], dim=1)
        begin = torch.zeros((), dtype=torch.long, device=chunk.device)
    else:
        chunk = torch.cat([state.sequence.index_select(1, (state.length - 1).reshape(1)), tokens[None]], dim=1)
        begin = state.length - 1
    logits = verified_logits(model, plan, chunk, chunk_positions(begin, chunk, pads, max_length), mask, cache,
                             settings.draft + 1)
    if len(plan.processors) > 0:
        logits = processed_logits(plan, state, tokens, logits)
    return accept(settings, plan, state, *select(tokens, count, logits), cache, max_length)


def processed_logits(plan: DecodePlan, state: State, tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The plan's processors on the model's logits after the last token and after each drafted one, each seeing
    the sequence up to it, as ``_assisted_decoding`` runs them position by position (past the draft's length the
    sequence holds arbitrary tokens: those positions are never kept)."""
    size = int(tokens.shape[0])
    where = torch.arange(state.sequence.shape[1], device=tokens.device)
    drafted = (where >= state.length) & (where < state.length + size)
    sequence = torch.where(drafted, tokens[(where - state.length).clamp(0, size - 1)], state.sequence)
    return torch.stack([loop_processors.process(plan.processors, sequence, state.length + index, logits[:, index])
                        for index in range(size + 1)], dim=1)


def accept(settings: DraftSettings, plan: DecodePlan, state: State, selected: torch.Tensor, valid: torch.Tensor,
           cache: Any, max_length: Any) -> State:
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
    return State(sequence, length, running)
