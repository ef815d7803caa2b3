"""Levels: the ways of compiling generation that a check can judge, one strategy object each.

A level owns what differs between them: the generation config of its eager reference, its compiled run
(``fullgraph=True``), its diagnostic run (every break, without fullgraph), whether it has a loop of its own
that must equal ``generate`` when run eagerly, and its graph rule. ``check.run_check`` asks these questions
and never branches on a level's name. Third parties add levels with the ``pytest_fullgraph_register_levels``
hook; the plugin's own tests drive the check's decision tree with fake levels.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pytest_fullgraph.generation import generate_fn, static_cache_config
from pytest_fullgraph.results import BREAK, ERROR

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.breaks import CompileTrace, CountingBackend


@dataclass(frozen=True)
class RuleViolation:
    outcome: str
    message: str


class GraphRule:
    """What the graphs of a level's compiled run must look like; ``judge`` says how a run broke the rule."""

    name = "graphs counted, at least one"
    #: False: the run makes no dynamo graphs to count (torch.export), so the report records none
    counts_graphs = True

    def judge(self, trace: CompileTrace, level: str, model: Any) -> RuleViolation | None:
        if trace.graph_count == 0:
            return RuleViolation(ERROR, f"nothing was compiled: transformers ran level {level!r} eagerly (model "
                                        f"type {getattr(model.config, 'model_type', '?')!r} or its cache is not "
                                        "compiled by generate)")
        return None


class OneGraph(GraphRule):
    """The whole generation must be exactly one graph: more means a break that fullgraph did not raise."""

    name = "exactly one graph"

    def judge(self, trace: CompileTrace, level: str, model: Any) -> RuleViolation | None:
        if trace.graph_count != 1:
            return RuleViolation(BREAK, f"expected one graph, got {trace.graph_count} "
                                        f"(recompiles: {'; '.join(trace.recompile_reasons) or 'none'})")
        return None


class GraphsNotCounted(GraphRule):
    name = "graphs not counted"
    counts_graphs = False

    def judge(self, trace: CompileTrace, level: str, model: Any) -> RuleViolation | None:
        return None


AT_LEAST_ONE_GRAPH, ONE_GRAPH, GRAPHS_NOT_COUNTED = GraphRule(), OneGraph(), GraphsNotCounted()


class LoopNotCaptured(Exception):
    """A level's loop failed to be captured while it ran uncompiled (a ``while_loop`` body is traced even then):
    a compile outcome, judged as one, not an eager failure. ``error`` is what the capture raised."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


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
    #: collected only in the slow tier (``--run-slow``): levels whose checks cost more than a pull request affords
    slow_only: bool = False
    #: the device type the level needs ("cuda" for CUDA graphs); its checks elsewhere are skips that say so
    needs_device: str | None = None

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

    def save_artifact(self, path: Path, model_name: str, runtime: str = "pt2") -> Path | None:
        """Save what the last ``run_compiled`` produced as a shippable artifact at ``path`` for ``runtime``
        (``--fullgraph-artifacts``, ``--fullgraph-artifact-runtime``; called only after it gave exactly eager's
        tokens); None for levels that produce nothing to ship."""
        return None


class _TorchCompileLevel(Level):
    """A level whose compiled and diagnostic runs differ only in ``fullgraph``."""

    def run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
            fullgraph: bool) -> torch.Tensor:
        raise NotImplementedError

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        return self.run(model, inputs, config, backend, True)

    def diagnose(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                 backend: CountingBackend) -> None:
        self.run(model, inputs, config, backend, False)


class ForwardLevel(_TorchCompileLevel):
    name = "forward"
    description = ("transformers' supported path: static cache, forward compiled with fullgraph=True, driven by "
                   "model.generate")

    def reference_config(self, config: GenerationConfig) -> GenerationConfig:
        return static_cache_config(config)

    def run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
            fullgraph: bool) -> torch.Tensor:
        from transformers import CompileConfig

        compile_config = CompileConfig(fullgraph=fullgraph, backend=backend, mode=cast(str, None))
        compile_config._compile_all_devices = cast(None, True)  # transformers compiles only on accelerators else
        config = copy.deepcopy(config)
        config.disable_compile = False
        config.compile_config = compile_config
        return generate_fn(model)(**inputs, generation_config=config)


class GenerateLevel(_TorchCompileLevel):
    name = "generate"
    description = "torch.compile(model.generate, fullgraph=True)"

    def run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
            fullgraph: bool) -> torch.Tensor:
        import torch

        return torch.compile(generate_fn(model), fullgraph=fullgraph, backend=backend)(**inputs,
                                                                                      generation_config=config)


class DecodeLevel(_TorchCompileLevel):
    name = "decode"
    description = "pytest_fullgraph's fullgraph_generate loop compiled with fullgraph=True: exactly one graph"
    graph_rule: GraphRule = ONE_GRAPH
    own_loop = "fullgraph_generate"
    #: the loop form (``decode.LOOPS``)
    loop = "unrolled"

    def run_own_loop_eagerly(self, model: PreTrainedModel, inputs: dict[str, Any],
                             config: GenerationConfig) -> torch.Tensor:
        from pytest_fullgraph.decode import fullgraph_generate

        return fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, loop=self.loop,
                                  **further_arguments(inputs))

    def run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
            fullgraph: bool) -> torch.Tensor:
        return self.compile_loop(model, inputs, config, backend, fullgraph, self.loop)

    @staticmethod
    def compile_loop(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
                     fullgraph: bool, loop: str) -> torch.Tensor:
        import torch

        from pytest_fullgraph.decode import fullgraph_generate

        def compiler(function: Callable[..., Any]) -> Callable[..., Any]:
            return torch.compile(function, fullgraph=fullgraph, backend=backend)

        return fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, compiler=compiler,
                                  loop=loop, **further_arguments(inputs))


class WhileLevel(DecodeLevel):
    """The loop's ``while_loop`` form: the same judgement as ``decode`` (one graph, ``generate``'s tokens) for a
    graph that does not grow with the tokens generated, so its compile cost stays flat."""

    name = "while"
    description = ("fullgraph_generate(loop='while'): the decode steps as one torch.while_loop body, compiled with "
                   "fullgraph=True: exactly one graph, whatever max_new_tokens")
    own_loop = "fullgraph_generate(loop='while')"
    loop = "while"

    def run_own_loop_eagerly(self, model: PreTrainedModel, inputs: dict[str, Any],
                             config: GenerationConfig) -> torch.Tensor:
        """``while_loop`` traces its body even uncompiled, so a model that does not trace fails here. Whether the
        model runs at all is then asked of the unrolled form, run eagerly: its failure is the model's own
        (raised as it is); if it runs, the body could not be captured, which is a compile outcome
        (``LoopNotCaptured``)."""
        from pytest_fullgraph.breaks import compile_failure_types
        from pytest_fullgraph.decode import fullgraph_generate

        try:
            return super().run_own_loop_eagerly(model, inputs, config)
        except compile_failure_types() as error:
            fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, loop="unrolled",
                               **further_arguments(inputs))
            raise LoopNotCaptured(error) from error

    def diagnose(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                 backend: CountingBackend) -> None:
        """A ``while_loop`` body is captured whole or not at all: the unrolled form, compiled without fullgraph,
        meets the same model code one break at a time."""
        self.compile_loop(model, inputs, config, backend, False, "unrolled")


class While64Level(WhileLevel):
    """The ``while`` form at 64 new tokens, in the slow tier: where the unrolled form's compile cost (about
    seven minutes per check under inductor on CPU) rules it out, and sliding windows of 16 fill and slide."""

    name = "while64"
    description = "the while level at 64 new tokens (slow tier)"
    slow_only = True
    tokens = 64

    def max_new_tokens(self, run_tokens: int) -> int:
        return self.tokens


class While256Level(While64Level):
    """The ``while`` form at 256 new tokens, the length at which transformers PR #30788's compile was killed."""

    name = "while256"
    description = "the while level at 256 new tokens (slow tier)"
    tokens = 256


class CudagraphsLevel(DecodeLevel):
    """The unrolled loop compiled by inductor with ``mode="reduce-overhead"``: the whole generation replayed as
    CUDA graphs, the main speed-up the 2024 PR was after. One graph with eager's tokens, as ``decode``; where
    inductor runs a graph without CUDA graphs, its reasons are recorded with the check (a pass still passes:
    the tokens are exact, only the speed-up is lost). Slow tier, CUDA only."""

    name = "cudagraphs"
    description = ("fullgraph_generate's loop compiled by inductor with mode='reduce-overhead' (CUDA graphs) on CUDA: "
                   "one graph, eager's tokens, inductor's CUDA-graph skips recorded (slow tier)")
    slow_only = True
    needs_device = "cuda"
    mode = "reduce-overhead"

    def run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
            fullgraph: bool) -> torch.Tensor:
        # the diagnostic pass finds breaks with dynamo alone: its backend is left as it is given
        chosen = cast("CountingBackend", backend).with_mode(self.mode) if fullgraph else backend
        return self.compile_loop(model, inputs, config, chosen, fullgraph, self.loop)


class CudagraphsWhileLevel(CudagraphsLevel, WhileLevel):
    """The ``while_loop`` form under CUDA graphs: a loop whose trip count is data-dependent, which CUDA graphs
    capture only as a whole; inductor's verdict on it is what this level records. Compiled as ``cudagraphs``,
    run eagerly and diagnosed as ``while``."""

    name = "cudagraphs_while"
    description = "the cudagraphs level with fullgraph_generate(loop='while') (slow tier, CUDA only)"


class ExportLevel(DecodeLevel):
    """``torch.export`` of the same loop, strict: dynamo traces it, so what passes here has no graph break.

    Its diagnostic run compiles the loop with dynamo without fullgraph, which meets the breaks strict export
    stops at (non-strict export does not run dynamo and would record none).
    """

    name = "export"
    description = ("torch.export.export(strict=True) of fullgraph_generate's loop, run as an ExportedProgram")
    graph_rule: GraphRule = GRAPHS_NOT_COUNTED

    #: the program of this process's last ``run_compiled`` (checks run one at a time per process), for
    #: ``save_artifact``
    _last_program: Any = None

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        from pytest_fullgraph.decode import export_generate

        del backend  # torch.export makes an ExportedProgram; no torch.compile backend is involved
        self._last_program = None
        program = export_generate(model, inputs["input_ids"], inputs["attention_mask"], config, strict=True,
                                  **further_arguments(inputs))
        self._last_program = program
        return program(inputs["input_ids"], inputs["attention_mask"])

    def save_artifact(self, path: Path, model_name: str, runtime: str = "pt2") -> Path | None:
        from pytest_fullgraph.artifacts import save_generate

        program, self._last_program = self._last_program, None
        return save_generate(program, path, runtime=runtime, model=model_name) if program is not None else None


class Levels:
    """This session's levels by name, in registration order (the built-ins first)."""

    def __init__(self, levels: Iterable[Level] = ()) -> None:
        self._levels: dict[str, Level] = {}
        for level in levels:
            self.add(level)

    def add(self, level: Level) -> None:
        """Add a level; its name becomes the last part of test ids (``llama-greedy-NAME``)."""
        if not isinstance(level, Level):
            raise TypeError(f"a level must be a pytest_fullgraph.levels.Level, got {type(level).__name__}")
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


#: The built-in levels, in their canonical order (test ids, report columns).
BUILTIN_LEVELS: tuple[type[Level], ...] = (ForwardLevel, GenerateLevel, DecodeLevel, ExportLevel, WhileLevel,
                                           While64Level, While256Level, CudagraphsLevel, CudagraphsWhileLevel)
BUILTIN_LEVEL_NAMES = tuple(level.name for level in BUILTIN_LEVELS)


def builtin_levels() -> Levels:
    return Levels(level() for level in BUILTIN_LEVELS)
