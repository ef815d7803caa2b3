"""A generation loop that compiles with ``fullgraph=True`` into one graph and matches ``model.generate``.

Everything data-dependent that ``generate`` does on the host (special-token checks, choosing logits
processors, stopping when every row has finished) happens either before the graph, on Python values,
or after it, on its outputs. Inside the graph: prefill, every decode step, logits processing, sampling,
and EOS handling, with no host synchronisation.

The unrolled form runs all ``max_new_tokens`` steps branch-free: rows that have finished emit ``pad_token_id``
(as ``generate`` pads them), and the output is trimmed afterwards to where the last row finished, as ``generate``
returns it. The ``while_loop`` form carries the KV cache as loop state and exits when every row has finished;
its graph does not grow with the tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.core.model_facts import initial_positions
from pytest_fullgraph.loop import processors as loop_processors
from pytest_fullgraph.loop import sampling_noise
from pytest_fullgraph.loop import state as loop_state
from pytest_fullgraph.loop import tracing as loop_tracing
from pytest_fullgraph.loop.exported import (
    DecodeProgram,
    ExportedGeneration,
    NoisyDecodeProgram,
    batch_bound,
    export_cache_length,
    export_example,
    input_ranges,
    json_settings,
    noise_draws,
    noise_spec,
    run_program,
)
from pytest_fullgraph.loop.modes import table as mode_table
from pytest_fullgraph.loop.modes.table import Mode
from pytest_fullgraph.loop.planning import check_generate_arguments, prepare
from pytest_fullgraph.loop.steps import (
    DecodePlan,
    forward_kwargs,
    generate_mask,
    last_scores,
    new_cache,
    prefill_logits,
    served_cache_length,
)

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel


def check_loop(loop: str) -> None:
    """A loop form of ``modes.table.FORMS``, or ``UnsupportedGeneration`` naming the ones there are."""
    if loop not in mode_table.FORMS:
        raise UnsupportedGeneration(f"loop={loop!r} is not a loop form; use one of {', '.join(mode_table.FORMS)}")


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
    for step in range(plan.max_new_tokens):
        if step == 0:  # the prompt, whole or in generate's chunks
            logits = prefill_logits(model, plan, input_ids, attention_mask, cache, step_positions)
        else:
            logits = model(input_ids=step_input, cache=cache, **forward_kwargs(plan, step_positions),
                           attention_mask=generate_mask(model, plan, step_mask, cache, step_input,
                                                        step_positions)).logits
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
    logits = prefill_logits(model, plan, input_ids, attention_mask, cache, position_ids)
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


def fullgraph_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    *,
    compiler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    loop: str = "unrolled",
    max_prompt_length: int | None = None,
    **generate_arguments: Any,
) -> Any:
    """Generate like ``model.generate(input_ids, attention_mask=..., generation_config=...)``, returning what it
    returns: the sequences, or for beams with ``return_dict_in_generate`` a ``GenerateBeamDecoderOnlyOutput``
    (sequences, beam indices, and with ``output_scores`` the scores).

    ``compiler`` wraps the loop, e.g. ``lambda f: torch.compile(f, fullgraph=True, backend="inductor")``;
    without it the loop runs eagerly. ``loop`` picks the form: "unrolled" or "while" (``modes.table.FORMS``).
    Greedy and sampling with every warper, beam search and beam sampling (``num_beams``, ``length_penalty``,
    every ``early_stopping``, ``num_return_sequences``), the logits processors of decoder-only generation (the
    n-gram ban in its device form), one or several EOS ids, and left-padded batches are supported; anything else raises
    ``UnsupportedGeneration`` naming the setting and saying why. ``generate_arguments`` are ``generate``'s
    further arguments (``prefix_allowed_tokens_fn``, ``tokenizer``): refused, naming them, unless harmless to
    ignore. ``max_prompt_length``: one compiled loop for every prompt up to that width (docs/generation.md).
    """
    attention_mask, plan = checked_plan(model, input_ids, attention_mask, generation_config, loop,
                                        generate_arguments)
    cache = new_cache(model, plan, served_cache_length(plan, input_ids, max_prompt_length), loop)
    plan.mode.check(model, plan, input_ids, cache, loop)
    function = plan.mode.loop(loop)
    run = compiler(function) if compiler is not None else function
    for tensor in (input_ids, attention_mask) if compiler is not None and max_prompt_length is not None else ():
        torch._dynamo.maybe_mark_dynamic(tensor, 1)
    with torch.no_grad(), loop_tracing.traceable_loop(model, loop, tuple(plan.mode.models(plan).values())):
        outputs = run(model, plan, input_ids, attention_mask, cache)
    return plan.mode.generated(tuple(outputs), plan, input_ids)


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
    cache_len = export_cache_length(plan, input_ids, dynamic, max_prompt_length)
    plan.mode.check(model, plan, input_ids, new_cache(model, plan, cache_len, loop), loop)
    example, dynamic_shapes = export_example(plan, input_ids, attention_mask,
                                             batch_bound(input_ids, dynamic, max_batch_size), loop)
    noise = noise_spec(model, plan, input_ids, attention_mask, loop) if noise_input else None
    module_class = DecodeProgram
    if noise is not None:
        module_class = NoisyDecodeProgram
        example += (noise_draws(noise, plan.max_new_tokens, input_ids),)
        dynamic_shapes = (*dynamic_shapes, {1: torch.export.Dim.AUTO}) if dynamic_shapes is not None else None
    program_module = module_class(model, plan, cache_len, loop, plan.mode.loop(loop))
    with loop_tracing.traceable_loop(model, loop, tuple(plan.mode.models(plan).values())):
        program = torch.export.export(program_module, example, dynamic_shapes=dynamic_shapes, strict=strict)
    module = program.module()
    bound = plan.max_new_tokens

    def run(run_input_ids: torch.Tensor, run_attention_mask: torch.Tensor,
            max_new_tokens: int | None = None) -> torch.Tensor:
        return run_program(module, loop, bound, run_input_ids, run_attention_mask, max_new_tokens, noise)

    exported = cast(ExportedGeneration, run)
    exported.exported_program = program
    # what pytest_fullgraph.levels.artifacts saves beside the program: the settings baked in, the shapes it takes
    exported.artifact_metadata = {"loop": loop, "max_new_tokens": bound, "cache_len": cache_len,
                                  "generation_config": json_settings(plan.config), "inputs": input_ranges(program),
                                  "noise": noise}
    return exported


#: The loop core's loop per form (``modes.table.FORMS``): greedy and sampling.
LOOPS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "unrolled": decode_loop,
    "while": decode_while_loop,
}
#: The loop core's row in the mode table: greedy and sampling run every plan no other mode claims.
MODE = Mode("core", ("greedy_search", "sample"), plan=lambda request: None, loops=LOOPS)
