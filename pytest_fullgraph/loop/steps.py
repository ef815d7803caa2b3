"""What every loop form shares: the plan ``generate`` decides on the host, the cache a form runs on, and one
forward step's inputs and scores, as ``generate`` hands them over. Used by the loop core (``decode``) and every
decoding mode (``modes``), so none imports another's module for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

# module-level, not in new_static_cache: strict export traces the cache's construction, and torch 2.11's dynamo
# refuses an import inside traced code (GB0022)
from transformers.cache_utils import StaticCache

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.loop import processors as loop_processors
from pytest_fullgraph.loop import state as loop_state
from pytest_fullgraph.loop.modes.table import DecodePlan, Refusal

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel


def cache_length(input_ids: torch.Tensor, plan: DecodePlan, max_prompt_length: int | None = None) -> int:
    """Positions the cache needs, sized as ``generate`` sizes its static cache: the last new token is never fed
    back, so prompt + max_new_tokens - 1, and what the mode needs beyond it (a draft read past the last token);
    with ``max_prompt_length``, for that longest prompt, so one cache shape serves every shorter one. The size
    matters for models whose masks depend on it (gpt_neo)."""
    prompt = int(input_ids.shape[1]) if max_prompt_length is None else max_prompt_length
    return prompt + plan.max_new_tokens - 1 + plan.mode.extra_positions(plan)


def served_cache_length(plan: DecodePlan, input_ids: torch.Tensor, max_prompt_length: int | None) -> int:
    """The cache's positions for ``fullgraph_generate``: the prompt's (``cache_length``), or with
    ``max_prompt_length`` the longest prompt's it is to serve, after refusing a bound shorter than this prompt
    or a mode whose state is sized by one prompt."""
    if max_prompt_length is None:
        return cache_length(input_ids, plan)
    if max_prompt_length < int(input_ids.shape[1]):
        raise UnsupportedGeneration(f"max_prompt_length={max_prompt_length} is shorter than the prompt "
                                    f"({int(input_ids.shape[1])} tokens wide)")
    refusal = plan.mode.exports["dynamic"]
    if isinstance(refusal, Refusal):
        raise UnsupportedGeneration(f"max_prompt_length is refused where a dynamic export is: {refusal.message}")
    # one position past the longest prompt's need, as the dynamic export's: transformers pads a mask narrower than
    # the cache and takes another branch for one as wide (masking_utils' prepare_padding_mask), which would
    # specialise the width of the widest prompt
    return cache_length(input_ids, plan, max_prompt_length) + 1


#: Settings that count the prompt's width in Python, so each width is a plan, and a graph, of its own.
_WIDTH_SETTINGS = {
    "prefill_chunk_size": "prefill_chunk_size cuts the prompt into chunks by its width",
    "min_length": "min_length's processor counts the prompt's width",
    "min_new_tokens": "min_new_tokens' processor counts the prompt's width",
    "max_length": "max_length less the prompt's width is the number of new tokens",
}


def per_width_reason(config: GenerationConfig, inputs: dict[str, Any]) -> str:
    """Why a generation with ``config`` is a graph per prompt width even in the ``while`` form ("" when one graph
    serves every width): a setting that counts the width, or a mode other than greedy and sampling (beam search
    sizes its sequences by the prompt in Python, measured; the drafting modes take one prompt)."""
    from transformers.generation.configuration_utils import GenerationMode

    for name, reason in _WIDTH_SETTINGS.items():
        if getattr(config, name, None) and (name != "max_length" or config.max_new_tokens is None):
            return f"{reason}: each width is a generation of its own"
    mode = config.get_generation_mode(inputs.get("assistant_model"))
    if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE):
        return f"{mode.value}'s while loop is promised one prompt width (its state is sized by the prompt)"
    return ""


def new_static_cache(model: PreTrainedModel, max_cache_len: int) -> Any:
    """A static cache of ``max_cache_len`` positions (see ``cache_length``; its tensors are allocated by the
    first update); recurrent layers (mamba's conv and SSM states) are fixed-size already."""
    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def new_cache(model: PreTrainedModel, plan: DecodePlan, max_cache_len: int, loop: str) -> Any:
    """The cache a loop form runs on: ``generate``'s static cache unrolled; for the ``while_loop`` form, one whose
    state is all in tensors (after checking its processors can be traced once for every step)."""
    if loop == "while" and not plan.mode.rolls_back:  # a mode that rolls back checks its own in both forms
        loop_processors.check_processors(plan.processors)
    if loop == "while" or plan.mode.rolls_back:
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


def prompt_chunks(plan: DecodePlan, width: int) -> list[tuple[int, int]]:
    """The prompt's column ranges run one forward each, as ``generate`` runs them: the whole prompt, or with
    ``prefill_chunk_size`` its ``torch.split`` chunks (the last one shorter)."""
    size = getattr(plan.config, "prefill_chunk_size", None) or width
    return [(start, min(start + size, width)) for start in range(0, width, size)]


def prefill_logits(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   cache: Any, positions: torch.Tensor) -> torch.Tensor:
    """The prompt's forward on the cache, chunk by chunk as ``generate`` prefills (each chunk sees the mask up to
    its end and its own positions): the last chunk's logits. Every chunk is inside the graph; none syncs. A dynamic
    export refuses chunks (``export_cache_length``): they are cut from the prompt's width as a Python int."""
    if not getattr(plan.config, "prefill_chunk_size", None):  # whole: no int() of the width, which may be symbolic
        return model(input_ids=input_ids, cache=cache, **forward_kwargs(plan, positions),
                     attention_mask=generate_mask(model, plan, attention_mask, cache, input_ids, positions)).logits
    logits = None
    for start, end in prompt_chunks(plan, int(input_ids.shape[1])):
        chunk, chunk_positions, mask = input_ids[:, start:end], positions[:, start:end], attention_mask[:, :end]
        logits = model(input_ids=chunk, cache=cache, **forward_kwargs(plan, chunk_positions),
                       attention_mask=generate_mask(model, plan, mask, cache, chunk, chunk_positions)).logits
    return cast(torch.Tensor, logits)  # a prompt has at least one token, so one chunk


def last_scores(logits: torch.Tensor) -> torch.Tensor:
    """The next-token scores as ``generate`` hands them to the processors: the last position, in float32."""
    return logits[:, -1].to(dtype=torch.float32, copy=True)
