"""bench/generation.py's measurements in fresh processes (its ``one`` subcommand, one process per measurement or per
(variant, model)), and ``throughput --jobs``'s two phases: every cell built in parallel, then each (variant, model)
measured alone over its shapes, warm from its own builds."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from generation_measure import cpu_count

#: The script whose ``one`` subcommand measures in a fresh process.
GENERATION = str(Path(__file__).with_name("generation.py"))


def in_subprocess(*args: str) -> dict[str, Any]:
    """One measurement in a fresh process with an empty inductor cache: a compile measured is a compile done.
    A failure is the child's own one-line account (``failure``), else its last line of error output."""
    with tempfile.TemporaryDirectory(prefix="fullgraph-bench-cache-") as cache:
        return rows_in_subprocess(args, cache)[0]


def rows_in_subprocess(args: tuple[str, ...] | list[str], cache: str, threads: int | None = None
                       ) -> list[dict[str, Any]]:
    """The rows of one ``one`` process (one per shape it was given) with ``cache`` as its inductor cache; a shape
    the process did not reach gets the process's failure. ``threads`` caps inductor's compile workers."""
    import os

    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    if threads:
        environment["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)
    completed = subprocess.run([sys.executable, GENERATION, "one", *args], capture_output=True, text=True,
                               check=False, env=environment)
    rows = [dict(json.loads(line)) for line in completed.stdout.splitlines() if line.startswith("{")]
    expected = len(args[3].split(",")) * len(args[4].split(","))  # the batch and token lists
    last = (completed.stderr.strip().splitlines() or [f"exit status {completed.returncode}, no output"])[-1]
    missing = [{"error": last, "args": list(args)}] * (expected - len(rows))
    return [row if "error" not in row else {**row, "args": list(args)} for row in rows] + missing


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


def build_all(cells: list[Cell], root: Path, setup: Setup, jobs: int) -> dict[Cell, dict[str, Any]]:
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
        row = rows_in_subprocess(arguments, str(workdir / "inductor"), max(1, cpu_count() // jobs))[0]
        with lock, (root / "builds.jsonl").open("a") as log:
            log.write(json.dumps([*cell, row]) + "\n")
        return row

    print(f"building {len(cells)} cells in {root}, {jobs} at a time (their first calls, under that load, are not "
          "reported)", flush=True)
    # shortest generations first, each shape's variants together: a phase stopped early leaves whole rows
    ordered = sorted(cells, key=lambda cell: (cell[3], cell[2], cell[1]))
    with ThreadPoolExecutor(jobs) as pool:
        return dict(zip(ordered, pool.map(build, ordered), strict=True))


def measure_built(cells: list[Cell], root: Path, setup: Setup) -> dict[Cell, dict[str, Any]]:
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
            rows = rows_in_subprocess(arguments, str(workdir / "inductor"))
            measured.update({(variant, model, *shape): row for shape, row in zip(sorted(together), rows, strict=True)})
            with (root / "measured.jsonl").open("a") as kept:  # kept as it comes: a run stopped early keeps these
                kept.writelines(json.dumps(row) + "\n" for row in rows)
    return measured


def _workdir(root: Path, variant: str, model: str) -> Path:
    workdir = root / f"{variant}-{model}"
    workdir.mkdir(exist_ok=True)
    return workdir
