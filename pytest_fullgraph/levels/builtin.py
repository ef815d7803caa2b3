"""The built-in levels: transformers' compiled forward (``forward``), ``torch.compile(model.generate)``
(``generate``), this package's own loop compiled (``decode``, ``while`` and their long and CUDA-graph variants)
and exported (``export``). Each is a ``levels.Level``; the report's columns follow ``BUILTIN_LEVEL_NAMES``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pytest_fullgraph.core.generation import generate_fn, static_cache_config
from pytest_fullgraph.core.names import BUILTIN_LEVEL_NAMES
from pytest_fullgraph.levels.base import (
    GRAPHS_NOT_COUNTED,
    NO_RECOMPILE_IN_RUN,
    ONE_GRAPH,
    GraphRule,
    Level,
    Levels,
    further_arguments,
    has_sliding_cache,
)
from pytest_fullgraph.levels.cache import CacheLevel
from pytest_fullgraph.levels.hf import HF_LEVELS
from pytest_fullgraph.levels.hf_openvino import HfOpenvinoLevel
from pytest_fullgraph.loop.steps import per_width_reason

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.core.compile_events import CountingBackend


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


#: The second requests of a compiled generation (``check.variations``); the loop's also a shorter generation.
REQUESTS: tuple[str, ...] = ("same_shape", "prompt_length", "batch_size", "settings")
LOOP_REQUESTS: tuple[str, ...] = (*REQUESTS, "max_new_tokens")


class ForwardLevel(_TorchCompileLevel):
    """transformers' supported path as its ``test_generate_compile_model_forward_fullgraph`` runs it: a static
    cache, ``CompileConfig(fullgraph=True, dynamic=False)``, no recompile in the generation or in a second one of
    the same shapes unless the cache has sliding layers. The backend is the run's (``--fullgraph-backend``) and
    ``mode`` is left unset, where transformers' test takes CompileConfig's defaults: inductor,
    ``mode="reduce-overhead"``."""

    name = "forward"
    description = ("transformers' supported path as its compile test runs it: static cache, forward compiled with "
                   "CompileConfig(fullgraph=True, dynamic=False), driven by model.generate, no recompile unless the "
                   "cache has sliding layers; the run's backend with no mode, where the test uses inductor with "
                   "mode='reduce-overhead'")
    graph_rule: GraphRule = NO_RECOMPILE_IN_RUN
    variations = REQUESTS
    #: transformers' compile test: a second generation of the same shapes must not recompile
    no_recompile = ("same_shape",)

    def recompile_excuse(self, model: PreTrainedModel, config: GenerationConfig, variation: str) -> str:
        """transformers' test lets a cache with sliding layers recompile: its layers count tokens in Python ints."""
        if has_sliding_cache(model):
            return "the cache has sliding layers, which transformers' compile test lets recompile"
        return ""

    def reference_config(self, config: GenerationConfig) -> GenerationConfig:
        return static_cache_config(config)

    def run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
            fullgraph: bool) -> torch.Tensor:
        from transformers import CompileConfig

        compile_config = CompileConfig(fullgraph=fullgraph, dynamic=False, backend=backend, mode=cast(str, None))
        compile_config._compile_all_devices = cast(None, True)  # transformers compiles only on accelerators else
        config = copy.deepcopy(config)
        config.disable_compile = False
        config.compile_config = compile_config
        return generate_fn(model)(**inputs, generation_config=config)


class GenerateLevel(_TorchCompileLevel):
    name = "generate"
    description = "torch.compile(model.generate, fullgraph=True)"
    variations = REQUESTS
    no_recompile = ("same_shape",)
    #: Its every-break pass costs 10-13 s a check on 2 cores (dynamo re-traces generate from each break: 27 frame
    #: compiles for a tiny llama), nearly half the main command's compile time, and finds transformers' own
    #: generation sites alone in 707 of the 764 failing checks recorded over every model (bench/reports/matrix-*).
    #: The fast tier records the first break; RUN_SLOW or --fullgraph-breaks=all record every one.
    every_break_in_fast_tier = False

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
    variations: tuple[str, ...] = LOOP_REQUESTS
    no_recompile: tuple[str, ...] = ("same_shape",)
    #: the loop form (``decode.LOOPS``)
    loop = "unrolled"

    def run_own_loop_eagerly(self, model: PreTrainedModel, inputs: dict[str, Any],
                             config: GenerationConfig) -> torch.Tensor:
        from pytest_fullgraph.loop.decode import fullgraph_generate

        return fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, loop=self.loop,
                                  max_prompt_length=self.prompt_bound(inputs, config), **further_arguments(inputs))

    def run(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
            fullgraph: bool) -> torch.Tensor:
        return self.compile_loop(model, inputs, config, backend, fullgraph, self.loop,
                                 self.prompt_bound(inputs, config))

    @staticmethod
    def compile_loop(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, backend: Any,
                     fullgraph: bool, loop: str, max_prompt_length: int | None = None) -> torch.Tensor:
        import torch

        from pytest_fullgraph.loop.decode import fullgraph_generate

        def compiler(function: Callable[..., Any]) -> Callable[..., Any]:
            return torch.compile(function, fullgraph=fullgraph, backend=backend)

        return fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, compiler=compiler,
                                  loop=loop, max_prompt_length=max_prompt_length, **further_arguments(inputs))


class WhileLevel(DecodeLevel):
    """The loop's ``while_loop`` form: the same judgement as ``decode`` (one graph, ``generate``'s tokens) for a
    graph that does not grow with the tokens generated, so its compile cost stays flat."""

    name = "while"
    description = ("fullgraph_generate(loop='while', max_prompt_length=2 x the prompt's): the decode steps as one "
                   "torch.while_loop body, compiled with fullgraph=True: exactly one graph, whatever max_new_tokens, "
                   "for every prompt width up to the bound (greedy and sampling)")
    own_loop = "fullgraph_generate(loop='while')"
    loop = "while"
    #: one graph whatever the prompt's width (up to the bound): the cache is sized for the longest prompt and the
    #: width is dynamic, for greedy and sampling (``per_width_reason`` says where else each width is a graph)
    no_recompile = ("same_shape", "prompt_length")
    #: the bound of the last ``run_compiled`` (checks run one at a time per process): a second request of another
    #: width must find the cache that graph was compiled for
    _served_bound: int | None = None

    def prompt_bound(self, inputs: dict[str, Any], config: GenerationConfig) -> int | None:
        """Twice the check's prompt width, as ``export_generate(dynamic=True)``'s default; None where
        ``per_width_reason`` says the config makes each width a generation of its own."""
        if per_width_reason(config, inputs):
            return None
        return 2 * int(inputs["input_ids"].shape[1])

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        self._served_bound = self.prompt_bound(inputs, config)
        return self.compile_loop(model, inputs, config, backend, True, self.loop, self._served_bound)

    def run_again(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                  backend: CountingBackend) -> torch.Tensor:
        bound = self._served_bound
        if bound is not None and int(inputs["input_ids"].shape[1]) > bound:
            bound = None  # past the bound: the width of its own, which recompiles as the level says it may
        return self.compile_loop(model, inputs, config, backend, True, self.loop, bound)

    def recompile_excuse(self, model: PreTrainedModel, config: GenerationConfig, variation: str) -> str:
        return per_width_reason(config, {}) if variation == "prompt_length" else ""

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
    #: the program takes the shapes it was exported with and has its settings baked in: a second request of other
    #: prompts is all it serves, and must (another shape is a new export, not a recompile)
    variations = ("same_shape",)
    no_recompile = ("same_shape",)

    #: the program of this process's last ``run_compiled`` (checks run one at a time per process), for
    #: ``save_artifact``
    _last_program: Any = None

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        from pytest_fullgraph.loop.decode import export_generate

        del backend  # torch.export makes an ExportedProgram; no torch.compile backend is involved
        self._last_program = None
        program = export_generate(model, inputs["input_ids"], inputs["attention_mask"], config, strict=True,
                                  **further_arguments(inputs))
        self._last_program = program
        return program(inputs["input_ids"], inputs["attention_mask"])

    def run_again(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                  backend: CountingBackend) -> torch.Tensor:
        if self._last_program is None:
            raise RuntimeError("no exported program to call again: run_compiled has not run in this process")
        return self._last_program(inputs["input_ids"], inputs["attention_mask"])

    def save_artifact(self, path: Path, model_name: str, runtime: str = "pt2") -> Path | None:
        from pytest_fullgraph.levels.artifacts import save_generate

        program, self._last_program = self._last_program, None
        return save_generate(program, path, runtime=runtime, model=model_name) if program is not None else None


#: The built-in levels, in their canonical order (test ids, report columns).
BUILTIN_LEVELS: tuple[type[Level], ...] = (ForwardLevel, GenerateLevel, DecodeLevel, ExportLevel, WhileLevel,
                                           While64Level, While256Level, CudagraphsLevel, CudagraphsWhileLevel,
                                           CacheLevel, *HF_LEVELS, HfOpenvinoLevel)
# reports order levels by ``core.names`` (they may not import levels): it must list these, in this order
assert tuple(level.name for level in BUILTIN_LEVELS) == BUILTIN_LEVEL_NAMES, "core.names differs from BUILTIN_LEVELS"


def builtin_levels() -> Levels:
    return Levels(level() for level in BUILTIN_LEVELS)
