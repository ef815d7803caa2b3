"""Levels: the ways of compiling generation that a check can judge, one strategy object each.

A level owns what differs between them: the generation config of its eager reference, its compiled run
(``fullgraph=True``), its diagnostic run (every break, without fullgraph), whether it has a loop of its own
that must equal ``generate`` when run eagerly, and its graph rule. ``check.run_check`` asks these questions
and never branches on a level's name. Third parties add levels with the ``pytest_fullgraph_register_levels``
hook; the plugin's own tests drive the check's decision tree with fake levels. The built-in levels are in
``builtin_levels``; why ``generate`` compiled nothing, when a graph rule finds so, in ``auto_compile``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.outcomes import BREAK, ERROR, MODE_NEVER_COMPILES, SKIP
from pytest_fullgraph.core.suggest import LIST_LEVELS, select_names
from pytest_fullgraph.levels.auto_compile import PREFILL_ONLY, why_generate_compiled_nothing

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.core.compile_events import CompileTrace, CountingBackend
    from pytest_fullgraph.core.mismatch import Mismatch
    from pytest_fullgraph.core.results import BreakRecord


@dataclass(frozen=True)
class RuleViolation:
    outcome: str
    message: str
    #: where the rule was broken, when a line of code says it (a recompile's guard): the check's ``first_break``
    where: BreakRecord | None = None


@dataclass(frozen=True)
class RunVerdict:
    """A level's own verdict on its run (``Level.judge_run``), where tokens equal to eager's are not all it asks."""

    outcome: str
    message: str
    mismatch: Mismatch | None = None


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


class NoRecompileInRun(GraphRule):
    """transformers' compile test: at least one graph, and no recompile within the generation unless the model's
    static cache has sliding layers ("Compilation of sliding layers necessarily has recompiles with
    ``dynamic=False``"); a recompile is a ``break`` at its guard. A chunked prefill (``prefill_chunk_size``), which
    the test never runs, is let recompile too: its chunks are forwards of other widths, each compiled anew with
    ``dynamic=False`` (recorded in ``recompile_reasons``)."""

    name = "graphs counted, at least one, no recompile (sliding caches excepted)"

    def judge(self, trace: CompileTrace, level: str, model: Any, mode: str = "",
              config: GenerationConfig | None = None,
              rerun: Callable[[], object] | None = None) -> RuleViolation | None:
        from pytest_fullgraph.core.guards import frame_at, guard_from_reason

        found = super().judge(trace, level, model, mode, config, rerun)
        chunked = config is not None and bool(getattr(config, "prefill_chunk_size", None))
        if found is not None or not trace.recompile_reasons or chunked or has_sliding_cache(model):
            return found
        frame = trace.recompile_frames[0] if trace.recompile_frames else None
        guard = guard_from_reason(trace.recompile_reasons[0], frame_at(*frame) if frame else None)
        message = (f"recompiled {len(trace.recompile_reasons)} time(s) within the generation, which transformers' "
                   f"compile test fails for a cache without sliding layers: {guard.summary()}")
        return RuleViolation(BREAK, message, guard.as_break(message))


def has_sliding_cache(model: Any) -> bool:
    """Whether the model's static cache has sliding layers, read as transformers' compile test reads it
    (``Cache.is_sliding``)."""
    from transformers.cache_utils import StaticCache

    return any(StaticCache(config=model.config, max_cache_len=8).is_sliding)


AT_LEAST_ONE_GRAPH, ONE_GRAPH, GRAPHS_NOT_COUNTED = GraphRule(), OneGraph(), GraphsNotCounted()
NO_RECOMPILE_IN_RUN = NoRecompileInRun()


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
    #: the second requests a passing check makes of the same compiled object (``check.variations.VARIATIONS``:
    #: another prompt length, batch size, setting), each reported with whether it recompiled; () for none
    variations: tuple[str, ...] = ()
    #: those of ``variations`` the level promises to serve without a recompile: one that recompiles fails the check
    no_recompile: tuple[str, ...] = ()

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

    def prompt_bound(self, inputs: dict[str, Any], config: GenerationConfig) -> int | None:
        """The longest prompt the level's own loop is sized to serve (``fullgraph_generate``'s
        ``max_prompt_length``: its cache is that much longer than ``generate``'s), or None: the prompt's own."""
        return None

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        """Generate with the level's compilation and ``fullgraph=True``; a graph break raises."""
        raise NotImplementedError

    def run_again(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                  backend: CountingBackend) -> torch.Tensor:
        """A second request of what the last ``run_compiled`` compiled, with other inputs or config: by default
        ``run_compiled`` again with the same backend, which dynamo serves from its cache while the guards hold."""
        return self.run_compiled(model, inputs, config, backend)

    def judge_run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                  eager: torch.Tensor, produced: torch.Tensor) -> RunVerdict | None:
        """The level's own verdict on what ``run_compiled`` produced, in place of comparing its tokens with eager's
        (the cache level compares three eager paths and their logits); None: compare the tokens."""
        return None

    def recompile_excuse(self, model: PreTrainedModel, config: GenerationConfig, variation: str) -> str:
        """Why a recompile on a promised ``variation`` does not fail the check for this model and config (the
        check's reference config; "" when it does)."""
        return ""

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
