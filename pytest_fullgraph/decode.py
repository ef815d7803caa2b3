"""A generation loop that compiles with ``fullgraph=True`` into one graph and matches ``model.generate``.

Everything data-dependent that ``generate`` does on the host (special-token checks, choosing logits
processors, stopping when every row has finished) happens either before the graph, on Python values,
or after it, on its outputs. Inside the graph: prefill, every decode step, logits processing, sampling,
and EOS handling, with no host synchronisation.

The unrolled form runs all ``max_new_tokens`` steps branch-free: rows that have finished emit
``pad_token_id`` (as ``generate`` pads them), and the output is trimmed afterwards to the length
``generate`` returns, i.e. up to the step at which the last row finished. The ``while_loop`` form carries the
KV cache as loop state and exits when every row has finished; its graph does not grow with the tokens.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from pytest_fullgraph import (
    assisted,
    beam,
    beam_search,
    lookup,
    loop_processors,
    loop_state,
    loop_tracing,
    sampling_noise,
)
from pytest_fullgraph.generation import UnsupportedGeneration
from pytest_fullgraph.loop_steps import (
    DecodePlan,
    cache_length,
    forward_kwargs,
    generate_mask,
    last_scores,
    new_cache,
)
from pytest_fullgraph.modeling import cache_taking_parameters, initial_positions

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


class DecodeProgram(torch.nn.Module):
    """The loop as a module, the form ``torch.export`` takes; it makes its own cache per call.

    The ``while`` form takes a third input, the tokens to generate this call (a 0-d int64 tensor, at most the
    plan's ``max_new_tokens``, which sizes the buffers): one program for every length up to that bound.
    """

    def __init__(self, model: PreTrainedModel, plan: DecodePlan, cache_len: int, loop: str = "unrolled") -> None:
        super().__init__()
        self.model = model
        # the draft model's weights are the program's too: a submodule, so export lifts them as parameters
        self.assistant = plan.assist.assistant if plan.assist is not None else None
        self.plan = plan
        self.cache_len = cache_len
        self.loop = loop

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                max_new_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        cache = new_cache(self.model, self.plan, self.cache_len, self.loop)
        loop = loop_function(self.plan, self.loop)
        if self.loop == "while":
            with loop_tracing.python_min_max():
                return tuple(loop(self.model, self.plan, input_ids, attention_mask, cache, max_new_tokens))
        return tuple(loop(self.model, self.plan, input_ids, attention_mask, cache))


class NoisyDecodeProgram(DecodeProgram):
    """The unrolled loop taking its sampling noise as a third input (``noise_input``): ``steps x batch x width``
    Exp(1) draws, step ``k`` sampling ``probs / noise[k]`` as ``torch.multinomial`` does from its own draws."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,  # type: ignore[override]
                noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with sampling_noise.noise_from(noise):
            return super().forward(input_ids, attention_mask)


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
        assist = assisted.assist_settings(config, assistant, max_new_tokens)
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


def check_loop(loop: str) -> None:
    """A loop form of ``LOOPS``, or ``UnsupportedGeneration`` naming the ones there are."""
    if loop not in LOOPS:
        raise UnsupportedGeneration(f"loop={loop!r} is not a loop form; use one of {', '.join(LOOPS)}")


def _next_tokens(plan: DecodePlan, scores: torch.Tensor, unfinished: torch.Tensor) -> torch.Tensor:
    """One step of ``generate``'s sampling from processed scores: multinomial or argmax, finished rows padded."""
    if plan.do_sample:
        tokens = sampling_noise.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    else:
        tokens = torch.argmax(scores, dim=-1)
    if plan.eos is not None:
        assert plan.pad is not None
        tokens = tokens * unfinished + plan.pad * (1 - unfinished)
    return tokens


def _still_running(plan: DecodePlan, tokens: torch.Tensor, unfinished: torch.Tensor,
                   tail: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """Rows still generating after ``tokens``: not at an EOS id, and not ending in a stop string, judged as
    ``generate``'s criteria judge it. ``tail(width, filler)`` gives the sequence's last ``width`` tokens so far
    (``filler`` before its start)."""
    running = unfinished.clone()  # a while_loop body may not return its input itself
    if plan.eos is not None:
        running = running & ~torch.isin(tokens, plan.eos).long()
    if plan.stop_strings is not None:
        criteria = loop_tracing.view(plan.stop_strings)  # its call re-binds its tensors: keep that out of the plan
        # ids past its embedding read as the "no token" row, which matches no string
        done = criteria(tail(criteria.maximum_token_len, criteria.embedding_vec.shape[0] - 1), None)
        running = running & ~done.long()
    return running


def _last_tokens(sequences: torch.Tensor, width: int, filler: int) -> torch.Tensor:
    """The unrolled loop's sequence has its true length: its last ``width`` tokens, ``filler`` before the start."""
    if sequences.shape[1] >= width:
        return sequences[:, -width:]
    return torch.cat([sequences.new_full((sequences.shape[0], width - sequences.shape[1]), filler), sequences], -1)


def decode_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor,
                attention_mask: torch.Tensor, cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill and every decode step; returns (all tokens, steps ``generate`` would have run).

    This is the function that compiles into one graph: Python control flow here depends only on the
    plan's Python values, never on tensor contents.
    """
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    steps = torch.zeros((), dtype=torch.long, device=input_ids.device)
    sequences = input_ids
    step_input, step_positions = input_ids, initial_positions(attention_mask)
    step_mask: torch.Tensor | None = attention_mask
    for _ in range(plan.max_new_tokens):
        logits = model(input_ids=step_input, cache=cache, **forward_kwargs(plan, step_positions),
                       attention_mask=generate_mask(model, plan, step_mask, cache, step_input, step_positions)).logits
        scores = loop_processors.process_unrolled(plan.processors, sequences, last_scores(logits))
        next_tokens = _next_tokens(plan, scores, unfinished)
        steps = steps + (unfinished.max() > 0).long()  # generate runs a step while any row is unfinished
        sequences = torch.cat([sequences, next_tokens[:, None]], dim=-1)
        unfinished = _still_running(plan, next_tokens, unfinished, functools.partial(_last_tokens, sequences))
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
        step_mask = attention_mask if plan.mask_when_decoding else None
        step_input = next_tokens[:, None]
        step_positions = step_positions[:, -1:] + 1
    return sequences, steps


def decode_while_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor, cache: Any,
                      limit: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The same generation with the decode steps as the body of ``while_loop``: its graph, and so its
    compile time, does not grow with ``max_new_tokens``; the loop exits as soon as every row has finished.

    ``cache`` comes from ``loop_state.loop_cache``; its tensors are loop state (see ``loop_state``). ``limit``
    (a 0-d tensor, at most ``plan.max_new_tokens``) stops it earlier, as ``generate(max_new_tokens=limit)``
    would: the buffers stay sized for the plan, so an exported program serves every length up to it.
    """

    # sizes stay symbolic (no int()): an export with dynamic shapes would otherwise fix them to the example's
    batch, prompt_length = input_ids.shape[0], input_ids.shape[1]
    position_ids = initial_positions(attention_mask)
    full_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, plan.max_new_tokens - 1))], dim=-1)
    sequences = torch.cat([input_ids, input_ids.new_full((batch, plan.max_new_tokens), 0)], dim=-1)
    # prefill, outside the loop: the processors see the prompt as generate shows it to them
    logits = model(input_ids=input_ids, cache=cache, **forward_kwargs(plan, position_ids),
                   attention_mask=generate_mask(model, plan, attention_mask, cache, input_ids, position_ids)).logits
    unfinished = torch.ones(batch, dtype=torch.long, device=input_ids.device)
    prefill_scores = loop_processors.process_unrolled(plan.processors, input_ids, last_scores(logits), isolated=True)
    tokens = _next_tokens(plan, prefill_scores, unfinished)
    sequences = sequences.index_copy(1, torch.full((1,), prompt_length, device=input_ids.device), tokens[:, None])
    first_length = torch.full((), prompt_length + 1, dtype=torch.long, device=input_ids.device)
    unfinished = _still_running(plan, tokens, unfinished,
                                functools.partial(loop_processors.tail, sequences, first_length))
    carried = loop_state.CarriedCache(cache)
    # valid tokens in ``sequences``; the next token is written at this index
    length = torch.full((), prompt_length + 1, dtype=torch.long, device=input_ids.device)
    steps = torch.ones((), dtype=torch.long, device=input_ids.device)
    # carried state must keep one layout across steps: a fresh (batch, 1) tensor, whatever the batch size
    positions = position_ids[:, -1:].clone(memory_format=torch.contiguous_format)

    def condition(steps: torch.Tensor, *state: torch.Tensor) -> torch.Tensor:
        return (steps < (plan.max_new_tokens if limit is None else limit)) & (state[2].max() > 0)

    def body(steps: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, unfinished: torch.Tensor,
             length: torch.Tensor, sequences: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        step_cache = carried.rebuild(tensors)
        positions = positions + 1
        step_input = tokens[:, None]
        mask = generate_mask(model, plan, full_mask if plan.mask_when_decoding else None, step_cache, step_input,
                             positions)
        logits = model(input_ids=step_input, attention_mask=mask, cache=step_cache,
                       **forward_kwargs(plan, positions)).logits
        scores = loop_processors.process(plan.processors, sequences, length, last_scores(logits))
        next_tokens = _next_tokens(plan, scores, unfinished)
        sequences = sequences.index_copy(1, length.reshape(1), next_tokens[:, None])
        running = _still_running(plan, next_tokens, unfinished,
                                 functools.partial(loop_processors.tail, sequences, length + 1))
        return (steps + 1, next_tokens, positions, running, length + 1, sequences, *carried.tensors(step_cache))

    state = loop_tracing.run_while(condition, body,
                                   (steps, tokens, positions, unfinished, length, sequences, *carried.tensors()))
    return state[5], state[0]


def checked_plan(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 generation_config: GenerationConfig | None, loop: str,
                 generate_arguments: dict[str, Any]) -> tuple[torch.Tensor, DecodePlan]:
    """The opening of every entry point (``fullgraph_generate``, ``export_generate``): refuse an unknown loop form
    or ``generate`` argument before any work, then ``prepare`` the plan with the one argument it takes, the
    tokenizer, so both refuse and plan alike."""
    check_loop(loop)
    check_generate_arguments(generate_arguments)
    return prepare(model, input_ids, attention_mask, generation_config, generate_arguments.get("tokenizer"),
                   generate_arguments.get("assistant_model"))


def trimmed(sequences: torch.Tensor, input_ids: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """The one host synchronisation, after the graph: generate's output stops where the last row finished."""
    return sequences[:, : int(input_ids.shape[1]) + int(steps)]


def fullgraph_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    *,
    compiler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    loop: str = "unrolled",
    **generate_arguments: Any,
) -> Any:
    """Generate like ``model.generate(input_ids, attention_mask=..., generation_config=...)``, returning what it
    returns: the sequences, or for beams with ``return_dict_in_generate`` a ``GenerateBeamDecoderOnlyOutput``
    (sequences, beam indices, and with ``output_scores`` the scores).

    ``compiler`` wraps the loop, e.g. ``lambda f: torch.compile(f, fullgraph=True, backend="inductor")``;
    without it the loop runs eagerly. ``loop`` picks the form: "unrolled" or "while" (see ``LOOPS``).
    Greedy and sampling with every warper, beam search and beam sampling (``num_beams``, ``length_penalty``,
    every ``early_stopping``, ``num_return_sequences``), the logits processors of decoder-only generation (the
    n-gram ban in its device form), one or several EOS ids, and left-padded batches are supported; anything else raises
    ``UnsupportedGeneration`` naming the setting and saying why. ``generate_arguments`` are ``generate``'s
    further arguments (``prefix_allowed_tokens_fn``, ``tokenizer``): refused, naming them, unless harmless to
    ignore.
    """
    attention_mask, plan = checked_plan(model, input_ids, attention_mask, generation_config, loop,
                                        generate_arguments)
    cache = new_cache(model, plan, cache_length(input_ids, plan), loop)
    check_mode(model, plan, input_ids, cache, loop)
    function = loop_function(plan, loop)
    run = compiler(function) if compiler is not None else function
    with torch.no_grad(), loop_tracing.traceable_loop(model, loop, plan_models(plan)):
        outputs = run(model, plan, input_ids, attention_mask, cache)
    if plan.beams is not None:
        return beam.beam_result(beam.BeamOutput(*outputs), plan, int(input_ids.shape[1]))
    sequences, steps = outputs
    return trimmed(sequences, input_ids, steps)


def check_mode(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, cache: Any, loop: str) -> None:
    """Refuse, by name, what a plan's decoding mode cannot do with this model's cache, before any graph
    (``fullgraph_generate`` and ``export_generate`` alike)."""
    if plan.beams is not None:
        beam.check_reorderable(model, cache)
    if plan.lookup is not None:
        lookup.check_lookup(model, plan, input_ids, cache)
    if plan.assist is not None:
        assisted.check_assisted(model, plan, input_ids, cache, loop)


def plan_models(plan: DecodePlan) -> tuple[Any, ...]:
    """The models a plan runs besides the target: the draft model of assisted decoding."""
    return (plan.assist.assistant,) if plan.assist is not None else ()


def loop_function(plan: DecodePlan, loop: str) -> Callable[..., Any]:
    """The loop that runs a plan in a loop form: beam search's for a plan with beams, prompt lookup's for one
    with a lookup, assisted decoding's for one with a draft model, else greedy/sampling's."""
    if plan.beams is not None:
        return beam.BEAM_LOOPS[loop]
    if plan.assist is not None:
        return assisted.ASSISTED_LOOPS[loop]
    return lookup.LOOKUP_LOOPS[loop] if plan.lookup is not None else LOOPS[loop]


def _json_settings(config: GenerationConfig) -> dict[str, Any]:
    """The generation settings that differ from the defaults, as JSON (the resolved special-token tensors
    ``generate`` adds are left out: their ids are in the settings already)."""
    settings = {}
    for key, value in config.to_diff_dict().items():
        if key.startswith("_"):
            continue
        try:
            settings[key] = json.loads(json.dumps(value))
        except TypeError:
            continue
    return settings


#: Generation settings whose processors are built for the example's prompt length: a program exported with
#: dynamic shapes would apply them at the wrong positions for other lengths.
PROMPT_LENGTH_SETTINGS = ("min_new_tokens", "min_length")  # min_new_tokens first: it sets min_length


class ExportedGeneration(Protocol):
    """What ``export_generate`` returns: ``generate`` as one program, and what ``save_generate`` saves of it."""

    exported_program: torch.export.ExportedProgram
    #: the loop form, the settings baked in and the input shapes the program takes
    artifact_metadata: dict[str, Any]

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 max_new_tokens: int | None = None) -> torch.Tensor: ...


#: Generation settings whose processors are built for the call's ``max_length``: a ``while`` program run for fewer
#: tokens than its bound would apply them at the bound's length.
MAX_LENGTH_SETTINGS = ("forced_eos_token_id",)


def export_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    *,
    strict: bool = False,
    dynamic: bool = False,
    max_prompt_length: int | None = None,
    max_batch_size: int | None = None,
    loop: str = "unrolled",
    noise_input: bool = False,
    **generate_arguments: Any,
) -> ExportedGeneration:
    """``torch.export.export`` the whole generation loop.

    Returns a callable ``(input_ids, attention_mask) -> tokens`` that runs the ``ExportedProgram`` and trims
    like ``generate``. The generation settings are baked into the program; the cache lives inside it.
    ``dynamic=True`` exports one program for batch sizes from 2 up and prompt lengths up to
    ``max_prompt_length`` (default: twice the example's), with a cache sized for that longest prompt, and
    batch sizes up to ``max_batch_size`` (default: no bound; ExecuTorch plans memory for the largest shape and
    needs one); otherwise the program takes inputs of this shape only. ``loop="while"`` exports the ``while_loop`` form,
    whose callable also takes ``max_new_tokens=`` (1 up to the config's, the default): one program for every
    generation length up to that bound. ``noise_input=True`` (sampling, unrolled form) exports a program that
    takes its sampling noise as a third input instead of calling ``torch.multinomial`` (``sampling_noise``); the
    callable draws that noise from torch's generator as ``generate`` would, so the tokens are still exactly
    ``generate``'s for the same seed, and a runtime without a generator (ExecuTorch) can sample.
    """
    attention_mask, plan = checked_plan(model, input_ids, attention_mask, generation_config, loop,
                                        generate_arguments)
    cache_len = _export_cache_length(plan, input_ids, dynamic, max_prompt_length)
    check_mode(model, plan, input_ids, new_cache(model, plan, cache_len, loop), loop)
    example, dynamic_shapes = _export_example(plan, input_ids, attention_mask, _batch_bound(input_ids, dynamic,
                                                                                           max_batch_size), loop)
    noise = _noise_spec(model, plan, input_ids, attention_mask, loop) if noise_input else None
    module_class = DecodeProgram
    if noise is not None:
        module_class = NoisyDecodeProgram
        example += (noise_draws(noise, plan.max_new_tokens, input_ids),)
        dynamic_shapes = (*dynamic_shapes, {1: torch.export.Dim.AUTO}) if dynamic_shapes is not None else None
    with loop_tracing.traceable_loop(model, loop, plan_models(plan)):
        program = torch.export.export(module_class(model, plan, cache_len, loop), example,
                                      dynamic_shapes=dynamic_shapes, strict=strict)
    module = program.module()
    bound = plan.max_new_tokens

    def run(run_input_ids: torch.Tensor, run_attention_mask: torch.Tensor,
            max_new_tokens: int | None = None) -> torch.Tensor:
        return run_program(module, loop, bound, run_input_ids, run_attention_mask, max_new_tokens, noise)

    exported = cast(ExportedGeneration, run)
    exported.exported_program = program
    # what pytest_fullgraph.artifacts saves beside the program: the settings baked in, the shapes it takes
    exported.artifact_metadata = {"loop": loop, "max_new_tokens": bound, "cache_len": cache_len,
                                  "generation_config": _json_settings(plan.config), "inputs": input_ranges(program),
                                  "noise": noise}
    return exported


def _export_cache_length(plan: DecodePlan, input_ids: torch.Tensor, dynamic: bool,
                         max_prompt_length: int | None) -> int:
    """The exported cache's positions: the example's, or with ``dynamic`` the longest prompt's, after refusing
    settings whose processors are built for the example's prompt length (wrong for any other)."""
    if not dynamic:
        return cache_length(input_ids, plan)
    if plan.drafting is not None:
        mode = "prompt lookup" if plan.lookup is not None else "assisted decoding"
        raise UnsupportedGeneration(f"export_generate(dynamic=True) does not support {mode}: it takes one prompt "
                                    "(batch 1), which dynamic shapes cannot hold; export with dynamic=False")
    for name in PROMPT_LENGTH_SETTINGS:
        if getattr(plan.config, name, 0):
            raise UnsupportedGeneration(f"export_generate(dynamic=True) does not support {name}="
                                        f"{getattr(plan.config, name)!r}: its processor is built for the "
                                        "example's prompt length; export with dynamic=False")
    longest = max_prompt_length if max_prompt_length is not None else 2 * int(input_ids.shape[1])
    if longest < int(input_ids.shape[1]):
        raise UnsupportedGeneration(f"max_prompt_length={longest} is shorter than the example prompt "
                                    f"({int(input_ids.shape[1])})")
    return longest + plan.max_new_tokens  # the mask grows to prompt + new tokens inside the loop


def _batch_bound(input_ids: torch.Tensor, dynamic: bool, max_batch_size: int | None) -> Any:
    """The batch dimension's hint for a dynamic export (None: a static one), bounded by ``max_batch_size``."""
    if max_batch_size is not None and not dynamic:
        raise UnsupportedGeneration("max_batch_size bounds a dynamic export: give dynamic=True, or leave it out")
    if not dynamic:
        return None
    if max_batch_size is not None and max_batch_size < max(2, int(input_ids.shape[0])):
        raise UnsupportedGeneration(f"max_batch_size={max_batch_size} is smaller than the example batch "
                                    f"({int(input_ids.shape[0])}) or 2, the smallest batch a dynamic program takes")
    return torch.export.Dim.AUTO(max=max_batch_size) if max_batch_size is not None else torch.export.Dim.AUTO


def _noise_spec(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                loop: str) -> dict[str, Any]:
    """The noise a ``noise_input`` program takes per step, ``batch x width`` (width: the logits' size, times the
    beams for beam sampling), after refusing what has no such noise."""
    if not plan.do_sample:
        raise UnsupportedGeneration("noise_input=True is for programs that sample (do_sample=True); a greedy program "
                                    "draws nothing")
    if loop != "unrolled":
        raise UnsupportedGeneration("noise_input=True takes the unrolled loop of sampling or beam sampling, not "
                                    f"loop={loop!r}")
    if plan.drafting is not None:
        raise UnsupportedGeneration("noise_input=True takes sampling or beam sampling, not speculative sampling: "
                                    "its draws (per drafted token, then over the draft's length) vary in number "
                                    "per step, so no fixed noise input holds them")
    with torch.no_grad():
        width = int(model(input_ids=input_ids[:, :1], attention_mask=attention_mask[:, :1]).logits.shape[-1])
    return {"per_step": [width * (plan.beams.num_beams if plan.beams is not None else 1)], "dtype": "torch.float32"}


def noise_draws(noise: dict[str, Any], steps: int, input_ids: torch.Tensor) -> torch.Tensor:
    """The noise input of one call of a ``noise_input`` program, drawn from torch's generator now."""
    dtype = getattr(torch, str(noise["dtype"]).removeprefix("torch."))
    return sampling_noise.draws(steps, (int(input_ids.shape[0]), *noise["per_step"]), dtype, input_ids.device)


def _export_example(plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor, batch: Any,
                    loop: str) -> tuple[tuple[torch.Tensor, ...], tuple[Any, ...] | None]:
    """The example inputs and dynamic shapes ``torch.export`` gets (``batch``: the batch dimension's hint, None
    for a static export): a ``while`` program takes its length as a third input (never dynamic: a 0-d tensor),
    after refusing settings built for the bound's ``max_length``."""
    dynamic_shapes: tuple[Any, ...] | None = None
    if batch is not None:
        dynamic_shapes = ({0: batch, 1: torch.export.Dim.AUTO},) * 2
    example: tuple[torch.Tensor, ...] = (input_ids, attention_mask)
    if loop != "while":
        return example, dynamic_shapes
    for name in MAX_LENGTH_SETTINGS:
        if getattr(plan.config, name, None) is not None:
            raise UnsupportedGeneration(f"export_generate(loop='while') does not support {name}="
                                        f"{getattr(plan.config, name)!r}: its processor is built for the "
                                        "bound's max_length; export with loop='unrolled'")
    example += (torch.tensor(plan.max_new_tokens, device=input_ids.device),)
    return example, (*dynamic_shapes, None) if dynamic_shapes is not None else None


def run_program(program: Callable[..., tuple[torch.Tensor, ...]], loop: str, bound: int,
                input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int | None,
                noise: dict[str, Any] | None = None) -> torch.Tensor:
    """Call an exported generation program (in memory, or loaded from an artifact) as ``generate`` is called: a
    ``while`` program gets its length input, checked against its ``bound``; a program that takes its sampling
    noise (``noise``: its metadata) gets it drawn now, as ``generate`` would draw; the output is trimmed like
    ``generate``'s (a beam program's outputs are ``beam.BeamOutput``'s, which tells it from a greedy one)."""
    limit = _generation_limit(loop, bound, max_new_tokens, input_ids.device)
    extra: tuple[torch.Tensor, ...] = ()
    if loop == "while":
        extra = (limit,)
    elif noise is not None:
        extra = (noise_draws(noise, bound, input_ids),)
    outputs = program(input_ids, attention_mask, *extra)
    if len(outputs) == len(beam.BeamOutput._fields):
        return beam_search.trimmed_beams(outputs[0], outputs[1], outputs[2], int(input_ids.shape[1]))[0]
    sequences, steps = outputs
    return trimmed(sequences, input_ids, steps)


def _generation_limit(loop: str, bound: int, max_new_tokens: int | None, device: torch.device) -> torch.Tensor:
    """The third input of a ``while`` program: ``max_new_tokens`` (default: the bound), checked against the
    bound the program's buffers were sized for; an unrolled program takes no such input."""
    if max_new_tokens is None:
        max_new_tokens = bound
    if loop != "while" and max_new_tokens != bound:
        raise UnsupportedGeneration(f"an unrolled program generates its {bound} tokens; max_new_tokens="
                                    f"{max_new_tokens} needs a program exported with loop='while'")
    if not 1 <= max_new_tokens <= bound:
        raise UnsupportedGeneration(f"max_new_tokens={max_new_tokens} is outside what this program takes "
                                    f"(1 to {bound}, the max_new_tokens it was exported with)")
    return torch.tensor(max_new_tokens, device=device)


def input_ranges(program: torch.export.ExportedProgram) -> dict[str, dict[str, Any]]:
    """Each user input's dtype and, per dimension, the [smallest, largest] size the program takes (largest None:
    unbounded), read from the program's own range constraints."""
    import sympy

    user_inputs = list(program.graph_signature.user_inputs)
    ranges: dict[str, dict[str, Any]] = {}
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        value = node.meta["val"]
        dims: list[list[int | None]] = []
        for size in value.shape:
            if isinstance(size, int) or isinstance(size.node.expr, sympy.Integer):
                dims.append([int(size), int(size)])  # fixed, or specialised while exporting
                continue
            bounds = program.range_constraints[size.node.expr]
            # torch's own infinity (int_oo) claims to be finite: only a sympy Integer is a bound
            upper = int(bounds.upper) if isinstance(bounds.upper, sympy.Integer) else None
            dims.append([int(bounds.lower), upper])
        third = "max_new_tokens" if value.dim() == 0 else "noise"  # the while form's length, or sampling noise
        ranges[("input_ids", "attention_mask", third)[user_inputs.index(node.name)]] = {
            "shape": dims, "dtype": str(value.dtype)}
    return ranges


#: Loop forms: "unrolled" (one graph whose size grows with max_new_tokens) and "while" (decode steps as a
#: ``while_loop`` body: constant graph size, early exit when every row has finished).
LOOPS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "unrolled": decode_loop,
    "while": decode_while_loop,
}
