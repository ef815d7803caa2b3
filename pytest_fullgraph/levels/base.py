"""Levels: the ways of compiling generation that a check can judge, one strategy object each.

A level owns what differs between them: the generation config of its eager reference, its compiled run
(``fullgraph=True``), its diagnostic run (every break, without fullgraph), whether it has a loop of its own
that must equal ``generate`` when run eagerly, and its graph rule. ``check.run_check`` asks these questions
and never branches on a level's name. Third parties add levels with the ``pytest_fullgraph_register_levels``
hook; the plugin's own tests drive the check's decision tree with fake levels. The built-in levels are in
``builtin_levels``.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.model_facts import defined_at, keeps_own_cache_class
from pytest_fullgraph.core.results import BREAK, ERROR, MODE_NEVER_COMPILES, SKIP
from pytest_fullgraph.core.suggest import LIST_LEVELS, select_names

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.core.compile_events import CompileTrace, CountingBackend


@dataclass(frozen=True)
class RuleViolation:
    outcome: str
    message: str


#: How a reason starts when ``generate`` would have compiled but ran only the uncompiled first forward.
PREFILL_ONLY = "transformers' assisted decoding runs the target's first forward"
#: Generation modes whose loop in transformers (5.24: ``_beam_search``) never calls ``get_compiled_call``.
UNCOMPILED_MODES = ("beam_search", "beam_sample")


class GraphRule:
    """What the graphs of a level's compiled run must look like; ``judge`` says how a run broke the rule."""

    name = "graphs counted, at least one"
    #: False: the run makes no dynamo graphs to count (torch.export), so the report records none
    counts_graphs = True

    def judge(self, trace: CompileTrace, level: str, model: Any, mode: str = "",
              config: GenerationConfig | None = None,
              rerun: Callable[[], object] | None = None) -> RuleViolation | None:
        """``mode``: the generation mode of the run (``GenerationMode``'s value), ``config`` its generation config
        and ``rerun`` the compiled run again: what can say why nothing was compiled."""
        if trace.graph_count == 0:
            why = (f"transformers' {mode} {MODE_NEVER_COMPILES}: only greedy search and sampling "
                   "(_sample) and assisted decoding use the compiled forward" if mode in UNCOMPILED_MODES else
                   why_generate_compiled_nothing(model, config, rerun, mode))
            if why.startswith(PREFILL_ONLY):  # nobody's failure: a longer generation reaches the compiled forward
                return RuleViolation(SKIP, f"not judged, nothing was compiled: transformers ran level {level!r} "
                                           f"eagerly ({why}; --fullgraph-max-new-tokens can lengthen it)")
            return RuleViolation(ERROR, f"nothing was compiled: transformers ran level {level!r} eagerly ({why})")
        return None


def why_generate_compiled_nothing(model: Any, config: GenerationConfig | None,
                                  rerun: Callable[[], object] | None = None, mode: str = "") -> str:
    """``generate`` compiles the forward only on a compileable cache it built (5.24's
    ``_valid_auto_compile_criteria``) and through ``get_compiled_call``; which part was missing, where it can tell:
    the message named only the model type before, and mpt's cause was its config, not its code. What the model
    and config cannot say, a watched ``rerun`` can: the cache generate chose by, and how many forwards it ran."""
    if config is not None and hasattr(model, "_prepare_generation_config"):
        merged, _ = model._prepare_generation_config(copy.deepcopy(config))
        if merged.use_cache is False:
            return ("the generation config, merged with the model's, sets use_cache=False: generate builds no cache "
                    "and compiles only with one")
    if keeps_own_cache_class(model):
        return (f"generate builds {type(model).__name__} no cache, since it keeps one of its own class "
                "(_supports_default_dynamic_cache() is False), and compiles only with one")
    compiled_call = getattr(model, "get_compiled_call", None)
    if callable(compiled_call) and compiled_call(getattr(config, "compile_config", None)) == model.__call__:
        where = defined_at(type(model).get_compiled_call)
        return (f"transformers' get_compiled_call{f' ({where})' if where else ''} hands generate "
                f"{type(model).__name__}'s forward uncompiled (by model type)")
    seen = watch_auto_compile(model, rerun) if rerun is not None else None
    return (seen.why(mode, getattr(config, "max_new_tokens", None)) if seen is not None else None) or \
        f"model type {getattr(model.config, 'model_type', '?')!r} or its cache is not compiled by generate"


@dataclass
class AutoCompileWatch:
    """What ``generate`` decided about compiling in a rerun: the cache it judged, the layers of that cache which
    say they are not compileable, its verdict (None: it never asked) and how many times it ran the forward."""

    cache: str = ""
    uncompileable_layers: tuple[str, ...] = ()
    chose_compile: bool | None = None
    forwards: int = 0

    def why(self, mode: str, max_new_tokens: int | None) -> str | None:
        if self.chose_compile is False and self.uncompileable_layers:
            return (f"the {self.cache} generate built has layers that say they are not compileable "
                    f"({', '.join(self.uncompileable_layers)}), so _valid_auto_compile_criteria keeps the forward "
                    "uncompiled")
        if self.chose_compile is False:
            built = "no cache" if self.cache == "no cache" else f"a {self.cache}"
            return f"generate built {built}, with which _valid_auto_compile_criteria keeps the forward uncompiled"
        if self.chose_compile and mode == "assisted_generation" and self.forwards <= 1:
            return (f"{PREFILL_ONLY} (the prefill, which verifies the first draft) uncompiled and compiles only the "
                    "later ones; this generation needed no later one: the first forward's tokens (the draft it "
                    f"accepted and the target's next token) filled max_new_tokens={max_new_tokens}")
        return None


def watch_auto_compile(model: Any, rerun: Callable[[], object]) -> AutoCompileWatch:
    """Rerun the generation watching ``generate``'s compile decision (its ``_valid_auto_compile_criteria``,
    shadowed on the instance) and counting the model's forwards; a rerun that fails still tells what it saw."""
    watch, decide = AutoCompileWatch(), getattr(model, "_valid_auto_compile_criteria", None)
    if decide is None:
        return watch

    def watched(model_kwargs: dict[str, Any], generation_config: GenerationConfig) -> bool:
        cache = model_kwargs.get("cache")
        layers = getattr(getattr(cache, "self_attention_cache", cache), "layers", ())
        watch.cache = type(cache).__name__ if cache is not None else "no cache"
        watch.uncompileable_layers = _uncompileable(layers)
        watch.chose_compile = bool(decide(model_kwargs, generation_config))
        return watch.chose_compile

    def count(*_: object) -> None:
        watch.forwards += 1

    model._valid_auto_compile_criteria = watched
    hook = model.register_forward_pre_hook(count)
    try:
        with contextlib.suppress(Exception):
            rerun()
    finally:
        del model._valid_auto_compile_criteria
        hook.remove()
    return watch


def _uncompileable(layers: Iterable[Any]) -> tuple[str, ...]:
    """The classes of the cache layers whose ``is_compileable`` is False, each with where it is decided."""
    found: dict[str, str] = {}
    for layer in layers:
        if getattr(layer, "is_compileable", True) is False:
            decided = getattr(type(layer), "is_compileable", None)
            where = defined_at(decided.fget) if isinstance(decided, property) and decided.fget else ""
            recording = " recording its past, for assisted decoding's crop," if getattr(layer, "record_past", 0) else ""
            found.setdefault(type(layer).__name__, f"{recording} at {where}" if where else recording)
    return tuple(f"{name}{where}" for name, where in found.items())


class OneGraph(GraphRule):
    """The whole generation must be exactly one graph: more means a break that fullgraph did not raise."""

    name = "exactly one graph"

    def judge(self, trace: CompileTrace, level: str, model: Any, mode: str = "",
              config: GenerationConfig | None = None,
              rerun: Callable[[], object] | None = None) -> RuleViolation | None:
        if trace.graph_count != 1:
            return RuleViolation(BREAK, f"expected one graph, got {trace.graph_count} "
                                        f"(recompiles: {'; '.join(trace.recompile_reasons) or 'none'})")
        return None


class GraphsNotCounted(GraphRule):
    name = "graphs not counted"
    counts_graphs = False

    def judge(self, trace: CompileTrace, level: str, model: Any, mode: str = "",
              config: GenerationConfig | None = None,
              rerun: Callable[[], object] | None = None) -> RuleViolation | None:
        return None


AT_LEAST_ONE_GRAPH, ONE_GRAPH, GRAPHS_NOT_COUNTED = GraphRule(), OneGraph(), GraphsNotCounted()


def further_arguments(inputs: dict[str, Any]) -> dict[str, Any]:
    """A check's ``generate`` arguments besides the prompts (a scenario's ``prefix_allowed_tokens_fn``,
    ``tokenizer``): levels with a loop of their own hand them on, and the loop refuses what it cannot honour."""
    return {name: value for name, value in inputs.items() if name not in ("input_ids", "attention_mask")}


class Level:
    """A way of compiling generation. Subclass it and override what differs; ``run_compiled`` is required.

    ``inputs`` holds ``input_ids`` and ``attention_mask``; ``backend`` is a counting ``torch.compile`` backend
    whose ``trace`` collects the graphs, breaks and recompiles of the run.
    """

    name: str = ""
    description: str = ""
    graph_rule: GraphRule = AT_LEAST_ONE_GRAPH
    #: what ``run_own_loop_eagerly`` runs, named in a mismatch message ("" when the level has no loop)
    own_loop: str = ""
    #: whose code fails when ``run_own_loop_eagerly`` fails and ``generate`` with a static cache works: "the loop"
    #: (ours), or the code the level's loop drives (transformers' exportable module, for ``hf_et_helper``)
    own_loop_blame: str = "the loop"
    #: collected only in the slow tier (``--run-slow``): levels whose checks cost more than a pull request affords
    slow_only: bool = False
    #: the device type the level needs ("cuda" for CUDA graphs); its checks elsewhere are skips that say so
    needs_device: str | None = None
    #: collected only when ``--fullgraph-levels`` names it (by name, glob or ``all``): paths other than
    #: compiling generation itself, such as transformers' own exporters, which a default run does not pay for
    opt_in: bool = False
    #: whether the fast tier's default break mode ("auto") runs the diagnostic pass that records every break of a
    #: breaking check; false where that pass costs much and finds what the first break already says
    every_break_in_fast_tier: bool = True

    def unavailable_reason(self, device: str) -> str | None:
        """Why the level cannot run on ``device`` (a skip, not a failure), or None when it can."""
        if self.needs_device is None or device.split(":")[0] == self.needs_device:
            return None
        return (f"level {self.name!r} needs a {self.needs_device} device; this check ran on {device} "
                f"(run with --fullgraph-device={self.needs_device})")

    def max_new_tokens(self, run_tokens: int) -> int:
        """Tokens this level's checks generate, given the run's ``max_new_tokens``; levels that exist to test
        long generations override it."""
        return run_tokens

    def reference_config(self, config: GenerationConfig) -> GenerationConfig:
        """The config of the eager ``model.generate`` run the compiled tokens must equal."""
        return copy.deepcopy(config)

    def run_own_loop_eagerly(self, model: PreTrainedModel, inputs: dict[str, Any],
                             config: GenerationConfig) -> torch.Tensor | None:
        """The level's own loop, uncompiled; it must equal the reference before compiled output is judged.
        None when the level compiles transformers' code rather than a loop of its own."""
        return None

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        """Generate with the level's compilation and ``fullgraph=True``; a graph break raises."""
        raise NotImplementedError

    def diagnose(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                 backend: CountingBackend) -> None:
        """Run once more so that dynamo reports every break (not just the first) through ``backend.trace``.
        Only checks that failed under fullgraph pay for this."""

    def mismatch_cause(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                       eager: torch.Tensor) -> str:
        """After the compiled tokens differ from eager's: what the level can tell of whose fault it is, appended
        to the message ("; ..."), or "" when it can tell nothing more than where."""
        return ""

    def save_artifact(self, path: Path, model_name: str, runtime: str = "pt2") -> Path | None:
        """Save what the last ``run_compiled`` produced as a shippable artifact at ``path`` for ``runtime``
        (``--fullgraph-artifacts``, ``--fullgraph-artifact-runtime``; called only after it gave exactly eager's
        tokens); None for levels that produce nothing to ship."""
        return None



class Levels:
    """This session's levels by name, in registration order (the built-ins first)."""

    def __init__(self, levels: Iterable[Level] = ()) -> None:
        self._levels: dict[str, Level] = {}
        for level in levels:
            self.add(level)

    def add(self, level: Level) -> None:
        """Add a level; its name becomes the last part of test ids (``llama-greedy-NAME``)."""
        if not isinstance(level, Level):
            raise TypeError(f"a level must be a pytest_fullgraph.levels.base.Level, got {type(level).__name__}")
        if not level.name or "-" in level.name or "," in level.name:
            raise ValueError(f"invalid level name {level.name!r}: non-empty, without '-' or ','")
        if level.name in self._levels:
            raise ValueError(f"level {level.name!r} is already registered")
        self._levels[level.name] = level

    def __getitem__(self, name: str) -> Level:
        return self._levels[name]

    def __contains__(self, name: object) -> bool:
        return name in self._levels

    def __iter__(self) -> Iterator[str]:
        return iter(self._levels)

    def __len__(self) -> int:
        return len(self._levels)

    def descriptions(self) -> dict[str, str]:
        return {name: level.description for name, level in self._levels.items()}

    def default(self, run_slow: bool) -> tuple[str, ...]:
        """The levels a run collects unless ``--fullgraph-levels`` says otherwise: in the slow tier every level
        but the opt-in ones; without it, those not ``slow_only`` either."""
        return tuple(name for name, level in self._levels.items()
                     if not level.opt_in and (run_slow or not level.slow_only))

    def named_by_keyword(self, keyword: str) -> tuple[str, ...]:
        """The opt-in levels a ``-k`` expression names (one of its words, 3 characters or more, inside the level's
        name, as ``-k`` matches test ids): ``-k hf_`` runs transformers' export paths without
        ``--fullgraph-levels``, as ``-m slow`` selects tests that a plain run leaves out."""
        words = {word for word in re.findall(r"\w+", keyword.lower()) if len(word) >= 3} - {"and", "not"}
        return tuple(name for name, level in self._levels.items()
                     if level.opt_in and any(word in name.lower() for word in words))

    def select(self, expression: str, run_slow: bool) -> tuple[str, ...]:
        """The levels a comma list of names (any case), ``all``, ``default`` and glob patterns selects, in
        registration order; ``ValueError`` naming every entry that selects nothing, with close names. A level
        named here runs whatever its tier or opt-in."""
        return select_names(expression, list(self._levels), {"all": self._levels, "default": self.default(run_slow)},
                            "level", f"default, all, globs such as hf_*, or one of the {len(self)} level names "
                                     f"({LIST_LEVELS} lists the built-in ones)")
