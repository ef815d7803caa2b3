"""The ``cache`` level: is the eager reference itself right? Every other level is compared with ``generate`` on the
model's default cache; when that cache path is wrong they all pass against a wrong reference. This level runs
``generate`` three ways, eagerly (no compile): the default cache, recomputing every step without a cache
(``use_cache=False``, the reference, as in transformers PR #48289) and the static cache the compiled levels use.

The tokens must be equal, and each cached path's logits at every step (up to its first token that differs from
recompute's) must be within rounding of recompute's, rounding measured by how far the model's dtype lands from float64
recomputing each step from its prefix (``cache_judge``): a path that is off is a ``divergence``, named with the step,
the row and the first layer whose hidden state is off (its type in the config and its cache layer class); a token
difference where the logits are within rounding is a ``rounding`` flip, with what PR #48289's near-tie rule would have
made of it. A path transformers refuses by name is left out, and said so.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core import breaks
from pytest_fullgraph.core.generation import GENERATE_REFUSES, recompute_config, static_cache_config
from pytest_fullgraph.core.logits import StepOutputs, float64_copy, recompute_steps, rounding_step
from pytest_fullgraph.core.messages import summary
from pytest_fullgraph.core.mismatch import DIVERGENCE, ROUNDING, Mismatch, PrecisionVerdict, first_difference
from pytest_fullgraph.core.model_facts import model_dtype
from pytest_fullgraph.core.outcomes import ERROR, MISMATCH, PASS, SKIP, outcome_rank
from pytest_fullgraph.levels.base import GRAPHS_NOT_COUNTED, GraphRule, Level, RunVerdict
from pytest_fullgraph.levels.cache_judge import Off, first_off, layer_noises, pr_48289_says, step_noises

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.core.compile_events import CountingBackend

#: The paths compared, the reference first; how a message names each.
PATHS: dict[str, str] = {"default": "the default cache", "recompute": "recomputing every step (use_cache=False)",
                         "static": "the static cache"}
#: How a message names a path in the possessive ("recompute's tokens").
_SHORT: dict[str, str] = {"default": "the default cache", "recompute": "recompute", "static": "the static cache"}
#: Generation modes whose step logits are one row per prompt, so a step can be recomputed from a row's prefix.
_STEPWISE_MODES = ("greedy_search", "sample")


@dataclass
class PathRun:
    """One path's generation: ``generate``'s output with its per-step logits, scores and hidden states, or why not."""

    name: str
    output: Any = None
    error: BaseException | None = None

    @property
    def label(self) -> str:
        """The path's name, with the cache class it ran on (recompute keeps none worth naming)."""
        cache = getattr(self.output, "past_key_values", None)
        named = cache is not None and self.name != "recompute"
        return PATHS[self.name] + (f" ({type(cache).__name__})" if named else "")


@dataclass
class _Findings:
    """What the comparison found, the most severe outcome first when it is read."""

    texts: list[tuple[str, str]] = field(default_factory=list)
    mismatch: Mismatch | None = None

    def add(self, outcome: str, text: str, mismatch: Mismatch | None = None) -> None:
        self.texts.append((outcome, text))
        rank = {DIVERGENCE: 2, ROUNDING: 1}
        if mismatch is not None and (self.mismatch is None or
                                     rank.get(mismatch.kind or "", 0) > rank.get(self.mismatch.kind or "", 0)):
            self.mismatch = mismatch

    def verdict(self, passed: str) -> RunVerdict:
        """The findings, failures first; with none, ``passed`` and the notes (paths left out)."""
        failures = [text for outcome, text in self.texts if outcome != PASS]
        notes = [text for outcome, text in self.texts if outcome == PASS]
        if not failures:
            return RunVerdict(PASS, "; ".join([passed, *notes]))
        outcome = max((outcome for outcome, _ in self.texts), key=outcome_rank)
        return RunVerdict(outcome, "; ".join([*failures, *notes]), self.mismatch)


class CacheLevel(Level):
    name = "cache"
    description = ("eager model.generate on the default cache against recomputing every step (use_cache=False) and "
                   "against the static cache: the same tokens, and every step's logits within rounding of recompute's "
                   "(opt-in, no compile)")
    opt_in = True
    graph_rule: GraphRule = GRAPHS_NOT_COUNTED
    #: long enough that the tiny configs' sliding windows fill and slide (an eager run costs little)
    tokens = 16
    #: the paths of the last ``run_compiled`` (checks run one at a time per process), for ``judge_run``
    _runs: dict[str, PathRun] = {}

    def max_new_tokens(self, run_tokens: int) -> int:
        return max(run_tokens, self.tokens)

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        """The three paths, each from the same random state (a sampled path draws what the reference drew)."""
        import torch

        del backend  # nothing is compiled
        state = torch.get_rng_state()
        self._runs = {}
        for name in PATHS:
            torch.set_rng_state(state)
            self._runs[name] = _run_path(model, inputs, config, name)
        default = self._runs["default"]
        if default.error is not None:
            raise default.error
        return default.output.sequences

    def judge_run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                  eager: torch.Tensor, produced: torch.Tensor) -> RunVerdict:
        runs, self._runs = self._runs, {}
        return judge_paths(model, inputs, config, eager, runs)


def _run_path(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, name: str) -> PathRun:
    config = {"static": static_cache_config, "recompute": recompute_config}.get(name, copy.deepcopy)(config)
    config.return_dict_in_generate = True
    config.output_logits = config.output_scores = config.output_hidden_states = True
    try:
        return PathRun(name, model.generate(**inputs, generation_config=config))  # type: ignore[operator]
    except Exception as error:  # a path's failure is a finding of the verdict, not the end of the check
        return PathRun(name, error=error)


def judge_paths(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, eager: torch.Tensor,
                runs: dict[str, PathRun]) -> RunVerdict:
    """The verdict on the three paths: errors, divergences (a path's logits off float64), rounding flips."""
    import torch

    default, findings, width = runs["default"], _Findings(), int(inputs["input_ids"].shape[1])
    if not torch.equal(default.output.sequences, eager):
        return RunVerdict(ERROR, "generate on the default cache gave other tokens when asked for its logits than the "
                                 "check's reference run: the comparison has no fixed reference")
    compared = [runs["default"]]
    for run in (runs["recompute"], runs["static"]):
        if run.error is None:
            compared.append(run)
        elif GENERATE_REFUSES.search(str(run.error)):
            findings.texts.append((PASS, f"{PATHS[run.name]} not compared: transformers' generate refuses it "
                                         f"({summary(run.error)})"))
        else:
            located = breaks.record_from_exception(run.error)
            site = f" at {breaks.error_site(located)}" if located.file else ""
            findings.add(ERROR, f"generate with {PATHS[run.name]} fails{site}: {type(run.error).__name__}: "
                                f"{summary(run.error)} (the default cache works: that path of the model or "
                                "transformers is wrong)")
    if len(compared) == 1:
        if all(outcome == PASS for outcome, _ in findings.texts):  # every other path refused: nothing to compare
            return RunVerdict(SKIP, "; ".join(text for _, text in findings.texts))
        return findings.verdict("")
    mode = str(config.get_generation_mode(inputs.get("assistant_model")).value)
    if mode in _STEPWISE_MODES:
        _judge_steps(model, inputs, compared, findings, width)
    else:
        _judge_tokens_only(compared, findings, width, mode)
    names = ", ".join(run.label for run in compared)
    steps = int(default.output.sequences.shape[1]) - width
    logits = " and every step's logits within rounding of recompute's" if mode in _STEPWISE_MODES else ""
    return findings.verdict(f"{names}: the same tokens over {steps} steps{logits}")


def _judge_tokens_only(compared: list[PathRun], findings: _Findings, width: int, mode: str) -> None:
    """Beams and drafts: a step's logits are not one row per prompt, so only the tokens are compared."""
    reference = compared[0].output.sequences
    for run in compared[1:]:
        if not _same(reference, run.output.sequences):
            where = first_difference(reference, run.output.sequences, width)
            findings.add(MISMATCH, f"{run.label} differs from the default cache at {where.describe(PATHS[run.name])} "
                                   f"(in {mode} a step's logits are not one row per prompt: not judged)", where)


def _same(one: torch.Tensor, other: torch.Tensor) -> bool:
    import torch

    return bool(torch.equal(one, other))


def _judge_steps(model: PreTrainedModel, inputs: dict[str, Any], compared: list[PathRun], findings: _Findings,
                 width: int) -> None:
    """Each cached path's logits at every step up to its first token that differs from recompute's, against
    recompute's (``generate(use_cache=False)``); the dtype's own distance from float64, recomputing each step of the
    default cache's generation, sets how far is rounding. Without recompute (refused), tokens only."""
    truth = next((run for run in compared if run.name == "recompute"), None)
    if truth is None:
        _judge_tokens_only(compared, findings, width, "a generation that cannot be recomputed")
        return
    dtype, reference = model_dtype(model), compared[0].output.sequences
    exact, own, note = _float64_steps(model, inputs, reference, width)
    noises = step_noises(exact, own, len(truth.output.logits))
    for run in (path for path in compared if path is not truth):
        where = None if _same(truth.output.sequences, run.output.sequences) else first_difference(
            truth.output.sequences, run.output.sequences, width)
        valid = len(truth.output.logits) if where is None else where.step + 1
        off = first_off(run.output.logits[:valid], truth.output.logits[:valid], noises[:valid], dtype)
        if off is not None:
            findings.add(MISMATCH, _divergence(model, run, truth, off, exact, own, where, dtype) + note,
                         _off_mismatch(run, truth, off, where, dtype, width))
        elif where is not None:
            findings.add(MISMATCH, f"{run.label} differs from recompute at row {where.row}, position {where.position} "
                                   f"(new token {where.step}): {where.compiled_token} where recompute has "
                                   f"{where.eager_token}, its logits within rounding of recompute's up to it: a "
                                   f"rounding flip; {pr_48289_says(truth.output.scores, where.step)}{note}",
                         _flip_mismatch(where, truth, run, dtype, noises))


def _float64_steps(model: PreTrainedModel, inputs: dict[str, Any], sequences: torch.Tensor, width: int
                   ) -> tuple[list[StepOutputs] | None, list[StepOutputs] | None, str]:
    """Each step recomputed from its prefix in float64 and in the model's dtype, or why not (a note for verdicts)."""
    try:
        exact = recompute_steps(float64_copy(model), sequences, inputs["attention_mask"], width)
        own = recompute_steps(model, sequences, inputs["attention_mask"], width)
    except Exception as error:  # the tolerance falls back to rounding steps alone, and the verdict says why
        return None, None, f" (float64 recomputing failed: {type(error).__name__}: {summary(error)[:160]})"
    return exact, own, ""


def _divergence(model: PreTrainedModel, run: PathRun, truth: PathRun, off: Off, exact: list[StepOutputs] | None,
                own: list[StepOutputs] | None, where: Mismatch | None, dtype: str) -> str:
    """A path off recompute's: where (step, row, first layer off, its type) and what its tokens did."""
    layer = _first_off_layer(run, truth, off.index, exact, own, dtype)
    at_layer = f"; first off at {_layer_name(model, run, layer.index)}" if layer is not None else ""
    steps = len(truth.output.logits)
    tokens = (f"its tokens still equal recompute's over {steps} steps" if where is None else
              f"its tokens differ from recompute's at row {where.row}, position {where.position} (new token "
              f"{where.step}): {where.compiled_token} where recompute has {where.eager_token}")
    return (f"{run.label} is off at step {off.index}: its logits are {off.describe(dtype)}{at_layer}; {tokens}: that "
            "cache path of the model or transformers is wrong")


def _first_off_layer(run: PathRun, truth: PathRun, step: int, exact: list[StepOutputs] | None,
                     own: list[StepOutputs] | None, dtype: str) -> Off | None:
    """At a step that is off, the first hidden state (embeddings first, then each layer's output) that is off."""
    ours, theirs = (getattr(path.output, "hidden_states", None) for path in (run, truth))
    if not ours or not theirs or step >= min(len(ours), len(theirs)) or len(ours[step]) != len(theirs[step]):
        return None
    layers = len(ours[step])
    noises = layer_noises(exact[step] if exact and step < len(exact) else None,
                          own[step] if own and step < len(own) else None, layers)
    return first_off([state[:, -1] for state in ours[step]], [state[:, -1] for state in theirs[step]], noises, dtype)


def _layer_name(model: PreTrainedModel, run: PathRun, hidden_index: int) -> str:
    """A hidden state's layer, with its type in the config (``layer_types``) and its cache layer's class."""
    if hidden_index == 0:
        return "the embeddings"
    index, kinds = hidden_index - 1, []
    layer_types = getattr(model.config.get_text_config(), "layer_types", None)
    if layer_types and index < len(layer_types):
        kinds.append(str(layer_types[index]))
    cache_layers = getattr(getattr(run.output, "past_key_values", None), "layers", None)
    if cache_layers and index < len(cache_layers):
        kinds.append(type(cache_layers[index]).__name__)
    return f"layer {index}" + (f" ({', '.join(kinds)})" if kinds else "")


def _off_mismatch(run: PathRun, truth: PathRun, off: Off, where: Mismatch | None, dtype: str,
                  width: int) -> Mismatch:
    """The mismatch a divergence records: at its differing token when the tokens differ, else at the step whose
    logits are off (the same token on both sides); its precision holds the logit furthest from recompute's."""
    logits = run.output.logits[off.index][off.row].double()
    truths = truth.output.logits[off.index][off.row].double()
    token = int((logits - truths).abs().argmax())
    precision = PrecisionVerdict(DIVERGENCE, dtype, float(truths[token]), float(logits[token]),
                                 float(truths[token] - logits[token]),
                                 rounding_step(dtype, abs(float(truths[token]))), off.noise or 0.0)
    if where is not None:
        where.precision = precision
        return where
    sequences = run.output.sequences
    position = width + off.index
    same = int(sequences[off.row, position]) if position < sequences.shape[1] else None
    return Mismatch(off.row, position, off.index, same, same, None, list(sequences.shape), list(sequences.shape),
                    precision, f"logit of token {token}: recompute's vs {PATHS[run.name]}'s")


def _flip_mismatch(where: Mismatch, truth: PathRun, run: PathRun, dtype: str,
                   noises: list[float | None]) -> Mismatch:
    """A rounding flip's mismatch: recompute's logits of the two tokens at the step, a ``rounding`` verdict."""
    if where.eager_token is None or where.compiled_token is None or where.step >= len(truth.output.logits):
        return where
    row = truth.output.logits[where.step][where.row].double()
    first, second = float(row[where.eager_token]), float(row[where.compiled_token])
    where.precision = PrecisionVerdict(ROUNDING, dtype, first, second, first - second,
                                       rounding_step(dtype, max(abs(first), abs(second))), noises[where.step] or 0.0)
    return where
