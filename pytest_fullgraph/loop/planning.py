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
from pytest_fullgraph.loop.modes import assisted, beam_search, lookup
from pytest_fullgraph.loop.steps import DecodePlan

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel

#: generation_config values this loop cannot honour, with the value meaning "off".
UNSUPPORTED_SETTINGS: dict[str, Any] = {
    "num_beams": 1, "num_beam_groups": 1, "penalty_alpha": None, "num_return_sequences": 1,
    "prompt_lookup_num_tokens": None, "assistant_early_exit": None, "dola_layers": None,
    "guidance_scale": None, "watermarking_config": None, "output_scores": False, "output_logits": False,
    "output_attentions": False, "output_hidden_states": False, "return_dict_in_generate": False,
    "max_time": None, "use_mtp": False, "speculation_type": None, "assistant_ensemble_weight": None,
}  # fmt: skip
#: ``UNSUPPORTED_SETTINGS`` that beam search honours: its width, how many beams it returns, and its scores.
BEAM_SETTINGS = ("num_beams", "num_return_sequences", "output_scores", "return_dict_in_generate")
#: ``generate``'s modes the loop runs: greedy and sampling, beam search and beam sampling, and assisted generation
#: when its candidates come from prompt lookup (``prompt_lookup_num_tokens``) or a draft model (``assistant_model``).
SUPPORTED_MODES = ("greedy_search", "sample", "beam_search", "beam_sample", "assisted_generation")


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
#: Draft models ``generate`` does not draft with through ``AssistedCandidateGenerator`` (class-name prefixes).
OTHER_CANDIDATE_GENERATORS = ("Gemma4Assistant", "Gemma4UnifiedAssistant")


def check_supported(config: GenerationConfig, assistant: Any = None) -> None:
    """Refuse, by name and with what is supported, a setting or mode of the resolved config the loop cannot run."""
    mode = str(config.get_generation_mode(assistant).value)
    beams = mode in ("beam_search", "beam_sample")
    for name, off in UNSUPPORTED_SETTINGS.items():
        value = getattr(config, name, off)
        allowed = (beams and name in BEAM_SETTINGS) or (mode == "assisted_generation"
                                                         and name == "prompt_lookup_num_tokens")
        if value is not None and value != off and not allowed:
            why = f": {WHY_UNSUPPORTED[name]}" if name in WHY_UNSUPPORTED else ""
            supported = "greedy and sampling" if name not in BEAM_SETTINGS else "beam search and beam sampling"
            raise UnsupportedGeneration(f"fullgraph_generate does not support {name}={value!r} "
                                        f"(supported: {supported}, else {name}={off!r}){why}")
    if assistant is not None and type(assistant).__name__.startswith(OTHER_CANDIDATE_GENERATORS):
        raise UnsupportedGeneration(f"fullgraph_generate does not support assistant_model={type(assistant).__name__}"
                                    ": generate drafts with it from the target's shared key-value states "
                                    "(SinglePositionMultiTokenCandidateGenerator); supported: a causal LM draft")
    if mode not in SUPPORTED_MODES:
        raise UnsupportedGeneration(f"fullgraph_generate does not support generation mode {mode!r}; "
                                    f"supported: {', '.join(repr(name) for name in SUPPORTED_MODES)}")
    if beams and config.stop_strings is not None:
        raise UnsupportedGeneration("fullgraph_generate does not support stop_strings with beam search "
                                    "(supported: EOS ids and max_new_tokens end beams)")


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
    beams = None
    if int(config.num_beams) > 1:
        beams = beam_search.beam_settings(config, eos, config._pad_token_tensor)
    prompt_lookup = lookup.lookup_settings(config) if config.prompt_lookup_num_tokens is not None else None
    assist = None  # as generate: a prompt lookup wins over a draft model, beams ignore it
    if assistant is not None and prompt_lookup is None and beams is None:
        assist = assisted.assist_settings(config, assistant, max_new_tokens, processors, input_ids)
    return attention_mask, DecodePlan(config, processors, max_new_tokens, bool(config.do_sample), eos,
                                      config._pad_token_tensor, "position_ids" in parameters,
                                      "logits_to_keep" in parameters,
                                      _mask_when_decoding(model, input_ids, attention_mask),
                                      callable(getattr(model, "create_masks_for_generate", None)), stop_strings,
                                      beams, prompt_lookup, assist)


def _mask_when_decoding(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> bool:
    """Ask the model's ``prepare_inputs_for_generation`` whether a decode step receives the attention mask.

    Recurrent models drop it after prefill (measured: mamba fed a full-length mask with a one-token input
    broadcasts its hidden states to the mask's length and diverges from ``generate`` at the fourth token).
    """
    step_inputs = cast(Any, model).prepare_inputs_for_generation(
        input_ids, attention_mask=attention_mask, use_cache=True, is_first_iteration=False)
    return step_inputs.get("attention_mask") is not None

