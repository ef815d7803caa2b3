"""What every loop form shares: the plan ``generate`` decides on the host, the cache a form runs on, and one
forward step's inputs and scores, as ``generate`` hands them over. Used by the greedy and sampling loops
(``decode``) and the beam loops (``beam``), so neither imports the other's module for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

# module-level, not in new_static_cache: strict export traces the cache's construction, and torch 2.11's dynamo
# refuses an import inside traced code (GB0022)
from transformers.cache_utils import StaticCache

from pytest_fullgraph.loop import processors as loop_processors
from pytest_fullgraph.loop import state as loop_state

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel
    from transformers.generation.logits_process import LogitsProcessorList


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


@dataclass(frozen=True)
class DraftSettings:
    """What every draft-and-verify mode shares: the draft buffer's size and the generation's length limit."""

    #: tokens drafted at most per step: the fixed size of the draft buffer the model verifies
    draft: int
    max_length: int


@dataclass(frozen=True)
class LookupSettings(DraftSettings):
    """What ``generate`` builds its ``PromptLookupCandidateGenerator`` with (``draft``:
    ``prompt_lookup_num_tokens``)."""

    #: the longest n-gram looked up (``max_matching_ngram_size``, 2 when unset)
    ngram: int = 2


@dataclass(frozen=True)
class AssistSettings(DraftSettings):
    """What ``generate``'s ``AssistedCandidateGenerator`` reads from the assistant model's generation config."""

    #: the draft model (``assistant_model``)
    assistant: Any = None
    #: ``num_assistant_tokens`` at the start
    first_budget: int = 20
    #: whether the budget follows the ``heuristic_transient`` schedule (+2 after a fully kept draft, else -1)
    heuristic: bool = False
    #: ``assistant_confidence_threshold``: the draft stops after a token its model gives less probability (0: off)
    threshold: float = 0.0
    #: whether the draft model's forward takes ``position_ids`` and ``logits_to_keep``
    accepts_position_ids: bool = True
    logits_to_keep: bool = True
    #: the logits processors the draft model's ``generate`` runs (``assisted.draft_processors``); empty without any
    processors: Any = ()


@dataclass
class DecodePlan:
    """What ``generate`` decides on the host, decided once before the graph."""

    config: GenerationConfig
    processors: LogitsProcessorList
    max_new_tokens: int
    do_sample: bool
    eos: torch.Tensor | None
    pad: torch.Tensor | None
    accepts_position_ids: bool
    logits_to_keep: bool
    #: whether decode steps get the attention mask; some models (mamba) take it at prefill only
    mask_when_decoding: bool = True
    #: whether the model builds its own masks for ``generate`` (``create_masks_for_generate``), which the loop
    #: then calls as ``generate`` does
    own_generate_masks: bool = False
    #: transformers' ``StopStringCriteria`` for ``stop_strings`` (built with the tokenizer before the graph; its
    #: call is tensor work on the sequence's last tokens), or None
    stop_strings: Any = None
    #: beam search's settings, None for greedy and sampling
    beams: BeamSettings | None = None
    #: prompt-lookup decoding's settings, None without it
    lookup: LookupSettings | None = None
    #: assisted decoding's settings (the draft model among them), None without it
    assist: AssistSettings | None = None

    @property
    def drafting(self) -> DraftSettings | None:
        """The draft-and-verify mode's settings, prompt lookup's or assisted decoding's, else None."""
        return self.lookup if self.lookup is not None else self.assist


def cache_length(input_ids: torch.Tensor, plan: DecodePlan) -> int:
    """Positions the cache needs, sized as ``generate`` sizes its static cache: the last new token is never fed
    back, so prompt + max_new_tokens - 1. The size matters for models whose masks depend on it (gpt_neo).
    Prompt lookup and assisted decoding read a whole draft past the last token each step: prompt +
    max_new_tokens + the draft (the assistant's own cache is as long)."""
    if plan.drafting is not None:
        return int(input_ids.shape[1]) + plan.max_new_tokens + plan.drafting.draft
    return int(input_ids.shape[1]) + plan.max_new_tokens - 1


def new_static_cache(model: PreTrainedModel, max_cache_len: int) -> Any:
    """A static cache of ``max_cache_len`` positions (see ``cache_length``; its tensors are allocated by the
    first update); recurrent layers (mamba's conv and SSM states) are fixed-size already."""
    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def new_cache(model: PreTrainedModel, plan: DecodePlan, max_cache_len: int, loop: str) -> Any:
    """The cache a loop form runs on: ``generate``'s static cache unrolled; for the ``while_loop`` form, one whose
    state is all in tensors (after checking its processors can be traced once for every step)."""
    if loop == "while" and plan.drafting is None:  # the draft modes check theirs for both forms (``check_mode``)
        loop_processors.check_processors(plan.processors)
    if loop == "while" or plan.drafting is not None:
        # a draft mode rolls the cache back by resetting its fill counter, in either form: sliding-window layers
        # must keep every position then (loop_state's whole layers: the mask, not eviction, limits the window)
        return loop_state.loop_cache(model, max_cache_len)
    return new_static_cache(model, max_cache_len)


def generate_mask(model: PreTrainedModel, plan: DecodePlan, attention_mask: torch.Tensor | None, cache: Any,
              step_input: torch.Tensor, positions: torch.Tensor) -> Any:
    """The attention mask a forward gets, as ``generate`` hands it over with a static cache.

    A model that defines ``create_masks_for_generate`` gets its 2D mask through it, as ``generate`` does: bloom
    pads the mask to the cache length and builds its alibi bias from it, so a raw mask shorter than the cache
    fails in its attention. Other models build the same 4D mask inside their forward from the 2D one.
    """
    if attention_mask is None or not plan.own_generate_masks:
        return attention_mask
    if not getattr(cache, "is_compileable", False) or all(getattr(cache, "is_linear", [False])):
        return attention_mask  # generate builds the masks only for a compileable cache with attention layers
    batch, length = step_input.shape[0], step_input.shape[1]
    return cast(Any, model).create_masks_for_generate(
        config=model.config,
        # only batch, length, dtype and device are read, as in generate
        inputs_embeds=torch.empty((batch, length, 0), dtype=model.dtype, device=step_input.device),
        attention_mask=attention_mask, cache=cache,
        position_ids=positions if plan.accepts_position_ids else None)


def forward_kwargs(plan: DecodePlan, positions: torch.Tensor) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"use_cache": True}
    if plan.accepts_position_ids:
        kwargs["position_ids"] = positions
    if plan.logits_to_keep:
        kwargs["logits_to_keep"] = 1
    return kwargs


def last_scores(logits: torch.Tensor) -> torch.Tensor:
    """The next-token scores as ``generate`` hands them to the processors: the last position, in float32."""
    return logits[:, -1].to(dtype=torch.float32, copy=True)
