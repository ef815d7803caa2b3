"""One measurement of bench/generation.py, in this process: a variant's first call (its compile) and steady time per
token on one (model, batch, tokens), its peak memory, and a digest of its tokens. bench/generation.py's ``one``
subcommand runs it in a fresh process and prints the row as one JSON line."""

from __future__ import annotations

import hashlib
import platform
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPT_LENGTH = 8


def _inputs(model: Any, batch: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(0)
    vocab = int(model.config.get_text_config().vocab_size)
    input_ids = torch.randint(3, vocab, (batch, PROMPT_LENGTH), generator=generator)
    return input_ids.to(device()), torch.ones_like(input_ids).to(device())


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _compile_kwargs(backend: str) -> dict[str, Any]:
    mode = "reduce-overhead" if device() == "cuda" and backend == "inductor" else None
    return {"fullgraph": True, "backend": backend, "mode": mode}


#: ``--size mid``: a llama-type model of about 1.1B parameters (random weights), where the forward dominates.
MID_SIZE = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 2048}


def _build(model_name: str, dtype: str = "float32", size: str = "tiny") -> Any:
    import torch

    from pytest_fullgraph import build_tiny

    torch.set_num_threads(1)
    if size == "mid":
        from transformers import AutoModelForCausalLM

        from pytest_fullgraph import tiny_config

        config = tiny_config(model_name)
        for name, value in MID_SIZE.items():
            setattr(config, name, value)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    else:
        model = build_tiny(model_name)
    model = model.to(device=device(), dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = None
    return model


def _config(tokens: int, beams: int = 1, assisted: bool = False, **extra: Any) -> Any:
    """Greedy (or beam search) for exactly ``tokens`` tokens; with ``assisted`` no ``min_new_tokens`` (assisted
    decoding takes no processors; without an EOS the length is exact anyway)."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=tokens, min_new_tokens=None if assisted else tokens, do_sample=False,
                            pad_token_id=0, eos_token_id=None, num_beams=beams, **extra)


@dataclass(frozen=True)
class Prompt:
    """What every variant of one measurement generates from: the model, its inputs, and how it decodes
    (``further``: the draft model, with ``assisted``)."""

    model: Any
    input_ids: Any
    attention_mask: Any
    tokens: int
    beams: int
    assisted: bool
    further: dict[str, Any]

    def config(self, **extra: Any) -> Any:
        return _config(self.tokens, self.beams, self.assisted, **extra)


def measure_one(variant: str, model_name: str, backend: str, batch: int, tokens: int,
                repeats: int, dtype: str = "float32", size: str = "tiny", beams: int = 1,
                assisted: bool = False, workdir: str | None = None) -> dict[str, Any]:
    """First call (includes compile) and steady-state seconds per token of one variant, in this process, and a
    digest of its tokens (every variant is greedy, or beam search with ``beams`` > 1: equal digests mean equal
    tokens). With ``assisted`` every variant drafts with the suite's draft model (``models.draft``). ``repeats``
    0 is a build only. ``ours_aoti`` keeps its package in ``workdir`` and loads it from there when a build left
    one (``throughput --jobs``)."""
    import torch

    from pytest_fullgraph.models.draft import build_draft

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()  # one process may measure several shapes in turn
    model = _build(model_name, dtype, size)
    input_ids, attention_mask = _inputs(model, batch)
    further = {"assistant_model": build_draft(model)} if assisted else {}
    prompt = Prompt(model, input_ids, attention_mask, tokens, beams, assisted, further)
    package = f"{model_name}-{dtype}-{size}-b{batch}-t{tokens}-beams{beams}{'-assisted' * assisted}.pt2"
    output, first, steady = _timed(_runner(variant, backend, prompt, package, workdir), repeats)
    row = {"variant": variant, "model": model_name, "backend": backend, "batch": batch, "tokens": tokens,
           "dtype": dtype, "size": size, "first_call_s": round(first, 3),
           "ms_per_token": round(1000 * min(steady) / tokens, 3) if steady else None,
           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "tokens_digest": hashlib.sha256(str(output.tolist()).encode()).hexdigest()[:16]}
    if device() == "cuda":
        row["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return row


def _runner(variant: str, backend: str, prompt: Prompt, package: str, workdir: str | None) -> Callable[[], Any]:
    """One call of ``variant``'s whole generation; the first call pays for its compile (or export and build)."""
    if variant == "ours_aoti":
        return _packaged(prompt, Path(workdir or tempfile.mkdtemp(prefix="fullgraph-bench-"), package))
    if variant.startswith("ours_compiled"):
        return _compiled(prompt, backend, "while" if variant.endswith("_while") else "unrolled")
    return _generate(prompt, variant, backend)


def _packaged(prompt: Prompt, package: Path) -> Callable[[], Any]:
    """Our ``while`` loop exported and packaged with AOTInductor at ``package`` (loaded from there when a build
    phase left it)."""
    from pytest_fullgraph import load_generate, save_generate
    from pytest_fullgraph.loop.decode import export_generate

    def build_program() -> Any:
        if package.exists():  # built by the build phase of `throughput --jobs`: this process measures it
            return load_generate(package)
        program = export_generate(prompt.model, prompt.input_ids, prompt.attention_mask, prompt.config(),
                                  loop="while", **prompt.further)
        return load_generate(save_generate(program, package, runtime="aoti"))

    packaged: list[Any] = []

    def run() -> Any:
        if not packaged:  # the first call pays for export and the AOTInductor build, as a compile would
            packaged.append(build_program())
        return packaged[0](prompt.input_ids, prompt.attention_mask)

    return run


def _compiled(prompt: Prompt, backend: str, loop: str) -> Callable[[], Any]:
    """Our loop (``unrolled`` or ``while``) compiled whole with ``backend``."""
    import torch

    from pytest_fullgraph.loop.decode import fullgraph_generate

    if backend == "inductor":
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True

    def compiler(loop_function: Any) -> Any:
        return torch.compile(loop_function, **_compile_kwargs(backend))

    def run() -> Any:
        return fullgraph_generate(prompt.model, prompt.input_ids, prompt.attention_mask, prompt.config(),
                                  compiler=compiler, loop=loop, **prompt.further)

    return run


def _generate(prompt: Prompt, variant: str, backend: str) -> Callable[[], Any]:
    """transformers' own paths: ``dynamic`` (the default cache), ``static`` (a static cache, compile disabled),
    ``static_compiled_forward`` (a static cache and the forward compiled with ``backend``)."""
    from transformers import CompileConfig

    extra: dict[str, Any] = {}
    if variant in ("static", "static_compiled_forward"):
        extra["cache_implementation"] = "static"
        extra["disable_compile"] = variant == "static"
    if variant == "static_compiled_forward":
        compile_config = CompileConfig(**_compile_kwargs(backend))
        compile_config._compile_all_devices = True  # type: ignore[assignment]
        extra["compile_config"] = compile_config
    config = prompt.config(**extra)

    def run() -> Any:
        return prompt.model.generate(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                                     generation_config=config, **prompt.further)

    return run


def _timed(run: Callable[[], Any], repeats: int) -> tuple[Any, float, list[float]]:
    """The first call's output and seconds, and the seconds of each of ``repeats`` further calls."""
    import torch

    with torch.no_grad():
        started = time.perf_counter()
        output = run()
        _synchronize()
        first = time.perf_counter() - started
        steady = []
        for _ in range(repeats):
            started = time.perf_counter()
            run()
            _synchronize()
            steady.append(time.perf_counter() - started)
    return output, first, steady


def _synchronize() -> None:
    """Wait for the GPU: a CUDA call returns before its kernels finish, so unsynchronised times are too short."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def failure(error: BaseException) -> str:
    """A failed variant in one line: the exception's type and first line, and for a higher-order op the break
    inside it (dynamo's last line, "Set TORCHDYNAMO_VERBOSE=1 ...", says nothing)."""
    from pytest_fullgraph.core.breaks import break_message, inner_break

    text = f"{type(error).__name__}: {break_message(str(error), getattr(error, 'gb_type', None) or '')}"
    cause = inner_break(error)
    return f"{text}; inside it: {cause.summary()}" if cause is not None else text


def machine() -> str:
    import torch
    import transformers

    return (f"{platform.processor() or platform.machine()}, {cpu_count()} cores, torch {torch.__version__}, "
            f"transformers {transformers.__version__}, device {device()}, 1 thread")


def cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0))
