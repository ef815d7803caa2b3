"""Levels for the ways transformers itself takes a model out of Python, judged as our own loop is (opt-in:
``--fullgraph-levels=hf_*``).

``hf_dynamo``, ``hf_onnx`` and ``hf_executorch``: ``transformers.exporters`` exports the ``prefill`` and ``decode``
programs, each run by its back end's ``ModelRunner`` inside ``hf_export.host_loop``; the same loop driving the
eager forward is the level's own loop, so a difference at the compiled stage is the exporter's program or its
runner. ``hf_et_helper``: ``integrations.executorch``'s exportable module, exported as its ``export`` does, and run
by its own ``generate`` helper, as users call it; when its tokens differ, the same program driven with the right
positions tells the helper's loop from the program.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.generation import UnsupportedGeneration, static_cache_config
from pytest_fullgraph.core.results import summary
from pytest_fullgraph.levels.base import GRAPHS_NOT_COUNTED, GraphRule, Level
from pytest_fullgraph.levels.hf_export import (
    CheckedRunner,
    fresh_cache,
    generate_steps,
    host_loop,
    refuse_unless_greedy,
)

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.core.compile_events import CountingBackend


class _RequiresPackages(Level):
    """A level whose path needs packages that are extras of this package: without them its checks are skips
    naming the extra to install."""

    requires: tuple[str, ...] = ()
    extra: str = ""

    def unavailable_reason(self, device: str) -> str | None:
        missing = [name for name in self.requires if importlib.util.find_spec(name) is None]
        if missing:
            return (f"level {self.name!r} needs {', '.join(missing)}: pip install 'pytest_fullgraph[{self.extra}]'")
        return super().unavailable_reason(device)


class HfExporterLevel(_RequiresPackages):
    """One back end of ``transformers.exporters``, its programs driven by our host loop."""

    opt_in = True
    graph_rule: GraphRule = GRAPHS_NOT_COUNTED
    own_loop = "the host loop over the eager forward"
    backend = ""
    #: what turns torch.export's programs into this back end's; blamed when those programs alone give generate's
    #: tokens in the same loop ("" for the dynamo back end, whose programs are torch.export's)
    conversion = ""

    def export_config(self) -> Any:
        raise NotImplementedError

    def reference_config(self, config: GenerationConfig) -> GenerationConfig:
        return static_cache_config(config)

    def run_own_loop_eagerly(self, model: PreTrainedModel, inputs: dict[str, Any],
                             config: GenerationConfig) -> torch.Tensor:
        refuse_unless_greedy(config, f"level {self.name!r}")
        recorded = generate_steps(model, _prompts(inputs), config)
        return host_loop(model, model, recorded, fresh_cache(recorded))

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        del backend  # the exporter makes its own programs; no torch.compile backend is involved
        return self.exported_loop(model, inputs, config)()

    def exported_loop(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                      refit: bool = False) -> Callable[[], torch.Tensor]:
        """Export the programs once; the returned call runs them in the host loop (``bench/export_paths.py`` times
        it). ``refit``: the cache fed as its tensors alone (``CheckedRunner``)."""
        from transformers.exporters import AutoHfExporter

        recorded = generate_steps(model, _prompts(inputs), config)
        export = copy.deepcopy(config)
        export.max_cache_len = _cache_length(recorded.initial_cache)  # the programs take the loop's cache
        with self.runtime_log():  # loading a method can fail too ("error: 0x14", an operator the runtime lacks)
            exported = AutoHfExporter.from_config(self.export_config()).export_for_generation(
                model, _prompts(inputs), self.export_config(), generation_config=export)
            runners = exported.runners
        missing = [name for name in ("prefill", "decode") if name not in runners]
        if missing:  # measured: gemma3's multimodal class; the path does not apply as prefill and decode
            raise UnsupportedGeneration(
                f"transformers' exporter made no {' or '.join(map(repr, missing))} program for {type(model).__name__} "
                f"(it made: {', '.join(map(repr, runners)) or 'nothing'})")
        prefill, decode = (CheckedRunner(runners[name], name, refit) for name in ("prefill", "decode"))

        def run() -> torch.Tensor:
            with self.runtime_log():
                return host_loop(prefill, decode, recorded, fresh_cache(recorded))

        return run

    def runtime_log(self) -> contextlib.AbstractContextManager[None]:
        """Where the back end's runtime writes why it failed, kept with the exception (none but ExecuTorch's)."""
        return contextlib.nullcontext()

    def mismatch_cause(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                       eager: torch.Tensor) -> str:
        """The back end's program or what torch.export made of the model? transformers' dynamo back end exports
        the same prefill and decode: run in the same loop, its tokens tell the two apart."""
        import torch

        if not self.conversion:
            return ""
        try:  # fed the cache's tensors under the exported spec, as the converted programs are fed
            exported = HfDynamoLevel().exported_loop(model, inputs, config, refit=True)()
        except Exception as error:  # that path failing is its own check's verdict; here it only cannot tell
            return (f"; the dynamo back end's programs fail in the same loop ({type(error).__name__}: "
                    f"{summary(error)}), so the {self.conversion} cannot be told from torch.export's program")
        if torch.equal(exported, eager):
            return (f"; the same prefill and decode as torch.export programs (transformers' dynamo back end) give "
                    f"generate's tokens in the same loop: the {self.conversion} is at fault")
        return ("; the same prefill and decode as torch.export programs (transformers' dynamo back end) differ in "
                f"the same loop too: the exported program is at fault, before the {self.conversion}")


class HfDynamoLevel(HfExporterLevel):
    name = "hf_dynamo"
    description = ("transformers.exporters' dynamo back end (torch.export of prefill and decode), its programs run "
                   "by their ModelRunner in a host loop fed as generate feeds the forward (greedy)")

    def export_config(self) -> Any:
        from transformers.exporters import DynamoConfig

        return DynamoConfig()


class HfOnnxLevel(HfExporterLevel):
    name = "hf_onnx"
    description = "transformers.exporters' onnx back end, run by onnxruntime in the same host loop (greedy)"
    requires = ("onnx", "onnxscript", "onnxruntime")
    extra = "onnx"
    conversion = "ONNX conversion or ONNX Runtime"

    def export_config(self) -> Any:
        from transformers.exporters import OnnxConfig

        return OnnxConfig()


class HfExecutorchLevel(HfExporterLevel):
    name = "hf_executorch"
    description = ("transformers.exporters' executorch back end (XNNPACK), run by ExecuTorch's runtime in the same "
                   "host loop (greedy)")
    requires = ("executorch",)
    extra = "executorch"
    conversion = "ExecuTorch lowering (XNNPACK) or ExecuTorch's runtime"

    def export_config(self) -> Any:
        from transformers.exporters import ExecutorchConfig

        return ExecutorchConfig(backend="xnnpack")

    def runtime_log(self) -> contextlib.AbstractContextManager[None]:
        from pytest_fullgraph.levels.executorch_runtime import runtime_log

        return runtime_log()


class HfEtHelperLevel(Level):
    """``TorchExportableModuleForDecoderOnlyLM`` exported and run by ``TorchExportableModuleWithStaticCache.generate``:
    one prompt at a time (the helper reads row 0), greedy, no attention mask, no EOS stop."""

    name = "hf_et_helper"
    description = ("transformers' integrations.executorch exportable module, exported with its export() and run by "
                   "its own generate helper, one prompt at a time (greedy)")
    opt_in = True
    graph_rule: GraphRule = GRAPHS_NOT_COUNTED
    own_loop = "the exportable module (one position a step)"
    own_loop_blame = "transformers' exportable module (integrations/executorch.py)"
    #: the program of this process's last ``run_compiled`` (checks run one at a time per process)
    _last_program: Any = None

    def reference_config(self, config: GenerationConfig) -> GenerationConfig:
        return static_cache_config(config)

    def run_own_loop_eagerly(self, model: PreTrainedModel, inputs: dict[str, Any],
                             config: GenerationConfig) -> torch.Tensor:
        _refuse_for_helper(inputs, config)
        with _exportable(model, inputs, config) as module:
            # its inner module, the one export() exports: the outer forward drops cache_position
            return _rows(inputs, lambda row: _positions_loop(module.model, row, config.max_new_tokens))

    def run_compiled(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                     backend: CountingBackend) -> torch.Tensor:
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        del backend
        with _exportable(model, inputs, config) as module:
            program = self._last_program = _export(module, inputs)
        return _rows(inputs, lambda row: TorchExportableModuleWithStaticCache.generate(
            program, row, config.max_new_tokens))

    def mismatch_cause(self, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                       eager: torch.Tensor) -> str:
        import torch

        program, self._last_program = self._last_program, None
        if program is None:
            with _exportable(model, inputs, config) as module:
                program = _export(module, inputs)
        driven = _rows(inputs, lambda row: _positions_loop(program.module(), row, config.max_new_tokens))
        if torch.equal(driven, eager):
            return ("; the same exported program fed positions P, P+1, ... gives generate's tokens: the helper's "
                    "loop is at fault (its generate feeds the first new token at cache_position P+1, one past the "
                    "prompt's last, so every later step reads a cache with a hole)")
        return "; the exported program itself differs: fed the right positions it does not give generate's tokens"


def _prompts(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}


def _cache_length(cache: Any) -> int:
    """The positions of the cache ``generate`` made, which the exporter's programs are sized for: the cache's, or
    its first layer of a fixed length (a hybrid model's first layer may be a linear-attention state)."""
    lengths = [getattr(cache, "max_cache_len", None)] + [getattr(layer, "max_cache_len", None)
                                                        for layer in getattr(cache, "layers", ())]
    for length in lengths:
        if length:
            return int(length)
    layers = sorted({type(layer).__name__ for layer in getattr(cache, "layers", ())})
    raise UnsupportedGeneration(f"generate's static cache for this model ({type(cache).__name__}, layers "
                                f"{', '.join(layers) or 'none'}) has no layer of a fixed length to size the "
                                "exporter's cache by")


def _refuse_for_helper(inputs: dict[str, Any], config: GenerationConfig) -> None:
    refuse_unless_greedy(config, "level 'hf_et_helper'")
    if not bool(inputs["attention_mask"].all()):
        raise UnsupportedGeneration("transformers' executorch helper takes no attention mask: left-padded prompts "
                                    "cannot be given to it")
    if config.eos_token_id is not None:
        raise UnsupportedGeneration("transformers' executorch helper has no EOS stop: it always generates "
                                    "max_new_tokens")


@contextlib.contextmanager
def _exportable(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig) -> Iterator[Any]:
    """The exportable module for one prompt of the check's length plus its new tokens; it asks the model's own
    generation config for a static cache, which is set for the while and put back."""
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    saved = model.generation_config
    model.generation_config = copy.deepcopy(saved)
    model.generation_config.cache_implementation = "static"
    model.generation_config.use_cache = True
    try:
        yield TorchExportableModuleForDecoderOnlyLM(
            model, batch_size=1, max_cache_len=inputs["input_ids"].shape[1] + config.max_new_tokens)
    finally:
        model.generation_config = saved


def _export(module: Any, inputs: dict[str, Any]) -> Any:
    import torch

    first = inputs["input_ids"][:1, :1]
    return module.export(input_ids=first, cache_position=torch.zeros(1, dtype=torch.long, device=first.device))


def _positions_loop(module: Any, row: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """One prompt through the exportable forward one token a step, each at its own position; greedy."""
    import torch

    def logits(token: torch.Tensor, position: int) -> torch.Tensor:
        return module(input_ids=token.reshape(1, 1),
                      cache_position=torch.tensor([position], dtype=torch.long, device=row.device))

    with torch.no_grad():
        for position in range(row.shape[1]):
            last = logits(row[0, position], position)
        tokens = [last[:, -1].argmax(-1)]
        for step in range(1, new_tokens):
            tokens.append(logits(tokens[-1], row.shape[1] + step - 1)[:, -1].argmax(-1))
    return torch.cat([row, torch.stack(tokens, dim=1)], dim=1)


def _rows(inputs: dict[str, Any], generate_row: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Each prompt row generated alone (the helper takes one), stacked."""
    import torch

    return torch.cat([generate_row(row[None]) for row in inputs["input_ids"]], dim=0)


HF_LEVELS: tuple[type[Level], ...] = (HfDynamoLevel, HfOnnxLevel, HfExecutorchLevel, HfEtHelperLevel)
