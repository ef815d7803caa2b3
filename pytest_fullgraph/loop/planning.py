"""From ``generate``'s arguments to the loop's ``DecodePlan``, resolved as ``generate`` resolves them.

What the loop cannot honour is refused here by name, with why, before any cache or graph exists: every entry point
(``fullgraph_generate``, ``export_generate``) and the checks' comparisons plan alike.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.core.model_facts import cache_taking_parameters
from pytest_fullgraph.loop import tracing as loop_tracing
from pytest_fullgraph.loop.modes import table as mode_table
from pytest_fullgraph.loop.modes.table import DecodePlan

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel

#: generation_config values this loop cannot honour, with the value meaning "off"; a mode honours those it runs with
#: (``Mode.honours``: beam search its width, prompt lookup its draft size).
UNSUPPORTED_SETTINGS: dict[str, Any] = {
    "num_beams": 1, "num_beam_groups": 1, "penalty_alpha": None, "num_return_sequences": 1,
    "prompt_lookup_num_tokens": None, "assistant_early_exit": None, "dola_layers": None,
    "guidance_scale": None, "watermarking_config": None, "output_scores": False, "output_logits": False,
    "output_attentions": False, "output_hidden_states": False, "return_dict_in_generate": False,
    "max_time": None, "use_mtp": False, "speculation_type": None, "assistant_ensemble_weight": None,
}  # fmt: skip

#: Why a setting cannot be in one graph, and what to do instead: the refusal's message says it.
WHY_UNSUPPORTED: dict[str, str] = {
    "max_time": "MaxTimeCriteria reads the host clock at every step, which a compiled graph cannot; bound the work "
                "with max_new_tokens instead",
    "watermarking_config": "WatermarkLogitsProcessor seeds a host torch.Generator from the previous token at every "
                           "step",
    "guidance_scale": "classifier-free guidance runs a second forward on the unconditional prompt with a cache of its "
                      "own, which this loop does not carry",
    "prefix_allowed_tokens_fn": "a Python function called on the host for every row at every step; express the "
                                "constraint as bad_words_ids, sequence_bias or suppress_tokens instead",
}
#: ``generate`` arguments the loop takes: the tokenizer that stop strings need (as ``generate`` needs it), and the
#: draft model of assisted decoding.
TAKEN_GENERATE_ARGUMENTS = ("tokenizer", "assistant_model")


def check_supported(config: GenerationConfig, assistant: Any = None) -> None:
    """Refuse, by name and with what is supported, a setting or mode of the resolved config the loop cannot run:
    ``generate``'s modes are the mode table's (``modes.table.supported_modes``), each with its own refusals."""
    mode = str(config.get_generation_mode(assistant).value)
    rows = (mode_table.core(), *mode_table.modes())
    honoured = {name for row in rows if mode in row.generation_modes for name in row.honours}
    for name, off in UNSUPPORTED_SETTINGS.items():
        value = getattr(config, name, off)
        if value is not None and value != off and name not in honoured:
            why = f": {WHY_UNSUPPORTED[name]}" if name in WHY_UNSUPPORTED else ""
            supported = next((row.honoured_in for row in rows if name in row.honours), "greedy and sampling")
            raise UnsupportedGeneration(f"fullgraph_generate does not support {name}={value!r} "
                                        f"(supported: {supported}, else {name}={off!r}){why}")
    for row in rows:
        row.check_config(config, assistant, mode)
    supported_modes = mode_table.supported_modes()
    if mode not in supported_modes:
        raise UnsupportedGeneration(f"fullgraph_generate does not support generation mode {mode!r}; "
                                    f"supported: {', '.join(repr(name) for name in supported_modes)}")


def check_generate_arguments(arguments: dict[str, Any]) -> None:
    """Refuse, naming it and saying why, a further ``generate`` argument the loop cannot honour."""
    for name in arguments:
        if name not in TAKEN_GENERATE_ARGUMENTS:
            why = WHY_UNSUPPORTED.get(name, "not an argument this loop knows")
            raise UnsupportedGeneration(f"fullgraph_generate does not support {name}=...: {why}")


def prepare(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
            generation_config: GenerationConfig | None, tokenizer: Any = None,
            assistant: Any = None) -> tuple[torch.Tensor, DecodePlan]:
    """Resolve the generation config, special tokens, attention mask and logits processors exactly as
    ``generate`` does; returns the attention mask (``generate``'s inferred one when none is given: the
    positions that are not ``pad_token_id``, when the prompt holds it and it is not an EOS id) and the plan."""
    generate_api = cast(Any, model)
    config, _ = generate_api._prepare_generation_config(copy.deepcopy(generation_config))
    check_supported(config, assistant)
    generate_api._prepare_special_tokens(config, kwargs_has_attention_mask=attention_mask is not None,
                                         device=input_ids.device)
    if attention_mask is None:
        attention_mask = cast(torch.Tensor, generate_api._prepare_attention_mask_for_generation(input_ids, config, {}))
    prompt_length = int(input_ids.shape[1])
    if config.max_new_tokens is not None:
        max_new_tokens = int(config.max_new_tokens)
    else:
        max_new_tokens = int(config.max_length) - prompt_length
    if max_new_tokens < 1:
        raise UnsupportedGeneration(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    config.max_length = prompt_length + max_new_tokens
    if config.min_new_tokens is not None:  # as generate: min_new_tokens wins over min_length when both are set
        config.min_length = int(config.min_new_tokens) + prompt_length
    # generate builds its processors after expanding the inputs to one row per beam: the repetition penalty takes
    # each row's padding length from the expanded mask
    expanded_mask = attention_mask.repeat_interleave(max(int(config.num_beams), 1), dim=0)
    processors = generate_api._get_logits_processor(
        generation_config=config, input_ids_seq_length=prompt_length, encoder_input_ids=input_ids,
        device=input_ids.device, model_kwargs={"attention_mask": expanded_mask})
    eos = config._eos_token_tensor
    parameters = cache_taking_parameters(model)
    stop_strings = None
    if config.stop_strings is not None:
        if tokenizer is None:
            raise UnsupportedGeneration("stop_strings need tokenizer=..., as generate needs it, to match the strings "
                                        "against the vocabulary")
        from transformers.generation.stopping_criteria import StopStringCriteria

        stop_strings = StopStringCriteria(tokenizer=tokenizer, stop_strings=config.stop_strings)
    # the loops give processors and criteria stand-ins whose writes stay in the graph: made here, on the host
    loop_tracing.prepare_views(*processors, *([stop_strings] if stop_strings is not None else []))
    eos = eos if eos is not None and eos.numel() > 0 else None
    # the first row that claims the plan runs it, as generate picks: a prompt lookup wins over a draft model, beams
    # ignore it
    mode, settings = mode_table.claim(mode_table.PlanRequest(config, assistant, max_new_tokens, processors, input_ids,
                                                             eos, config._pad_token_tensor))
    if getattr(config, "prefill_chunk_size", None) and mode is not mode_table.core():
        raise UnsupportedGeneration(f"fullgraph_generate runs prefill_chunk_size={config.prefill_chunk_size!r} in "
                                    f"greedy and sampling only; its {mode.name} mode prefills the prompt whole, "
                                    "which would not be generate's chunked prefill")
    return attention_mask, DecodePlan(config, processors, max_new_tokens, bool(config.do_sample), eos,
                                      config._pad_token_tensor, "position_ids" in parameters,
                                      "logits_to_keep" in parameters, mode, settings,
                                      _mask_when_decoding(model, input_ids, attention_mask),
                                      callable(getattr(model, "create_masks_for_generate", None)), stop_strings)


def _mask_when_decoding(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> bool:
    """Ask the model's ``prepare_inputs_for_generation`` whether a decode step receives the attention mask.

    Recurrent models drop it after prefill (measured: mamba fed a full-length mask with a one-token input
    broadcasts its hidden states to the mask's length and diverges from ``generate`` at the fourth token).
    """
    step_inputs = cast(Any, model).prepare_inputs_for_generation(
        input_ids, attention_mask=attention_mask, use_cache=True, is_first_iteration=False)
    return step_inputs.get("attention_mask") is not None

