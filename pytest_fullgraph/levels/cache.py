"""The ``cache`` level: is the eager reference itself right? Every other level is compared with ``generate`` on the
model's default cache; when that cache path is wrong they all pass against a wrong reference. This level runs
``generate`` three ways, eagerly (no compile): the default cache, recomputing every step without a cache
(``use_cache=False``, the reference, as in transformers PR #48289) and the static cache the compiled levels use.

The tokens must be equal, and each path's logits at every step (up to its first differing token) must be within
rounding of float64 recomputing that step from the same prefix (``cache_judge``): a path that is off is a
``divergence``, named with the step, the row and the first layer whose hidden state is off (its type in the config
and its cache layer class); a token difference where every path is within rounding is a ``rounding`` flip, with what
PR #48289's near-tie rule would have made of it. A path transformers refuses by name is left out, and said so.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core import breaks
from pytest_fullgraph.core.generation import GENERATE_REFUSES, static_cache_config
from pytest_fullgraph.core.logits import StepOutputs, float64_copy, recompute_steps, rounding_step
from pytest_fullgraph.core.messages import summary
from pytest_fullgraph.core.mismatch import DIVERGENCE, ROUNDING, Mismatch, PrecisionVerdict, first_difference
from pytest_fullgraph.core.model_facts import model_dtype
from pytest_fullgraph.core.outcomes import ERROR, MISMATCH, PASS, SKIP, outcome_rank
from pytest_fullgraph.levels.base import GRAPHS_NOT_COUNTED, GraphRule, Level, RunVerdict
from pytest_fullgraph.levels.cache_judge import Off, first_off_layer, first_off_step, pr_48289_says

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
        cache = getattr(self.output, "past_key_values", None)
        return PATHS[self.name] + (f" ({type(cache).__name__})" if cache is not None else "")


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
                   "against the static cache: the same tokens, and every step's logits within rounding of float64 "
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
    config = static_cache_config(config) if name == "static" else copy.deepcopy(config)
    if name == "recompute":
        config.use_cache = False
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
    logits = " and every step's logits within rounding of float64" if mode in _STEPWISE_MODES else ""
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
    """Each path's logits at every step up to its first differing token, against float64 recomputing that step
    from the reference's prefix; the dtype's own recompute sets how far is rounding. The default cache's tokens are
    held against recompute's, the others' against the default's."""
    dtype, reference = model_dtype(model), compared[0].output.sequences
    exact = recompute_steps(float64_copy(model), reference, inputs["attention_mask"], width)
    own = recompute_steps(model, reference, inputs["attention_mask"], width)
    default = compared[0]
    reference_off = first_off_step(default.output.logits, exact, own, dtype, len(exact))
    for run in compared:
        other = compared[1] if run is default and len(compared) > 1 else default
        where = (None if _same(other.output.sequences, run.output.sequences) else
                 first_difference(other.output.sequences, run.output.sequences, width))
        off = reference_off if run is default else first_off_step(
            run.output.logits, exact, own, dtype, len(exact) if where is None else where.step + 1)
        if off is not None:
            findings.add(MISMATCH, _divergence(model, run, other, off, exact, own, where, dtype),
                         _off_mismatch(run, off, exact, where, dtype, width))
        elif where is not None and run is not default and (reference_off is None or reference_off.index > where.step):
            if where.eager_token is not None and where.compiled_token is not None and where.step < len(exact):
                where.precision = _token_gap(exact[where.step], own[where.step], where, ROUNDING, dtype)
            findings.add(MISMATCH, f"{run.label} differs from the default cache at row {where.row}, position "
                                   f"{where.position} (new token {where.step}): {where.eager_token} vs "
                                   f"{where.compiled_token}, with every path's logits within rounding of float64 up "
                                   f"to it: a rounding flip; {pr_48289_says(default.output.scores, where.step)}",
                         where)


def _divergence(model: PreTrainedModel, run: PathRun, other: PathRun, off: Off, exact: list[StepOutputs],
                own: list[StepOutputs], where: Mismatch | None, dtype: str) -> str:
    """A path off float64: where (step, row, first layer off, its type) and what its tokens did."""
    hidden_states = getattr(run.output, "hidden_states", None)
    layer = None
    if hidden_states and off.index < len(hidden_states):
        layer = first_off_layer([state[:, -1] for state in hidden_states[off.index]], exact[off.index],
                                own[off.index], dtype)
    at_layer = f"; first off at {_layer_name(model, run, layer.index)}" if layer is not None else ""
    tokens = (f"its tokens still equal {_SHORT[other.name]}'s over {len(exact)} steps" if where is None else
              f"its tokens differ from {_SHORT[other.name]}'s at row {where.row}, position {where.position} (new "
              f"token {where.step}): {where.eager_token} vs {where.compiled_token}")
    whose = ("generate's no-cache run feeds the model otherwise than a plain forward of each row's unpadded prefix "
             "(padding, or generate's inputs)" if run.name == "recompute"
             else "that cache path of the model or transformers is wrong")
    return f"{run.label} is off at step {off.index}: its logits are {off.describe(dtype)}{at_layer}; {tokens}: {whose}"


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


def _off_mismatch(run: PathRun, off: Off, exact: list[StepOutputs], where: Mismatch | None, dtype: str,
                  width: int) -> Mismatch:
    """The mismatch a divergence records: at its differing token when the tokens differ, else at the step whose
    logits are off (the same token on both sides), with the logit furthest off float64."""
    if where is not None and where.eager_token is not None and where.compiled_token is not None and \
            where.step < len(exact):
        where.precision = _token_gap(exact[where.step], None, where, DIVERGENCE, dtype, off.noise)
        return where
    logits = run.output.logits[off.index][off.row].double()
    truth = exact[off.index].logits[off.row]
    token = int((logits - truth).abs().argmax())
    sequences = run.output.sequences
    position = width + off.index
    same = int(sequences[off.row, position]) if position < sequences.shape[1] else None
    shape = list(sequences.shape)
    precision = PrecisionVerdict(DIVERGENCE, dtype, float(truth[token]), float(logits[token]),
                                 float(truth[token] - logits[token]),
                                 rounding_step(dtype, float(truth[token].abs())), off.noise)
    return Mismatch(off.row, position, off.index, same, same, None, shape, shape, precision,
                    f"logit of token {token}: float64 vs {PATHS[run.name]}")


def _token_gap(exact: StepOutputs, own: StepOutputs | None, where: Mismatch, kind: str, dtype: str,
               noise: float | None = None) -> PrecisionVerdict:
    """The two tokens' float64 logits at the differing step, and the kind the comparison found."""
    row = exact.logits[where.row]
    first, second = float(row[int(where.eager_token or 0)]), float(row[int(where.compiled_token or 0)])
    if noise is None:
        noise = float((own.logits - exact.logits).abs().max()) if own is not None else 0.0
    return PrecisionVerdict(kind, dtype, first, second, first - second,
                            rounding_step(dtype, max(abs(first), abs(second))), noise)
