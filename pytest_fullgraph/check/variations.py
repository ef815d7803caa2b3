"""The second request: a passing check's compiled object called again, once per variation its level declares
(``Level.variations``), under ``torch.compiler.set_stance("fail_on_recompile")``.

A call that would recompile is stopped before it compiles (no compile time spent) and its failing guards are
recorded, located (``core.guards``); a call that runs must give exactly eager ``generate``'s tokens for the same
inputs and config. A recompile the level promises not to make (``Level.no_recompile``) fails the check as a
``break`` at the guard's site, blamed by its origin; any other is reported, not failed. The variations are data
(``VARIATIONS``), each a change of the check's inputs or config.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.check.compare import first_difference
from pytest_fullgraph.check.inputs import left_padded_prompts, model_generation_defaults
from pytest_fullgraph.check.own_loop import own_loop_difference, own_loop_eagerly
from pytest_fullgraph.check.state import CheckRun
from pytest_fullgraph.core.generation import generate, seeded
from pytest_fullgraph.core.guards import guards_from_refusal, is_recompile_refusal
from pytest_fullgraph.core.messages import first_line
from pytest_fullgraph.core.model_facts import model_device, vocab_size
from pytest_fullgraph.core.outcomes import BREAK, MISMATCH
from pytest_fullgraph.core.recompiles import DIFFERENT, EQUAL, FAILED, RECOMPILED, Variation

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig

    from pytest_fullgraph.core.mismatch import Mismatch

#: A variation made concrete for one check: its inputs, its config and what changed, in words.
Made = tuple[dict[str, Any], "GenerationConfig", str]


@dataclass(frozen=True)
class Difference:
    """A second request whose compiled tokens differ from eager ``generate``'s: where, and the call's inputs, config
    and eager tokens, to tell whose difference it is."""

    mismatch: Mismatch
    made: Made
    eager: torch.Tensor


@dataclass(frozen=True)
class VariationKind:
    """One way a second request differs from the first; ``make`` returns None where it does not apply."""

    name: str
    meaning: str
    make: Callable[[CheckRun, torch.Tensor], Made | None]


def _prompts(run: CheckRun, lengths: list[int], seed: int) -> dict[str, Any]:
    """Left-padded prompts of ``lengths`` on the model's device, with the check's further ``generate`` arguments."""
    prompts = left_padded_prompts(lengths, seed, vocab_size(run.model))
    device = model_device(run.model)
    further = {name: value for name, value in run.inputs.items() if name not in ("input_ids", "attention_mask")}
    return {**{name: tensor.to(device) for name, tensor in prompts.items()}, **further}


def _lengths(run: CheckRun) -> list[int]:
    return [int(length) for length in run.inputs["attention_mask"].sum(-1).tolist()]


def _same_shape(run: CheckRun, eager: torch.Tensor) -> Made:
    return _prompts(run, _lengths(run), run.seed + 1), run.reference, "other prompt tokens, same shapes"


def _prompt_length(run: CheckRun, eager: torch.Tensor) -> Made:
    longer = [length + 3 for length in _lengths(run)]
    return (_prompts(run, longer, run.seed + 2), run.reference,
            f"prompt width {run.prompt_width} -> {max(longer)}")


def _batch_size(run: CheckRun, eager: torch.Tensor) -> Made:
    lengths = _lengths(run)
    return (_prompts(run, [*lengths, lengths[0]], run.seed + 3), run.reference,
            f"batch size {len(lengths)} -> {len(lengths) + 1}")


def _settings(run: CheckRun, eager: torch.Tensor) -> Made | None:
    """Sampling: other temperature, top-k and top-p; otherwise another EOS id, one that row 0 emits."""
    config = copy.deepcopy(run.reference)
    if config.do_sample:
        changes = {"temperature": 0.7 if config.temperature != 0.7 else 0.9,
                   "top_k": 5 if config.top_k != 5 else 7, "top_p": 0.8 if config.top_p != 0.8 else 0.9}
        described = ", ".join(f"{name} {getattr(config, name)} -> {value}" for name, value in changes.items())
        for name, value in changes.items():
            setattr(config, name, value)
        return dict(run.inputs), config, described
    current = run.result.eos_token_id
    emitted = [int(token) for token in eager[0, run.prompt_width + 1:].tolist() if int(token) != current]
    if not emitted:
        return None
    config.eos_token_id = emitted[0]
    return dict(run.inputs), config, f"EOS id {current} -> {emitted[0]}"


def _max_new_tokens(run: CheckRun, eager: torch.Tensor) -> Made | None:
    config = copy.deepcopy(run.reference)
    if not config.max_new_tokens or config.max_new_tokens < 2:
        return None
    config.max_new_tokens -= 1
    return dict(run.inputs), config, f"max_new_tokens {config.max_new_tokens + 1} -> {config.max_new_tokens}"


VARIATIONS: dict[str, VariationKind] = {kind.name: kind for kind in (
    VariationKind("same_shape", "other prompt tokens of the same shapes (transformers' compile test's second "
                                "generation)", _same_shape),
    VariationKind("prompt_length", "prompts 3 tokens longer", _prompt_length),
    VariationKind("batch_size", "one more prompt in the batch", _batch_size),
    VariationKind("settings", "other temperature, top-k and top-p when sampling, else another EOS id", _settings),
    VariationKind("max_new_tokens", "one new token fewer", _max_new_tokens),
)}


def try_variations(run: CheckRun, eager: torch.Tensor, backend: Any) -> None:
    """Call the level's compiled object once per variation it declares; a broken promise or a difference in tokens
    becomes the check's outcome (the first one met), every call is kept in ``result.variations``."""
    result, level = run.result, run.level
    started = time.perf_counter()
    differences: dict[str, Difference] = {}
    for name in level.variations:
        made = VARIATIONS[name].make(run, eager)
        if made is None:
            continue
        variation, difference = _call_again(run, name, made, backend)
        if difference is not None:
            differences[name] = difference
        variation.promised = name in level.no_recompile
        if variation.promised and variation.recompiled:
            variation.excused = level.recompile_excuse(run.model, run.reference, name)
        result.variations.append(variation)
    result.timings["variations_s"] = time.perf_counter() - started
    _judge(run, differences)


def _call_again(run: CheckRun, name: str, made: Made, backend: Any) -> tuple[Variation, Difference | None]:
    """The call, judged; with where its tokens first differ from eager's when they do."""
    import torch

    inputs, config, change = made
    try:
        with model_generation_defaults(run.model, run.result.eos_token_id):
            eager = _eager_reference(run, name, inputs, config)
    except Exception as error:  # the variation's own reference failed: nothing to judge the compiled call by
        return Variation(name, change, FAILED, detail=f"eager generate failed: {type(error).__name__}: "
                                                      f"{first_line(error)}"), None
    try:
        with torch.compiler.set_stance("fail_on_recompile"), model_generation_defaults(run.model,
                                                                                       run.result.eos_token_id):
            tokens = seeded(run.seed, lambda: run.level.run_again(run.model, inputs, config, backend))
    except Exception as error:  # isolate: a variation's failure is recorded with it, the check's verdict stands
        if is_recompile_refusal(error):
            return Variation(name, change, RECOMPILED, guards=guards_from_refusal(str(error))), None
        return Variation(name, change, FAILED, detail=f"{type(error).__name__}: {first_line(error)}"), None
    if torch.equal(eager, tokens):
        return Variation(name, change, EQUAL), None
    difference = first_difference(eager, tokens, int(inputs["input_ids"].shape[1]))
    return Variation(name, change, DIFFERENT, detail=difference.describe()), Difference(difference, made, eager)


#: Eager references of variations, shared by the levels whose reference configs are equal (one model at a time).
_EAGER: dict[tuple[Any, ...], tuple[Any, torch.Tensor]] = {}


def _eager_reference(run: CheckRun, name: str, inputs: dict[str, Any], config: GenerationConfig) -> torch.Tensor:
    key = (id(run.model), run.scenario.name, run.result.dtype, name, config.to_json_string(use_diff=False))
    kept = _EAGER.get(key)
    if kept is not None and kept[0] is run.model:
        return kept[1]
    if any(model is not run.model for model, _ in _EAGER.values()):
        _EAGER.clear()
    tokens = generate(run.model, inputs, config, run.seed)
    _EAGER[key] = (run.model, tokens)
    return tokens


def _judge(run: CheckRun, differences: dict[str, Difference]) -> None:
    """The first broken promise fails the check as a break at its guard; else the first call whose tokens differ
    makes it a mismatch; else the pass stands, its message counting the variations."""
    result = run.result
    broken = next((variation for variation in result.variations if variation.broken_promise), None)
    if broken is not None:
        guard = broken.guards[0]
        result.outcome = BREAK
        result.first_break = guard.as_break(f"guard {guard.guard} failed on {broken.name} ({broken.change})")
        result.message = (f"recompiles on {broken.name} ({broken.change}), which level {run.level.name!r} promises "
                          f"to serve without recompiling: {guard.summary()}")
        return
    different = next((variation for variation in result.variations if variation.result == DIFFERENT), None)
    if different is not None:
        difference = differences[different.name]
        result.outcome, result.mismatch = MISMATCH, difference.mismatch
        result.message = (f"called again with {different.change} (no recompile), the compiled {run.level.name} "
                          f"gives tokens that differ from eager at {different.detail}{_whose(run, difference)}")
        return
    if result.variations:
        recompiled = sum(variation.result == RECOMPILED for variation in result.variations)
        result.message += (f"; called again {len(result.variations)} time(s): "
                           f"{recompiled} would recompile" if recompiled else
                           f"; called again {len(result.variations)} time(s), no recompile")


def _whose(run: CheckRun, difference: Difference) -> str:
    """The first call's diagnosis on the second request's inputs: the level's own loop run eagerly on them either
    gives ``generate``'s tokens (the compiled program alone differs) or not (whose path, as for a first call)."""
    inputs, config, _ = difference.made
    again = replace(run, inputs=inputs, config=config)  # reads the run, writes nothing to its result
    loop = run.level.own_loop
    try:
        with model_generation_defaults(run.model, run.result.eos_token_id):
            ours = own_loop_eagerly(again)
            found = None if ours is None else own_loop_difference(again, difference.eager, ours)
    except Exception as error:  # a note, best effort: the mismatch stands
        return f"; running {loop} eagerly on these inputs failed: {type(error).__name__}: {first_line(error)}"
    if ours is None:
        return ""
    if found is None:
        return (f"; {loop} run eagerly on these inputs gives model.generate's tokens: the compiled program differs "
                "from the loop it compiled")
    mismatch, verdict = found
    return f"; {loop} run eagerly on these inputs differs too, at {mismatch.describe(loop)}{verdict}"
