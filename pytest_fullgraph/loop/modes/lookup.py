"""Prompt-lookup decoding as one graph: ``generate``'s assisted loop with ``PromptLookupCandidateGenerator``'s
candidates, greedy or sampling (``sampled_selection``), with ``generate``'s tokens.

``generate`` drafts up to ``prompt_lookup_num_tokens`` tokens by finding the last n-gram earlier in the sequence
(``get_candidates``); the model verifies the draft as every draft-and-verify mode does (``drafting``). Here the
draft is a fixed-size buffer with its length as a tensor, found by comparing every window of the sequence at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.loop.modes import drafting, speculative
from pytest_fullgraph.loop.modes.drafting import DraftSettings, State, greedy_selection, verify
from pytest_fullgraph.loop.modes.table import DecodePlan, PlanRequest

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class LookupSettings(DraftSettings):
    """What ``generate`` builds its ``PromptLookupCandidateGenerator`` with (``draft``:
    ``prompt_lookup_num_tokens``)."""

    #: the longest n-gram looked up (``max_matching_ngram_size``, 2 when unset)
    ngram: int = 2


def lookup_settings(request: PlanRequest) -> LookupSettings | None:
    """The plan's lookup, for a config with ``prompt_lookup_num_tokens``."""
    config = request.config
    if config.prompt_lookup_num_tokens is None:
        return None
    return LookupSettings(int(config.prompt_lookup_num_tokens), int(config.max_length),
                          int(config.max_matching_ngram_size or 2))


def check_lookup(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, cache: Any, loop: str) -> None:
    """Refuse, naming it, what this loop does not do with prompt lookup (``generate`` refuses a batch too)."""
    if int(input_ids.shape[0]) != 1:
        raise UnsupportedGeneration(f"prompt lookup decoding takes one prompt, as generate's assisted decoding "
                                    f"does (got batch {int(input_ids.shape[0])})")
    if len(plan.processors) > 0:
        names = ", ".join(type(processor).__name__ for processor in plan.processors)
        raise UnsupportedGeneration(f"prompt lookup decoding with logits processors ({names}): generate filters "
                                    "the draft through them token by token; supported: none")
    drafting.check_rollback(model, cache, "prompt lookup decoding")


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
    return drafting.until_disagreement(tokens, count, drawn)


def _step(model: PreTrainedModel, plan: DecodePlan, settings: LookupSettings, mask: torch.Tensor, pads: torch.Tensor,
          state: State, caches: tuple[Any, ...], max_length: Any, prompt: torch.Tensor | None) -> State:
    """One draft-and-verify step (a ``drafting.Step`` once the first five are bound)."""
    tokens, count = draft(settings, state.sequence, state.length, plan.eos, max_length)
    select = partial(sampled_selection, running=state.running) if plan.do_sample else greedy_selection
    return verify(model, plan, settings, state, tokens, count, caches[0], mask, pads, max_length, prompt, select)


def lookup_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt lookup unrolled (``drafting.unrolled_loop``)."""
    settings = plan.settings(LookupSettings)
    state, mask, pads = drafting.start(settings, input_ids, attention_mask)
    step = partial(_step, model, plan, settings, mask, pads)
    return drafting.unrolled_loop(step, state, (cache,), input_ids, settings.max_length, plan.max_new_tokens)


def lookup_while_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor, cache: Any,
                      limit: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt lookup in the ``while`` form (``drafting.while_loop``), ending at ``limit`` tokens when given."""
    settings = plan.settings(LookupSettings)
    state, mask, pads = drafting.start(settings, input_ids, attention_mask)
    # a shorter generation ends at the prompt plus the limit, as generate's max_length would
    max_length = settings.max_length if limit is None else input_ids.shape[1] + limit
    step = partial(_step, model, plan, settings, mask, pads)
    return drafting.while_loop(step, state, (cache,), input_ids, max_length)


#: Prompt lookup's row in the mode table.
MODE = drafting.row("lookup", "prompt lookup", plan=lookup_settings, check=check_lookup,
                    loops={"unrolled": lookup_loop, "while": lookup_while_loop}, honours=("prompt_lookup_num_tokens",))
