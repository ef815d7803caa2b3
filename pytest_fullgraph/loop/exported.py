"""An exported generation program's edges: the inputs ``torch.export`` gets, calling a program as ``generate``
is called, and what is saved beside it.

A program (in memory from ``export_generate``, or loaded from an artifact) takes the prompt, its mask and, by its
form, its length or its sampling noise; its outputs are trimmed as ``generate``'s are. Everything here refuses by
name what a program cannot take, before the export or the call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.loop import sampling_noise
from pytest_fullgraph.loop import tracing as loop_tracing
from pytest_fullgraph.loop.modes import table as mode_table
from pytest_fullgraph.loop.modes.table import DecodePlan
from pytest_fullgraph.loop.steps import cache_length, new_cache

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel


class DecodeProgram(torch.nn.Module):
    """The loop as a module, the form ``torch.export`` takes; it makes its own cache per call.

    The ``while`` form takes a third input, the tokens to generate this call (a 0-d int64 tensor, at most the
    plan's ``max_new_tokens``, which sizes the buffers): one program for every length up to that bound.
    """

    def __init__(self, model: PreTrainedModel, plan: DecodePlan, cache_len: int, loop: str,
                 run_loop: Callable[..., Any]) -> None:
        super().__init__()
        self.model = model
        #: the plan's loop in this form (``Mode.loop``): given, so this module needs no loop's module
        self.run_loop = run_loop
        # the mode's other models' weights (a draft model's) are the program's too: submodules, so export lifts them
        # as parameters
        for name, other in plan.mode.models(plan).items():
            self.add_module(name, other)
        self.plan = plan
        self.cache_len = cache_len
        self.loop = loop

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                max_new_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        cache = new_cache(self.model, self.plan, self.cache_len, self.loop)
        if self.loop == "while":
            with loop_tracing.python_min_max():
                return tuple(self.run_loop(self.model, self.plan, input_ids, attention_mask, cache, max_new_tokens))
        return tuple(self.run_loop(self.model, self.plan, input_ids, attention_mask, cache))


class NoisyDecodeProgram(DecodeProgram):
    """The unrolled loop taking its sampling noise as a third input (``noise_input``): ``steps x batch x width``
    Exp(1) draws, step ``k`` sampling ``probs / noise[k]`` as ``torch.multinomial`` does from its own draws."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,  # type: ignore[override]
                noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with sampling_noise.noise_from(noise):
            return super().forward(input_ids, attention_mask)


def json_settings(config: GenerationConfig) -> dict[str, Any]:
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


def export_cache_length(plan: DecodePlan, input_ids: torch.Tensor, dynamic: bool,
                         max_prompt_length: int | None) -> int:
    """The exported cache's positions: the example's, or with ``dynamic`` the longest prompt's, after refusing
    settings whose processors are built for the example's prompt length (wrong for any other)."""
    plan.mode.check_export("dynamic" if dynamic else "static")
    if not dynamic:
        return cache_length(input_ids, plan)
    for name in PROMPT_LENGTH_SETTINGS:
        if getattr(plan.config, name, 0):
            raise UnsupportedGeneration(f"export_generate(dynamic=True) does not support {name}="
                                        f"{getattr(plan.config, name)!r}: its processor is built for the "
                                        "example's prompt length; export with dynamic=False")
    if getattr(plan.config, "prefill_chunk_size", None):
        raise UnsupportedGeneration(f"export_generate(dynamic=True) does not support prefill_chunk_size="
                                    f"{plan.config.prefill_chunk_size!r}: the chunks are cut from the example's prompt "
                                    "length; export with dynamic=False")
    longest = max_prompt_length if max_prompt_length is not None else 2 * int(input_ids.shape[1])
    if longest < int(input_ids.shape[1]):
        raise UnsupportedGeneration(f"max_prompt_length={longest} is shorter than the example prompt "
                                    f"({int(input_ids.shape[1])})")
    return longest + plan.max_new_tokens  # the mask grows to prompt + new tokens inside the loop


def batch_bound(input_ids: torch.Tensor, dynamic: bool, max_batch_size: int | None) -> Any:
    """The batch dimension's hint for a dynamic export (None: a static one), bounded by ``max_batch_size``."""
    if max_batch_size is not None and not dynamic:
        raise UnsupportedGeneration("max_batch_size bounds a dynamic export: give dynamic=True, or leave it out")
    if not dynamic:
        return None
    if max_batch_size is not None and max_batch_size < max(2, int(input_ids.shape[0])):
        raise UnsupportedGeneration(f"max_batch_size={max_batch_size} is smaller than the example batch "
                                    f"({int(input_ids.shape[0])}) or 2, the smallest batch a dynamic program takes")
    return torch.export.Dim.AUTO(max=max_batch_size) if max_batch_size is not None else torch.export.Dim.AUTO


def noise_spec(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                loop: str) -> dict[str, Any]:
    """The noise a ``noise_input`` program takes per step, ``batch x width`` (width: the logits' size, times the
    beams for beam sampling), after refusing what has no such noise."""
    if not plan.do_sample:
        raise UnsupportedGeneration("noise_input=True is for programs that sample (do_sample=True); a greedy program "
                                    "draws nothing")
    if loop != "unrolled":
        raise UnsupportedGeneration("noise_input=True takes the unrolled loop of sampling or beam sampling, not "
                                    f"loop={loop!r}")
    plan.mode.check_export("noise_input")
    with torch.no_grad():
        width = int(model(input_ids=input_ids[:, :1], attention_mask=attention_mask[:, :1]).logits.shape[-1])
    return {"per_step": [plan.mode.noise_width(plan, width)], "dtype": "torch.float32"}


def noise_draws(noise: dict[str, Any], steps: int, input_ids: torch.Tensor) -> torch.Tensor:
    """The noise input of one call of a ``noise_input`` program, drawn from torch's generator now."""
    dtype = getattr(torch, str(noise["dtype"]).removeprefix("torch."))
    return sampling_noise.draws(steps, (int(input_ids.shape[0]), *noise["per_step"]), dtype, input_ids.device)


def export_example(plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor, batch: Any,
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
    ``generate``'s (by the mode whose loop returns as many outputs: ``modes.table.program_result``)."""
    limit = _generation_limit(loop, bound, max_new_tokens, input_ids.device)
    extra: tuple[torch.Tensor, ...] = ()
    if loop == "while":
        extra = (limit,)
    elif noise is not None:
        extra = (noise_draws(noise, bound, input_ids),)
    return cast(torch.Tensor, mode_table.program_result(tuple(program(input_ids, attention_mask, *extra)), input_ids))


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

