"""Comparing token tensors exactly, and explaining a difference: where, how close eager's choice was, and
whether ``generate``'s own static-cache path is to blame."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

from pytest_fullgraph.core.generation import generate, recompute_config, static_cache_config
from pytest_fullgraph.core.logits import float64_copy, next_token_logits, rounding_step
from pytest_fullgraph.core.mismatch import Mismatch, first_difference
from pytest_fullgraph.core.model_facts import model_dtype
from pytest_fullgraph.core.results import DIVERGENCE, ROUNDING, PrecisionVerdict, first_line

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel


def top1_steps(config: GenerationConfig) -> bool:
    """Whether each new token is the top-1 of one step's logits for its own row's prefix (greedy, also when drafts
    propose it), the only case where a rounding flip can be judged from two logits; not sampling (a draw), nor
    beam search (summed scores across beams; a returned row is not a row of the step's logits)."""
    return not config.do_sample and not beam_search(config)


def beam_search(config: GenerationConfig) -> bool:
    """Whether ``generate`` keeps several beams per prompt (a returned row is then not a row of a step's logits)."""
    return (config.num_beams or 1) > 1


def eager_logit_gap(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                    mismatch: Mismatch) -> float | None:
    """Top-1 minus top-2 logit of the eager step at the mismatch: tiny gaps mean a float-order flip. None in
    beam search, where a returned row is not a row of the step's logits."""
    if beam_search(config):
        return None
    config = copy.deepcopy(config)
    config.output_logits = True
    config.return_dict_in_generate = True
    output: Any = generate(model, inputs, config, seed)
    logits = getattr(output, "logits", None)
    if not logits or not 0 <= mismatch.step < len(logits):
        return None
    top = logits[mismatch.step][mismatch.row].float().topk(2).values
    return float(top[0] - top[1])


def precision_verdict(model: PreTrainedModel, inputs: dict[str, Any], reference: torch.Tensor,
                      mismatch: Mismatch) -> PrecisionVerdict | None:
    """Tell a rounding flip from a divergence at the first differing (greedy) step.

    The next-token logits are recomputed from the same weights and the same prefix (the reference run's tokens
    up to the difference) in float64 and in the model's own dtype. The two tokens are tied within rounding when
    their float64 gap is no larger than one rounding step of the dtype there, nor than twice the largest
    distance between the dtype's logits and float64 at this step (the rounding that piled up through the
    layers; two runs that round differently can each be that far off, in opposite directions). None when it
    cannot be judged (a shape difference, a model that does not run in float64); ``mismatch.precision_note``
    then says why.

    Measured (bench/precision.py, llama hidden 512, float16, inductor without vectorisation): a flip at a
    float64 gap of 1.3 float16 steps, where the two tokens' own float16 errors were 0.0004 but the step's
    largest was 0.0013: a rounding flip that the two tokens' errors alone would have called a divergence.
    """
    import torch

    if mismatch.eager_token is None or mismatch.compiled_token is None:
        mismatch.precision_note = "rounding is not judged where the shapes differ"
        return None
    dtype = model_dtype(model)
    row, position = mismatch.row, mismatch.position
    prompt_width = int(inputs["input_ids"].shape[1])
    prefix = reference[row:row + 1, :position]
    mask = inputs["attention_mask"][row:row + 1]
    mask = torch.cat([mask, mask.new_ones((1, position - prompt_width))], dim=-1)
    tokens = [mismatch.eager_token, mismatch.compiled_token]
    try:
        with torch.no_grad():
            in_dtype = next_token_logits(model, prefix, mask)[0].double()
            exact = next_token_logits(float64_copy(model), prefix, mask)[0].double()
    except Exception as error:  # best effort: the mismatch stands without a class, and says why
        mismatch.precision_note = (f"rounding is not judged: the float64 reference failed "
                                   f"({type(error).__name__}: {first_line(error)})")
        return None
    gap = float(exact[tokens[0]] - exact[tokens[1]])
    step = rounding_step(dtype, float(exact[tokens].abs().max()))
    # over the whole vocabulary: the two tokens' own errors can happen to be small while the run that picked
    # the other token (compiled, reordered) was off by as much as any logit here
    noise = float((in_dtype - exact).abs().max())
    kind = ROUNDING if abs(gap) <= max(step, 2 * noise) else DIVERGENCE
    return PrecisionVerdict(kind, dtype, float(exact[tokens[0]]), float(exact[tokens[1]]), gap, step, noise)


def _cache_length_verdict(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                          eager: torch.Tensor, max_prompt_length: int | None) -> str | None:
    """The model's fault when its tokens depend on the static cache's length and the loop's cache is longer than
    ``generate``'s (the draft modes add a draft's positions; a loop serving prompts up to ``max_prompt_length``
    is sized for the longest): ``generate`` with a static cache of the loop's length.

    Measured: axk2's and deepseek_v32's sparse-attention indexers pick different positions (their ReLU scores tie
    at 0) with a static cache a few positions longer, so ``generate`` itself changes its tokens."""
    import torch
    from transformers.cache_utils import StaticCache

    from pytest_fullgraph.loop.planning import prepare
    from pytest_fullgraph.loop.steps import served_cache_length

    ids = inputs["input_ids"]
    try:
        _, plan = prepare(model, ids, inputs.get("attention_mask"), config, inputs.get("tokenizer"),
                          inputs.get("assistant_model"))
        if plan.drafting is None and max_prompt_length is None:
            return None  # the loop's cache is as long as generate's
        length = served_cache_length(plan, ids, max_prompt_length)
        longer = generate(model, {**inputs, "cache": StaticCache(config=model.config, max_cache_len=length)},
                          config, seed)
    except Exception:  # best effort, as the static-cache note is
        return None
    if torch.equal(longer, eager):
        return None
    where = first_difference(eager, longer, int(ids.shape[1]))
    return (f"; model.generate with a static cache of the loop's {length} positions differs from the default (row "
            f"{where.row}, position {where.position}: {where.eager_token} vs {where.compiled_token}), with one "
            "of generate's own length it does not: the model's tokens depend on its cache's length, the model's "
            "static-cache path, not the loop")


def static_cache_verdict(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                         eager: torch.Tensor, loop: str = "the loop", max_prompt_length: int | None = None) -> str:
    """Whether ``generate`` itself changes its tokens with a static cache, which our loop must use; ``loop`` names
    whose code the level's own loop runs (``Level.own_loop_blame``), blamed when it alone differs.

    Measured: gpt_neo's local attention slices its band mask by the key length, so with a static cache
    longer than ``window_size`` its own ``generate(cache_implementation="static")`` differs from the default.
    That is the model's bug, not the loop's; the message says which. In bfloat16 and float16 the two caches
    also round attention differently (measured on a mid-size llama), which flips a near-tied greedy step or a
    sampled draw near a boundary: the model's static-cache path is blamed only when float64 (a greedy step) or
    float32 (the same comparison, same seed) does not put the difference down to precision.
    """
    import torch

    try:
        static = generate(model, inputs, static_cache_config(config), seed)
    except Exception as error:  # the note is best effort; the mismatch stands
        return f" (model.generate with a static cache failed: {type(error).__name__}: {first_line(error)})"
    if torch.equal(static, eager):
        longer = _cache_length_verdict(model, inputs, config, seed, eager, max_prompt_length)
        return longer or f"; model.generate with a static cache gives the default tokens, so {loop} is at fault"
    where = first_difference(eager, static, int(inputs["input_ids"].shape[1]))
    found = (f"; model.generate with a static cache differs from the default too (row {where.row}, position "
             f"{where.position}: {where.eager_token} vs {where.compiled_token})")
    precision = precision_verdict(model, inputs, eager, where) if top1_steps(config) else None
    if precision is not None and precision.kind == ROUNDING:
        return (f"{found}, by a rounding flip ({precision.describe()}): in {precision.dtype} the two caches round "
                "differently, which shows neither the model's static-cache path nor the loop wrong")
    dtype = model_dtype(model)
    if dtype == "float32" or (precision is not None and precision.kind == DIVERGENCE):
        try:
            recompute_agrees = bool(torch.equal(_recomputed(model, inputs, config, seed), static))
        except Exception:  # best effort, as this whole note: the blame below stands
            recompute_agrees = False
        if recompute_agrees:
            return f"{found}; recomputing every step without a cache gives the static cache's: {REFERENCE_BLAMED}"
        return f"{found}: the model's static-cache path is wrong, not the loop"
    agrees, note = _caches_agree_in_float32(model, inputs, config, seed)
    if agrees:
        draw = "a sampled draw near a boundary" if config.do_sample else "a step"
        return (f"{found}, but not in float32 (same seed and settings): in {dtype} the two caches round attention "
                f"differently and {draw} flips; precision, which shows neither the model's static-cache path nor "
                "the loop wrong")
    if agrees is None:
        return f"{found}: the model's static-cache path is wrong, not the loop ({note})"
    return f"{found}, in float32 too: the model's static-cache path is wrong, not the loop"


def _caches_agree_in_float32(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                             seed: int) -> tuple[bool | None, str]:
    """Do ``generate``'s default and static caches give the same tokens once the model runs in float32? None
    (with why) when the float32 copy cannot run."""
    import torch

    try:
        wide: Any = copy.deepcopy(cast(Any, model)).to(torch.float32)
        default = generate(wide, inputs, config, seed)
        static = generate(wide, inputs, static_cache_config(config), seed)
    except Exception as error:  # best effort: without float32 the blame stands, and says it was not checked
        return None, f"not checked in float32: {type(error).__name__}: {first_line(error)}"
    return bool(torch.equal(default, static)), ""


#: What a verdict says when the eager reference's (default) cache path is the one that is wrong.
REFERENCE_BLAMED = "the default cache's path, the eager reference, is wrong, not the static cache's nor the loop"


def _recomputed(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int) -> torch.Tensor:
    """``generate`` recomputing every step without a cache (transformers PR #48289's reference), same seed."""
    return generate(model, inputs, recompute_config(config), seed)


def reference_against_recompute(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                                 seed: int, eager: torch.Tensor) -> str:
    """After a compiled level's mismatch: whether the eager reference itself differs from recomputing every step
    without a cache (``use_cache=False``, transformers PR #48289's reference), which would make the reference's
    cache path, not the compiled run, the suspect; "" when they agree."""
    import torch

    try:
        recomputed = _recomputed(model, inputs, config, seed)
    except Exception as error:  # a note, best effort: the mismatch stands
        return f" (recomputing without a cache failed: {type(error).__name__}: {first_line(error)})"
    if torch.equal(recomputed, eager):
        return ""
    where = first_difference(eager, recomputed, int(inputs["input_ids"].shape[1]))
    return (f"; the eager reference itself differs from recomputing every step without a cache (use_cache=False) at "
            f"row {where.row}, position {where.position}: {where.eager_token} vs {where.compiled_token}: the "
            "reference's cache path is suspect (--fullgraph-levels=cache judges it)")


def eager_failure_blame(model: PreTrainedModel, inputs: dict[str, Any], base: GenerationConfig,
                        config: GenerationConfig, seed: int, *, by_own_loop: bool, loop: str = "the loop") -> str:
    """Whose fault an eager failure is, where the static cache (which the compiled paths need) may be the cause.

    Measured over every model type: cpmant's and dory's static caches are written one slot past their end, in
    ``model.generate`` as in our loop; without this the message named only ``cache_utils.py``. ``base`` is the
    scenario's config, ``config`` the level's reference config built on it; "" when nothing can be added.
    ``loop`` names whose code the level's own loop runs (``Level.own_loop_blame``).
    """
    if by_own_loop:
        try:
            generate(model, inputs, static_cache_config(base), seed)
        except Exception as error:
            return (f"; model.generate with a static cache fails too ({type(error).__name__}: {first_line(error)}): "
                    f"the model's static-cache path, not {loop}")
        return f"; model.generate with a static cache works, so {loop} is at fault"
    if getattr(config, "cache_implementation", None) != "static":
        return ""
    try:
        generate(model, inputs, base, seed)
    except Exception:  # it fails with the default cache too: nothing about the static cache to say
        return ""
    return ("; model.generate with the default cache works: the model's static-cache path fails (a bug of the model "
            "or transformers, not of the compiler)")
