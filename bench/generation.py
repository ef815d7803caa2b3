"""Generation benchmarks on the tiny CPU models (not a test: results go to bench/RESULTS.md by hand).

    python bench/generation.py scaling --model llama --backends eager aot_eager inductor --tokens 4 16 64 \
        --json bench/results/generation-scaling.json
    python bench/generation.py table --model llama --backend aot_eager --batch 1 4 --tokens 16 64 \
        --json bench/results/generation-table.json
    python bench/generation.py cost --models popular --tokens 16 256 --json bench/results/generation-cost.json
    python bench/generation.py cost --models llama --tokens 16 256 --beams 4
    python bench/generation.py throughput --models popular --tokens 64 --json bench/results/generation-throughput.json
    python bench/generation.py throughput --models llama,gemma --batch 1 8 --tokens 64 256 --dtype bfloat16
    python bench/generation.py throughput --models llama,gemma --batch 1 8 --tokens 64 256 --jobs 8
    python bench/generation.py throughput --models llama --size mid --dtype bfloat16 --batch 1 --tokens 64
    python bench/generation.py throughput --models llama --beams 4 --tokens 64
    python bench/generation.py throughput --models llama --assisted --batch 1 --tokens 64

``scaling``: compile time (first call) and peak RSS of ``fullgraph_generate`` compiled with fullgraph=True,
each measurement in a fresh process so memory and caches do not leak between them.
``table``: the table of transformers PR #30788: first-call and per-token time of (a) generate with the dynamic
cache, (b) with a static cache, (c) static cache + compiled forward, (d) our loop compiled.
``cost``: per model, compile + first call and peak RSS of the ``while_loop`` form under inductor at each token count,
and the ratio of the longest to the shortest (issue #10's target: at most 1.1).
``throughput``: per model, steady tokens/s of our ``while_loop`` loop exported and packaged with AOTInductor, against
``generate`` with a static cache and a forward compiled by inductor (transformers' supported path) and against
the default dynamic-cache ``generate`` (issue #10's target: at least 4x the static + compiled-forward path); on
CUDA also the ``while`` and (``--variants``) unrolled loops compiled with CUDA graphs. Each cell's tokens are
compared with the default ``generate``'s (``torch.equal``): a row says ``exact`` or which variant differed.
``--size mid`` builds a ~1B-parameter llama-type model with random weights (where the forward dominates).
``--jobs N`` (N > 1) splits a throughput run in two: every cell is built (compiled, exported, packaged) N at a
time, then each (variant, model) is measured alone in one fresh process over every shape, warm from its own
inductor cache and packages: the same steady numbers in a fraction of the time, since compiles parallelise and
timings must not. ``--phase build`` / ``--phase measure`` with ``--workdir`` run the halves apart (bench/gpu.sh
builds while the suite runs, then measures alone).
With CUDA available, compiled variants use mode="reduce-overhead". A variant that fails says its exception's type
and first line (for a break inside ``while_loop``, the break inside it too).
Each subcommand prints its Markdown table row by row as it measures; ``--json FILE`` keeps the raw output (rows and
the settings the table needs, bench/raw.py), from which ``table(raw)`` renders the same lines for RESULTS.md. A
throughput run over several (batch, tokens) is one table whose rows start with their batch and tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import raw  # bench/raw.py

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
    model = model.to(device=_device(), dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = None
    return model


def _config(tokens: int, beams: int = 1, assisted: bool = False, **extra: Any) -> Any:
    """Greedy (or beam search) for exactly ``tokens`` tokens; with ``assisted`` no ``min_new_tokens`` (assisted
    decoding takes no processors; without an EOS the length is exact anyway)."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=tokens, min_new_tokens=None if assisted else tokens, do_sample=False,
                            pad_token_id=0, eos_token_id=None, num_beams=beams, **extra)


def measure_one(variant: str, model_name: str, backend: str, batch: int, tokens: int,
                repeats: int, dtype: str = "float32", size: str = "tiny", beams: int = 1,
                assisted: bool = False, workdir: str | None = None) -> dict[str, Any]:
    """First call (includes compile) and steady-state seconds per token of one variant, in this process, and a
    digest of its tokens (every variant is greedy, or beam search with ``beams`` > 1: equal digests mean equal
    tokens). With ``assisted`` every variant drafts with the suite's draft model (``models.draft``). ``repeats``
    0 is a build only. ``ours_aoti`` keeps its package in ``workdir`` and loads it from there when a build left
    one (``throughput --jobs``)."""
    import torch
    from transformers import CompileConfig

    from pytest_fullgraph.decode import fullgraph_generate
    from pytest_fullgraph.models.draft import build_draft

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()  # one process may measure several shapes in turn
    model = _build(model_name, dtype, size)
    input_ids, attention_mask = _inputs(model, batch)
    further = {"assistant_model": build_draft(model)} if assisted else {}

    if variant == "ours_aoti":
        from pytest_fullgraph import load_generate, save_generate
        from pytest_fullgraph.decode import export_generate

        package = Path(workdir or tempfile.mkdtemp(prefix="fullgraph-bench-"),
                       f"{model_name}-{dtype}-{size}-b{batch}-t{tokens}-beams{beams}{'-assisted' * assisted}.pt2")

        def build_program() -> Any:
            if package.exists():  # built by the build phase of `throughput --jobs`: this process measures it
                return load_generate(package)
            program = export_generate(model, input_ids, attention_mask, _config(tokens, beams, assisted),
                                      loop="while", **further)
            return load_generate(save_generate(program, package, runtime="aoti"))

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
            return fullgraph_generate(model, input_ids, attention_mask, _config(tokens, beams, assisted),
                                      compiler=compiler, loop=loop, **further)
    else:
        extra: dict[str, Any] = {}
        if variant in ("static", "static_compiled_forward"):
            extra["cache_implementation"] = "static"
            extra["disable_compile"] = variant == "static"
        if variant == "static_compiled_forward":
            compile_config = CompileConfig(**_compile_kwargs(backend))
            compile_config._compile_all_devices = True  # type: ignore[assignment]
            extra["compile_config"] = compile_config
        config = _config(tokens, beams, assisted, **extra)

        def run() -> Any:
            return model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config,
                                  **further)

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
    row = {"variant": variant, "model": model_name, "backend": backend, "batch": batch, "tokens": tokens,
           "dtype": dtype, "size": size, "first_call_s": round(first, 3),
           "ms_per_token": round(1000 * min(steady) / tokens, 3) if steady else None,
           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "tokens_digest": hashlib.sha256(str(output.tolist()).encode()).hexdigest()[:16]}
    if _device() == "cuda":
        row["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return row


def _synchronize() -> None:
    """Wait for the GPU: a CUDA call returns before its kernels finish, so unsynchronised times are too short."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def failure(error: BaseException) -> str:
    """A failed variant in one line: the exception's type and first line, and for a higher-order op the break
    inside it (dynamo's last line, "Set TORCHDYNAMO_VERBOSE=1 ...", says nothing)."""
    from pytest_fullgraph.breaks import break_message, inner_break

    text = f"{type(error).__name__}: {break_message(str(error), getattr(error, 'gb_type', None) or '')}"
    cause = inner_break(error)
    return f"{text}; inside it: {cause.summary()}" if cause is not None else text


def _in_subprocess(*args: str) -> dict[str, Any]:
    """One measurement in a fresh process with an empty inductor cache: a compile measured is a compile done.
    A failure is the child's own one-line account (``failure``), else its last line of error output."""
    with tempfile.TemporaryDirectory(prefix="fullgraph-bench-cache-") as cache:
        return _rows_in_subprocess(args, cache)[0]


def _rows_in_subprocess(args: tuple[str, ...] | list[str], cache: str, threads: int | None = None
                        ) -> list[dict[str, Any]]:
    """The rows of one ``one`` process (one per shape it was given) with ``cache`` as its inductor cache; a shape
    the process did not reach gets the process's failure. ``threads`` caps inductor's compile workers."""
    import os

    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    if threads:
        environment["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)
    completed = subprocess.run([sys.executable, __file__, "one", *args], capture_output=True, text=True,
                               check=False, env=environment)
    rows = [dict(json.loads(line)) for line in completed.stdout.splitlines() if line.startswith("{")]
    expected = len(args[3].split(",")) * len(args[4].split(","))  # the batch and token lists
    last = (completed.stderr.strip().splitlines() or [f"exit status {completed.returncode}, no output"])[-1]
    missing = [{"error": last, "args": list(args)}] * (expected - len(rows))
    return [row if "error" not in row else {**row, "args": list(args)} for row in rows] + missing


def _machine() -> str:
    import torch
    import transformers

    return (f"{platform.processor() or platform.machine()}, {_cpu_count()} cores, torch {torch.__version__}, "
            f"transformers {transformers.__version__}, device {_device()}, 1 thread")


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0))


def main() -> None:
    args = _parser().parse_args()
    if args.command == "one":
        _one(args)
        return
    started = time.time()
    print(f"machine: {_machine()}")
    runs = {"scaling": _scaling, "table": _variants, "cost": _cost, "throughput": _throughput_run}
    made = runs[args.command](args)
    if made is not None and args.json:
        raw.save(args.json, "generation", made[0], started, time.time(), device=_device(), **made[1])


def _parser() -> argparse.ArgumentParser:
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
    throughput.add_argument("--tokens", nargs="+", type=int, default=[64])
    throughput.add_argument("--batch", nargs="+", type=int, default=[2])
    throughput.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    throughput.add_argument("--size", default="tiny", choices=["tiny", "mid"],
                            help="tiny: the suite's tiny model; mid: a ~1B-parameter llama-type model, random weights")
    throughput.add_argument("--jobs", type=int, default=1,
                            help="above 1: build (compile, export, package) that many cells at once, each "
                                 "(variant, model) with its own inductor cache, then measure each (variant, model) "
                                 "alone in one process over every shape, reusing its builds; 1: one cold process "
                                 "per cell")
    throughput.add_argument("--phase", choices=["both", "build", "measure"], default="both",
                            help="with --workdir: build only (--jobs at a time), or measure what a build left "
                                 "there (a GPU script builds while other work runs, then measures alone)")
    throughput.add_argument("--workdir", default=None, help="where builds keep their caches and packages")
    throughput.add_argument("--variants", nargs="+", choices=[*VARIANT_NAMES], default=None,
                            help="the loop variants to measure (default: ours_aoti, and ours_compiled_while on CUDA);"
                                 " the two generate baselines are always measured")
    table_command = commands.add_parser("table", help="PR #30788's table: generate variants vs our compiled loop")
    table_command.add_argument("--model", default="llama")
    table_command.add_argument("--backend", default="aot_eager")
    table_command.add_argument("--batch", nargs="+", type=int, default=[1, 4])
    table_command.add_argument("--tokens", nargs="+", type=int, default=[16, 64])
    one = commands.add_parser("one")
    for name in ("variant", "model", "backend"):
        one.add_argument(name)
    for name in ("batch", "tokens"):
        one.add_argument(name, help="one number, or several joined by commas: each combination is measured in turn")
    one.add_argument("repeats", type=int)
    one.add_argument("--workdir", default=None, help="where ours_aoti keeps its package (built once, then loaded)")
    one.add_argument("--dtype", default="float32")
    one.add_argument("--size", default="tiny")
    one.add_argument("--beams", type=int, default=1)
    one.add_argument("--assisted", action="store_true")
    for command in (cost, throughput):
        command.add_argument("--beams", type=int, default=1, help="num_beams: beam search above 1 (default: greedy)")
    throughput.add_argument("--assisted", action="store_true",
                            help="assisted decoding with the suite's draft model (batch 1)")
    for command in (scaling, cost, throughput, table_command):
        command.add_argument("--json", help="write the raw output (rows, settings, command, commit, releases) to this "
                                            "file; table() renders the printed table from it")
    return parser


def _one(args: argparse.Namespace) -> None:
    """Measure each (batch, tokens) given in this process: one JSON row a line, for the parent to read."""
    for batch, tokens in itertools.product(_integers(args.batch), _integers(args.tokens)):
        try:
            row = measure_one(args.variant, args.model, args.backend, batch, tokens, args.repeats, args.dtype,
                              args.size, args.beams, args.assisted, args.workdir)
        except Exception as error:  # the parent prints this one line in the variant's cell
            row = {"error": failure(error), "batch": batch, "tokens": tokens}
        print(json.dumps(row), flush=True)


def _scaling(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each (backend, tokens) in a fresh process: its first call is one compile, its peak RSS that compile's."""
    variant = "ours_compiled_while" if args.loop == "while" else "ours_compiled"
    settings = {"subcommand": "scaling", "model": args.model, "loop": args.loop, "backends": args.backends,
                "tokens": args.tokens, "batch": 2}
    print(*_scaling_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for backend, tokens in itertools.product(args.backends, args.tokens):
        row = _in_subprocess(variant, args.model, backend, "2", str(tokens), "3")
        rows.append({**row, "backend": backend, "tokens": tokens})  # an error row names neither
        print(_scaling_line(rows[-1:], settings), flush=True)
    return rows, settings


def _variants(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """PR #30788's table: each generate variant and our compiled loops, each (batch, tokens) in a fresh process."""
    settings = {"subcommand": "table", "model": args.model, "backend": args.backend, "batch": args.batch,
                "tokens": args.tokens}
    print(*_variants_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for batch, tokens, variant in itertools.product(args.batch, args.tokens, TABLE_VARIANTS):
        row = _in_subprocess(variant, args.model, args.backend, str(batch), str(tokens), "5")
        rows.append({**row, "variant": variant, "batch": batch, "tokens": tokens})
        print(_variants_line(rows[-1:], settings), flush=True)
    return rows, settings


#: ``table``'s rows for each (batch, tokens): transformers' three paths, then our loop unrolled and ``while``.
TABLE_VARIANTS = ("dynamic", "static", "static_compiled_forward", "ours_compiled", "ours_compiled_while")


def _cost(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One fresh process per (model, tokens): its first call is the compile, its peak RSS the compile's."""
    settings = {"subcommand": "cost", "models": args.models, "backend": args.backend, "tokens": args.tokens,
                "beams": args.beams, "batch": 2}
    print(*_cost_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for model in _selected(args.models):
        mine = [{**_fastest(model, args.backend, count, args.beams), "model": model, "tokens": count}
                for count in args.tokens]
        rows += mine
        print(_cost_line(mine, settings), flush=True)
    return rows, settings


def _fastest(model: str, backend: str, tokens: int, beams: int) -> dict[str, Any]:
    """The faster of two fresh processes: one compile's timing varies by a few seconds."""
    return min((_in_subprocess("ours_compiled_while", model, backend, "2", str(tokens), "1", "--beams", str(beams))
                for _ in range(2)), key=lambda row: row.get("first_call_s", float("inf")))


def _throughput_run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """Builds (``--jobs`` at a time, or in the build phase) then measures; nothing to show after a build phase."""
    loops = args.variants or (["ours_aoti", "ours_compiled_while"] if _device() == "cuda" else ["ours_aoti"])
    models = _selected(args.models)
    setup = Setup(args.dtype, args.size, args.beams, args.assisted)
    cells = list(itertools.product([*loops, *BASELINES], models, args.batch, args.tokens))
    root = Path(args.workdir or tempfile.mkdtemp(prefix="fullgraph-bench-builds-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.phase == "build" or (args.jobs > 1 and args.phase == "both"):
        _build_all(cells, root, setup, args.jobs)
    if args.phase == "build":
        return None
    measured = _measure_built(cells, root, setup) if args.jobs > 1 or args.phase == "measure" else None
    settings = {"subcommand": "throughput", "models": args.models, "loops": loops, "baselines": list(BASELINES),
                "batch": args.batch, "tokens": args.tokens, "dtype": args.dtype, "size": args.size,
                "beams": args.beams, "assisted": args.assisted}
    return _throughput(models, settings, setup, measured), settings


def _selected(selection: str) -> tuple[str, ...]:
    from pytest_fullgraph.models import session_registry

    return session_registry().select(selection)


Cell = tuple[str, str, int, int]  # variant, model, batch, new tokens

#: What ``throughput`` can measure: our loop packaged with AOTInductor (the ``while`` form), our loop compiled
#: (unrolled, or ``while``; CUDA graphs on CUDA), and transformers' two paths it is compared with.
VARIANT_NAMES = ("ours_aoti", "ours_compiled_while", "ours_compiled", "static_compiled_forward", "dynamic")
BASELINES = ("static_compiled_forward", "dynamic")


class Setup(NamedTuple):
    """What every cell of one throughput run shares, and how ``one`` is told it. (Not a dataclass: a test loads
    this file by path, unregistered in sys.modules, where a dataclass cannot be made.)"""

    dtype: str
    size: str
    beams: int
    assisted: bool

    def arguments(self) -> list[str]:
        return ["--dtype", self.dtype, "--size", self.size, "--beams", str(self.beams),
                *(["--assisted"] if self.assisted else [])]


def _throughput(models: tuple[str, ...], settings: dict[str, Any], setup: Setup,
                measured: dict[Cell, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Tokens/s of each loop variant and of generate's two paths, the ratios against them, and whether every
    variant gave the default generate's tokens; from ``measured`` where the cells were measured already."""
    print(_caption(settings), *_throughput_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for batch, tokens, model in itertools.product(settings["batch"], settings["tokens"], models):
        mine = [{**(measured[variant, model, batch, tokens] if measured is not None else
                    _in_subprocess(variant, model, "inductor", str(batch), str(tokens), "5", *setup.arguments())),
                 "variant": variant, "model": model, "batch": batch, "tokens": tokens}
                for variant in [*settings["loops"], *settings["baselines"]]]
        rows += mine
        print(_throughput_line(mine, settings), flush=True)
    return rows


def _build_all(cells: list[Cell], root: Path, setup: Setup, jobs: int) -> dict[Cell, dict[str, Any]]:
    """Every cell built ``jobs`` at a time (compiles are CPU work and parallelise; steady timings would not),
    each (variant, model) with its own inductor cache and packages under ``root``. Each build is added to
    ``root/builds.jsonl`` as it ends: a build phase stopped at a time limit keeps the cells it built."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()

    def build(cell: Cell) -> dict[str, Any]:
        variant, model, batch, count = cell
        workdir = _workdir(root, variant, model)
        arguments = [variant, model, "inductor", str(batch), str(count), "0", "--workdir", str(workdir),
                     *setup.arguments()]
        row = _rows_in_subprocess(arguments, str(workdir / "inductor"), max(1, _cpu_count() // jobs))[0]
        with lock, (root / "builds.jsonl").open("a") as log:
            log.write(json.dumps([*cell, row]) + "\n")
        return row

    print(f"building {len(cells)} cells in {root}, {jobs} at a time (their first calls, under that load, are not "
          "reported)", flush=True)
    # shortest generations first, each shape's variants together: a phase stopped early leaves whole rows
    ordered = sorted(cells, key=lambda cell: (cell[3], cell[2], cell[1]))
    with ThreadPoolExecutor(jobs) as pool:
        return dict(zip(ordered, pool.map(build, ordered), strict=True))


def _measure_built(cells: list[Cell], root: Path, setup: Setup) -> dict[Cell, dict[str, Any]]:
    """Each (variant, model) measured alone in one fresh process over the shapes that built, warm from its own
    inductor cache and packages under ``root``. A cell whose build failed, or that was never built, says so."""
    log = root / "builds.jsonl"
    recorded = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    built: dict[Cell, dict[str, Any]] = {(variant, model, batch, count): row
                                         for variant, model, batch, count, row in recorded}
    as_built = {cell: built.get(cell, {"error": f"not built in {root}"}) for cell in cells}
    measured = {cell: row for cell, row in as_built.items() if "error" in row}  # failed or missing builds stay
    remaining = sorted(set(cells) - set(measured), key=lambda cell: (cell[1], cell[0], cell[2], cell[3]))
    for (variant, model), group in itertools.groupby(remaining, key=lambda cell: cell[:2]):  # model by model
        shapes = [(batch, count) for _, _, batch, count in group]
        batches, tokens = sorted({b for b, _ in shapes}), sorted({t for _, t in shapes})
        groups = [shapes] if len(shapes) == len(batches) * len(tokens) else [[shape] for shape in shapes]
        for together in groups:  # `one` measures the product of its lists: every shape at once when all built
            workdir = _workdir(root, variant, model)
            arguments = [variant, model, "inductor", ",".join(str(b) for b in sorted({b for b, _ in together})),
                         ",".join(str(t) for t in sorted({t for _, t in together})), "5", "--workdir",
                         str(workdir), *setup.arguments()]
            rows = _rows_in_subprocess(arguments, str(workdir / "inductor"))
            measured.update({(variant, model, *shape): row for shape, row in zip(sorted(together), rows, strict=True)})
            with (root / "measured.jsonl").open("a") as log:  # kept as it comes: a run stopped early keeps these
                log.writelines(json.dumps(row) + "\n" for row in rows)
    return measured


def _workdir(root: Path, variant: str, model: str) -> Path:
    workdir = root / f"{variant}-{model}"
    workdir.mkdir(exist_ok=True)
    return workdir


def _integers(listed: str) -> list[int]:
    return [int(part) for part in listed.split(",")]


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.1f}x" if ours and theirs else "-"


def _exactness(rows: dict[str, dict[str, Any]]) -> str:
    """``exact`` when every variant that ran gave the default generate's tokens, else the ones that differ."""
    reference = rows["dynamic"].get("tokens_digest")
    if reference is None:
        return "- (generate failed)"
    differing = [variant for variant, row in rows.items() if row.get("tokens_digest") not in (None, reference)]
    return "exact" if not differing else "MISMATCH: " + ", ".join(differing)


def table(raw_output: dict[str, Any]) -> list[str]:
    """RESULTS.md's table of a run, from its raw output alone (no torch): the lines the subcommand printed."""
    settings = raw_output["settings"]
    header, line, keys = TABLES[settings["subcommand"]]
    return [*header(settings), *(line(rows, settings) for rows in _lines(raw_output["rows"], keys))]


def _lines(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[list[dict[str, Any]]]:
    """The rows of each line of a table, in order: consecutive rows alike in ``keys`` (no keys: one row a line)."""
    if not keys:
        return [[row] for row in rows]
    return [list(group) for _, group in itertools.groupby(rows, key=lambda row: tuple(row[key] for key in keys))]


def _scaling_header(settings: dict[str, Any]) -> list[str]:
    return ["| loop | backend | new tokens | compile + first call (s) | steady ms/token | peak RSS (MiB) |",
            "|---|---|---|---|---|---|"]


def _scaling_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    row = rows[0]
    return (f"| {settings['loop']} | {row['backend']} | {row['tokens']} | {row.get('first_call_s', row.get('error'))}"
            f" | {row.get('ms_per_token', '-')} | {row.get('peak_rss_mib', '-')} |")


def _variants_header(settings: dict[str, Any]) -> list[str]:
    return [f"| variant | batch | new tokens | first call (s) | steady ms/token | backend {settings['backend']} |",
            "|---|---|---|---|---|---|"]


def _variants_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    row = rows[0]
    return (f"| {row['variant']} | {row['batch']} | {row['tokens']} | {row.get('first_call_s', row.get('error'))} | "
            f"{row.get('ms_per_token', '-')} | |")


def _cost_header(settings: dict[str, Any]) -> list[str]:
    tokens = settings["tokens"]
    columns = " | ".join(f"{count} tokens: first call (s) / peak RSS (MiB)" for count in tokens)
    return [f"| model | {columns} | time ratio {tokens[-1]}/{tokens[0]} | RSS ratio |",
            "|---|" + "---|" * (len(tokens) + 2)]


def _cost_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """One model's cells in the order of its token counts, and the last against the first (none if one failed)."""
    cells = [f"{row['first_call_s']} / {row['peak_rss_mib']}" if "error" not in row else f"error: {row['error']}"
             for row in rows]
    ratios = ["-", "-"]
    if all("error" not in row for row in rows):
        ratios = [f"{rows[-1]['first_call_s'] / rows[0]['first_call_s']:.2f}",
                  f"{rows[-1]['peak_rss_mib'] / rows[0]['peak_rss_mib']:.2f}"]
    return f"| {rows[0]['model']} | {' | '.join(cells)} | {' | '.join(ratios)} |"


def _several_shapes(settings: dict[str, Any]) -> bool:
    """A throughput run over several (batch, tokens) is one table whose rows say their shape."""
    return len(settings["batch"]) * len(settings["tokens"]) > 1


def _caption(settings: dict[str, Any]) -> str:
    """The line above a throughput table: its shapes, dtype, size and decoding, and what its columns mean."""
    mode = "assisted by the suite's draft model" if settings["assisted"] else f"num_beams {settings['beams']}"
    batches, tokens = (" / ".join(str(value) for value in settings[key]) for key in ("batch", "tokens"))
    return (f"\nbatch {batches}, {tokens} new tokens, {settings['dtype']}, {settings['size']} model, {mode}; "
            "tokens/s = batch x tokens / steady seconds of one generation; exact: every variant's tokens equal the "
            "default generate's")


def _throughput_header(settings: dict[str, Any]) -> list[str]:
    loops, baselines = settings["loops"], settings["baselines"]
    ratios = [f"{loop} / {base}" for loop in loops for base in baselines]
    shape = "batch | new tokens | " if _several_shapes(settings) else ""
    return [f"| {shape}model | " + " | ".join(f"{variant} tok/s" for variant in [*loops, *baselines]) + " | "
            + " | ".join(ratios) + " | exact |",
            "|---|" + "---|" * (len(loops) + len(baselines) + len(ratios) + 1 + 2 * _several_shapes(settings))]


def _throughput_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """One model at one shape: tokens/s per variant (or its error), loops against baselines, exactness."""
    by_variant = {row["variant"]: row for row in rows}
    batch, tokens, model = rows[0]["batch"], rows[0]["tokens"], rows[0]["model"]
    rates = {variant: batch * 1000 / row["ms_per_token"] if row.get("ms_per_token") else None
             for variant, row in by_variant.items()}
    cells = [f"{rates[variant]:.0f}" if rates[variant] else f"error: {by_variant[variant].get('error')}"
             for variant in by_variant]
    quotients = [_ratio(rates[loop], rates[base]) for loop in settings["loops"] for base in settings["baselines"]]
    shape = f"{batch} | {tokens} | " if _several_shapes(settings) else ""
    return f"| {shape}{model} | {' | '.join(cells)} | {' | '.join(quotients)} | {_exactness(by_variant)} |"


#: Per subcommand: its table's header, the line of each group of rows, and the row keys a group shares.
TABLES: dict[str, tuple[Callable[[dict[str, Any]], list[str]], Callable[[list[dict[str, Any]], dict[str, Any]], str],
                        tuple[str, ...]]] = {
    "scaling": (_scaling_header, _scaling_line, ()),
    "table": (_variants_header, _variants_line, ()),
    "cost": (_cost_header, _cost_line, ("model",)),
    "throughput": (_throughput_header, _throughput_line, ("batch", "tokens", "model")),
}


if __name__ == "__main__":
    main()
