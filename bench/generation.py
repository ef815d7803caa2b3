"""Generation benchmarks on the tiny CPU models (not a test: results go to bench/results/ by hand).

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
the settings the table needs, bench/raw.py), from which ``table(raw)`` renders the same lines for its
bench/results/ page. A throughput run over several (batch, tokens) is one table whose rows start with their batch
and tokens.

This file is the command line and its subcommands; bench/generation_measure.py measures in one process,
bench/generation_builds.py runs those measurements in fresh processes (and ``--jobs``' build and measure phases),
bench/generation_tables.py renders the tables.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import raw  # bench/raw.py
from generation_builds import BASELINES, VARIANT_NAMES, Cell, Setup, build_all, in_subprocess, measure_built
from generation_measure import device, failure, machine, measure_one
from generation_tables import (
    caption,
    cost_header,
    cost_line,
    scaling_header,
    scaling_line,
    table,
    throughput_header,
    throughput_line,
    variants_header,
    variants_line,
)

#: What other code uses of this file: ``table`` renders a run's raw output (tests/bench/test_bench_results.py finds it
#: here by the raw output's ``bench`` name).
__all__ = ["failure", "main", "measure_one", "table"]


def main() -> None:
    args = _parser().parse_args()
    if args.command == "one":
        _one(args)
        return
    started = time.time()
    print(f"machine: {machine()}")
    runs = {"scaling": _scaling, "table": _variants, "cost": _cost, "throughput": _throughput_run}
    made = runs[args.command](args)
    if made is not None and args.json:
        raw.save(args.json, "generation", made[0], started, time.time(), device=device(), **made[1])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    scaling = _scaling_command(commands)
    cost = _cost_command(commands)
    throughput = _throughput_command(commands)
    table_command = commands.add_parser("table", help="PR #30788's table: generate variants vs our compiled loop")
    table_command.add_argument("--model", default="llama")
    table_command.add_argument("--backend", default="aot_eager")
    table_command.add_argument("--batch", nargs="+", type=int, default=[1, 4])
    table_command.add_argument("--tokens", nargs="+", type=int, default=[16, 64])
    _one_command(commands)
    for command in (cost, throughput):
        command.add_argument("--beams", type=int, default=1, help="num_beams: beam search above 1 (default: greedy)")
    throughput.add_argument("--assisted", action="store_true",
                            help="assisted decoding with the suite's draft model (batch 1)")
    for command in (scaling, cost, throughput, table_command):
        command.add_argument("--json", help="write the raw output (rows, settings, command, commit, releases) to this "
                                            "file; table() renders the printed table from it")
    return parser


def _scaling_command(commands: Any) -> argparse.ArgumentParser:
    scaling: argparse.ArgumentParser = commands.add_parser(
        "scaling", help="compile time and memory of our compiled loop vs tokens")
    scaling.add_argument("--model", default="llama")
    scaling.add_argument("--backends", nargs="+", default=["eager", "aot_eager", "inductor"])
    scaling.add_argument("--tokens", nargs="+", type=int, default=[4, 16, 64])
    scaling.add_argument("--loop", choices=["unrolled", "while"], default="unrolled")
    return scaling


def _cost_command(commands: Any) -> argparse.ArgumentParser:
    cost: argparse.ArgumentParser = commands.add_parser(
        "cost", help="while_loop form: compile cost and peak memory vs tokens, per model")
    cost.add_argument("--models", default="popular", help="a selection, as --fullgraph-models takes it")
    cost.add_argument("--backend", default="inductor")
    cost.add_argument("--tokens", nargs="+", type=int, default=[16, 256])
    return cost


def _throughput_command(commands: Any) -> argparse.ArgumentParser:
    throughput: argparse.ArgumentParser = commands.add_parser(
        "throughput", help="AOTInductor-packaged loop vs generate, tokens/s per model")
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
    return throughput


def _one_command(commands: Any) -> None:
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


def _one(args: argparse.Namespace) -> None:
    """Measure each (batch, tokens) given in this process: one JSON row a line, for the parent to read."""
    for batch, tokens in itertools.product(_integers(args.batch), _integers(args.tokens)):
        try:
            row = measure_one(args.variant, args.model, args.backend, batch, tokens, args.repeats, args.dtype,
                              args.size, args.beams, args.assisted, args.workdir)
        except Exception as error:  # the parent prints this one line in the variant's cell
            row = {"error": failure(error), "batch": batch, "tokens": tokens}
        print(json.dumps(row), flush=True)


def _integers(listed: str) -> list[int]:
    return [int(part) for part in listed.split(",")]


def _scaling(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each (backend, tokens) in a fresh process: its first call is one compile, its peak RSS that compile's."""
    variant = "ours_compiled_while" if args.loop == "while" else "ours_compiled"
    settings = {"subcommand": "scaling", "model": args.model, "loop": args.loop, "backends": args.backends,
                "tokens": args.tokens, "batch": 2}
    print(*scaling_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for backend, tokens in itertools.product(args.backends, args.tokens):
        row = in_subprocess(variant, args.model, backend, "2", str(tokens), "3")
        rows.append({**row, "backend": backend, "tokens": tokens})  # an error row names neither
        print(scaling_line(rows[-1:], settings), flush=True)
    return rows, settings


def _variants(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """PR #30788's table: each generate variant and our compiled loops, each (batch, tokens) in a fresh process."""
    settings = {"subcommand": "table", "model": args.model, "backend": args.backend, "batch": args.batch,
                "tokens": args.tokens}
    print(*variants_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for batch, tokens, variant in itertools.product(args.batch, args.tokens, TABLE_VARIANTS):
        row = in_subprocess(variant, args.model, args.backend, str(batch), str(tokens), "5")
        rows.append({**row, "variant": variant, "batch": batch, "tokens": tokens})
        print(variants_line(rows[-1:], settings), flush=True)
    return rows, settings


#: ``table``'s rows for each (batch, tokens): transformers' three paths, then our loop unrolled and ``while``.
TABLE_VARIANTS = ("dynamic", "static", "static_compiled_forward", "ours_compiled", "ours_compiled_while")


def _cost(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One fresh process per (model, tokens): its first call is the compile, its peak RSS the compile's."""
    settings = {"subcommand": "cost", "models": args.models, "backend": args.backend, "tokens": args.tokens,
                "beams": args.beams, "batch": 2}
    print(*cost_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for model in _selected(args.models):
        mine = [{**_fastest(model, args.backend, count, args.beams), "model": model, "tokens": count}
                for count in args.tokens]
        rows += mine
        print(cost_line(mine, settings), flush=True)
    return rows, settings


def _fastest(model: str, backend: str, tokens: int, beams: int) -> dict[str, Any]:
    """The faster of two fresh processes: one compile's timing varies by a few seconds."""
    return min((in_subprocess("ours_compiled_while", model, backend, "2", str(tokens), "1", "--beams", str(beams))
                for _ in range(2)), key=lambda row: row.get("first_call_s", float("inf")))


def _throughput_run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """Builds (``--jobs`` at a time, or in the build phase) then measures; nothing to show after a build phase."""
    loops = args.variants or (["ours_aoti", "ours_compiled_while"] if device() == "cuda" else ["ours_aoti"])
    models = _selected(args.models)
    setup = Setup(args.dtype, args.size, args.beams, args.assisted)
    cells = list(itertools.product([*loops, *BASELINES], models, args.batch, args.tokens))
    root = Path(args.workdir or tempfile.mkdtemp(prefix="fullgraph-bench-builds-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.phase == "build" or (args.jobs > 1 and args.phase == "both"):
        build_all(cells, root, setup, args.jobs)
    if args.phase == "build":
        return None
    measured = measure_built(cells, root, setup) if args.jobs > 1 or args.phase == "measure" else None
    settings = {"subcommand": "throughput", "models": args.models, "loops": loops, "baselines": list(BASELINES),
                "batch": args.batch, "tokens": args.tokens, "dtype": args.dtype, "size": args.size,
                "beams": args.beams, "assisted": args.assisted}
    return _throughput(models, settings, setup, measured), settings


def _selected(selection: str) -> tuple[str, ...]:
    from pytest_fullgraph.models import session_registry

    return session_registry().select(selection)


def _throughput(models: tuple[str, ...], settings: dict[str, Any], setup: Setup,
                measured: dict[Cell, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Tokens/s of each loop variant and of generate's two paths, the ratios against them, and whether every
    variant gave the default generate's tokens; from ``measured`` where the cells were measured already."""
    print(caption(settings), *throughput_header(settings), sep="\n")
    rows: list[dict[str, Any]] = []
    for batch, tokens, model in itertools.product(settings["batch"], settings["tokens"], models):
        mine = [{**(measured[variant, model, batch, tokens] if measured is not None else
                    in_subprocess(variant, model, "inductor", str(batch), str(tokens), "5", *setup.arguments())),
                 "variant": variant, "model": model, "batch": batch, "tokens": tokens}
                for variant in [*settings["loops"], *settings["baselines"]]]
        rows += mine
        print(throughput_line(mine, settings), flush=True)
    return rows


if __name__ == "__main__":
    main()
