"""Generation benchmarks on the tiny CPU models (not a test: results go to bench/RESULTS.md by hand).

    python bench/generation.py scaling --model llama --backends eager aot_eager inductor --tokens 4 16 64
    python bench/generation.py table --model llama --backend aot_eager --batch 1 4 --tokens 16 64
    python bench/generation.py cost --models popular --tokens 16 256
    python bench/generation.py throughput --models popular --tokens 64

``scaling``: compile time (first call) and peak RSS of ``fullgraph_generate`` compiled with fullgraph=True,
each measurement in a fresh process so memory and caches do not leak between them.
``table``: the table of transformers PR #30788: first-call and per-token time of (a) generate with the dynamic
cache, (b) with a static cache, (c) static cache + compiled forward, (d) our loop compiled.
``cost``: per model, compile + first call and peak RSS of the ``while_loop`` form under inductor at each token count,
and the ratio of the longest to the shortest (issue #10's target: at most 1.1).
``throughput``: per model, steady tokens/s of our ``while_loop`` loop exported and packaged with AOTInductor, against
``generate`` with a static cache and a forward compiled by inductor (transformers' supported path) and against
the default dynamic-cache ``generate`` (issue #10's target: at least 4x the static + compiled-forward path).
With CUDA available, compiled variants use mode="reduce-overhead".
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from typing import Any

PROMPT_LENGTH = 8


def _inputs(model: Any, batch: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(0)
    vocab = int(model.config.get_text_config().vocab_size)
    input_ids = torch.randint(3, vocab, (batch, PROMPT_LENGTH), generator=generator)
    return input_ids.to(_device()), torch.ones_like(input_ids).to(_device())


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _compile_kwargs(backend: str) -> dict[str, Any]:
    mode = "reduce-overhead" if _device() == "cuda" and backend == "inductor" else None
    return {"fullgraph": True, "backend": backend, "mode": mode}


def _build(model_name: str) -> Any:
    import torch

    from pytest_fullgraph import build_tiny

    torch.set_num_threads(1)
    model = build_tiny(model_name).to(_device())
    model.generation_config.eos_token_id = None
    return model


def _config(tokens: int, **extra: Any) -> Any:
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0,
                            eos_token_id=None, **extra)


def measure_one(variant: str, model_name: str, backend: str, batch: int, tokens: int,
                repeats: int) -> dict[str, Any]:
    """First call (includes compile) and steady-state seconds per token of one variant, in this process."""
    import torch
    from transformers import CompileConfig

    from pytest_fullgraph.decode import fullgraph_generate

    model = _build(model_name)
    input_ids, attention_mask = _inputs(model, batch)

    if variant == "ours_aoti":
        import tempfile

        from pytest_fullgraph import load_generate, save_generate
        from pytest_fullgraph.decode import export_generate

        directory = tempfile.mkdtemp(prefix="fullgraph-bench-")

        def build_program() -> Any:
            program = export_generate(model, input_ids, attention_mask, _config(tokens), loop="while")
            return load_generate(save_generate(program, f"{directory}/{model_name}", runtime="aoti"))

        packaged: list[Any] = []

        def run() -> Any:
            if not packaged:  # the first call pays for export and the AOTInductor build, as a compile would
                packaged.append(build_program())
            return packaged[0](input_ids, attention_mask)
    elif variant.startswith("ours_compiled"):
        loop = "while" if variant.endswith("_while") else "unrolled"
        if backend == "inductor":
            import torch._inductor.config as inductor_config

            inductor_config.fallback_random = True

        def compiler(loop_function: Any) -> Any:
            return torch.compile(loop_function, **_compile_kwargs(backend))

        def run() -> Any:
            return fullgraph_generate(model, input_ids, attention_mask, _config(tokens), compiler=compiler,
                                      loop=loop)
    else:
        extra: dict[str, Any] = {}
        if variant in ("static", "static_compiled_forward"):
            extra["cache_implementation"] = "static"
            extra["disable_compile"] = variant == "static"
        if variant == "static_compiled_forward":
            compile_config = CompileConfig(**_compile_kwargs(backend))
            compile_config._compile_all_devices = True  # type: ignore[assignment]
            extra["compile_config"] = compile_config
        config = _config(tokens, **extra)

        def run() -> Any:
            return model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)

    with torch.no_grad():
        started = time.perf_counter()
        run()
        first = time.perf_counter() - started
        steady = []
        for _ in range(repeats):
            started = time.perf_counter()
            run()
            steady.append(time.perf_counter() - started)
    return {"variant": variant, "model": model_name, "backend": backend, "batch": batch, "tokens": tokens,
            "first_call_s": round(first, 3), "ms_per_token": round(1000 * min(steady) / tokens, 3),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _in_subprocess(*args: str) -> dict[str, Any]:
    """One measurement in a fresh process with an empty inductor cache: a compile measured is a compile done."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fullgraph-bench-cache-") as cache:
        environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        completed = subprocess.run([sys.executable, __file__, "one", *args], capture_output=True, text=True,
                                   check=False, env=environment)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        return {"error": (completed.stderr.strip().splitlines() or ["no output"])[-1], "args": list(args)}
    return dict(json.loads(lines[-1]))


def _machine() -> str:
    import torch
    import transformers

    return (f"{platform.processor() or platform.machine()}, {_cpu_count()} cores, torch {torch.__version__}, "
            f"transformers {transformers.__version__}, device {_device()}, 1 thread")


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    scaling = commands.add_parser("scaling", help="compile time and memory of our compiled loop vs tokens")
    scaling.add_argument("--model", default="llama")
    scaling.add_argument("--backends", nargs="+", default=["eager", "aot_eager", "inductor"])
    scaling.add_argument("--tokens", nargs="+", type=int, default=[4, 16, 64])
    scaling.add_argument("--loop", choices=["unrolled", "while"], default="unrolled")
    cost = commands.add_parser("cost", help="while_loop form: compile cost and peak memory vs tokens, per model")
    cost.add_argument("--models", default="popular", help="a selection, as --fullgraph-models takes it")
    cost.add_argument("--backend", default="inductor")
    cost.add_argument("--tokens", nargs="+", type=int, default=[16, 256])
    throughput = commands.add_parser("throughput", help="AOTInductor-packaged loop vs generate, tokens/s per model")
    throughput.add_argument("--models", default="popular", help="a selection, as --fullgraph-models takes it")
    throughput.add_argument("--tokens", type=int, default=64)
    throughput.add_argument("--batch", type=int, default=2)
    table = commands.add_parser("table", help="PR #30788's table: generate variants vs our compiled loop")
    table.add_argument("--model", default="llama")
    table.add_argument("--backend", default="aot_eager")
    table.add_argument("--batch", nargs="+", type=int, default=[1, 4])
    table.add_argument("--tokens", nargs="+", type=int, default=[16, 64])
    one = commands.add_parser("one")
    for name in ("variant", "model", "backend"):
        one.add_argument(name)
    for name in ("batch", "tokens", "repeats"):
        one.add_argument(name, type=int)
    args = parser.parse_args()

    if args.command == "one":
        print(json.dumps(measure_one(args.variant, args.model, args.backend, args.batch, args.tokens,
                                     args.repeats)))
        return
    print(f"machine: {_machine()}")
    if args.command == "cost":
        _cost(_selected(args.models), args.backend, args.tokens)
    elif args.command == "throughput":
        _throughput(_selected(args.models), args.batch, args.tokens)
    elif args.command == "scaling":
        variant = "ours_compiled_while" if args.loop == "while" else "ours_compiled"
        print("| loop | backend | new tokens | compile + first call (s) | steady ms/token | peak RSS (MiB) |")
        print("|---|---|---|---|---|---|")
        for backend in args.backends:
            for tokens in args.tokens:
                row = _in_subprocess(variant, args.model, backend, "2", str(tokens), "3")
                print(f"| {args.loop} | {backend} | {tokens} | {row.get('first_call_s', row.get('error'))} | "
                      f"{row.get('ms_per_token', '-')} | {row.get('peak_rss_mib', '-')} |", flush=True)
    else:
        print(f"| variant | batch | new tokens | first call (s) | steady ms/token | backend {args.backend} |")
        print("|---|---|---|---|---|---|")
        for batch in args.batch:
            for tokens in args.tokens:
                for variant in ("dynamic", "static", "static_compiled_forward", "ours_compiled",
                                "ours_compiled_while"):
                    row = _in_subprocess(variant, args.model, args.backend, str(batch), str(tokens), "5")
                    print(f"| {variant} | {batch} | {tokens} | {row.get('first_call_s', row.get('error'))} | "
                          f"{row.get('ms_per_token', '-')} | |", flush=True)


def _selected(selection: str) -> tuple[str, ...]:
    from pytest_fullgraph.models import session_registry

    return session_registry().select(selection)


def _cost(models: tuple[str, ...], backend: str, tokens: list[int]) -> None:
    """One fresh process per (model, tokens): its first call is the compile, its peak RSS the compile's."""
    columns = " | ".join(f"{count} tokens: first call (s) / peak RSS (MiB)" for count in tokens)
    print(f"| model | {columns} | time ratio {tokens[-1]}/{tokens[0]} | RSS ratio |")
    print("|---|" + "---|" * (len(tokens) + 2))
    for model in models:
        # the faster of two fresh processes per length: one compile's timing varies by a few seconds
        rows = [min((_in_subprocess("ours_compiled_while", model, backend, "2", str(count), "1") for _ in range(2)),
                    key=lambda row: row.get("first_call_s", float("inf"))) for count in tokens]
        cells = [f"{row['first_call_s']} / {row['peak_rss_mib']}" if "error" not in row else f"error: {row['error']}"
                 for row in rows]
        ratios = ["-", "-"]
        if all("error" not in row for row in rows):
            ratios = [f"{rows[-1]['first_call_s'] / rows[0]['first_call_s']:.2f}",
                      f"{rows[-1]['peak_rss_mib'] / rows[0]['peak_rss_mib']:.2f}"]
        print(f"| {model} | {' | '.join(cells)} | {' | '.join(ratios)} |", flush=True)


def _throughput(models: tuple[str, ...], batch: int, tokens: int) -> None:
    variants = ("ours_aoti", "static_compiled_forward", "dynamic")
    print(f"batch {batch}, {tokens} new tokens; tokens/s = batch x tokens / steady seconds of one generation")
    print("| model | AOTI loop tok/s | static + compiled forward tok/s | dynamic generate tok/s "
          "| AOTI / static+compiled | AOTI / dynamic |")
    print("|---|---|---|---|---|---|")
    for model in models:
        rows = {variant: _in_subprocess(variant, model, "inductor", str(batch), str(tokens), "5")
                for variant in variants}
        rates = {variant: batch * 1000 / row["ms_per_token"] if "ms_per_token" in row else None
                 for variant, row in rows.items()}
        cells = [f"{rates[variant]:.0f}" if rates[variant] else f"error: {rows[variant].get('error')}"
                 for variant in variants]
        ours, static, dynamic = (rates[variant] for variant in variants)
        ratios = [f"{ours / other:.1f}x" if ours and other else "-" for other in (static, dynamic)]
        print(f"| {model} | {' | '.join(cells)} | {' | '.join(ratios)} |", flush=True)


if __name__ == "__main__":
    main()
