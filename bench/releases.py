"""The torch-release table: the same checks on every torch release that installs, and what changed between them.

    python bench/releases.py run --venv /path/to/venv-torch2.11 [--venv ...] -o bench/reports/releases
    python bench/releases.py extract baselines/fast-torch2.13.0.json -o bench/reports/releases/torch2.13.0
    python bench/releases.py table bench/reports/releases/torch*/fullgraph-report.json.gz

``run``: for each virtual environment (one torch release each, pytest_fullgraph installed in it, e.g. with
``pip install -e .``), the conformance suite's basic scenarios at every fast level on the release table's models,
each release in its own process, into ``<output>/torch<release>/``. A release whose run fails to start is said
in one line; the others go on.
``extract``: the table's models out of another report of the same checks (e.g. the committed pull-request baseline,
``baselines/fast-torch2.13.0.json``), so a release measured there need not be run again.
``table``: per release and level, the outcome counts; then, for each release against the one before it, every
verdict that changed and every break site that appeared or went, as ``report diff`` says them: the section
``python -m pytest_fullgraph report findings ... --releases`` writes into docs/FINDINGS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

#: The models of the release table: the popular families the issue names (dense, sliding, recurrent, GPT-2).
MODELS = ("llama", "gemma", "mistral", "qwen3", "phi3", "gpt2", "mamba", "gemma2")


def run(venvs: list[Path], output: Path, models: tuple[str, ...]) -> None:
    """The suite under each environment's python, one release after another (each run uses both cores)."""
    for venv in venvs:
        python = venv / "bin" / "python"
        release = _torch_release(python)
        if release is None:
            print(f"{venv}: no torch importable with {python}; skipped", flush=True)
            continue
        target = output / f"torch{release}"
        command = [str(python), "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q",
                   f"--fullgraph-models={','.join(models)}", f"--fullgraph-report={target}",
                   "suites/test_conformance.py"]
        started = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        tail = (completed.stdout.strip().splitlines() or ["no output"])[-1]
        print(f"torch {release}: exit {completed.returncode} in {time.perf_counter() - started:.0f} s: {tail}",
              flush=True)


def _torch_release(python: Path) -> str | None:
    completed = subprocess.run([str(python), "-c", "import torch; print(torch.__version__.split('+')[0])"],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        return None
    return completed.stdout.strip() or None


def extract(source: Path, output: Path, models: tuple[str, ...]) -> None:
    """Write the checks of ``models`` from ``source`` as a report of their own (same environment, noted)."""
    from pytest_fullgraph.report import Report, load, write

    report = load(source)
    checks = [result for result in report.checks if result.model in models]
    missing = sorted(set(models) - {result.model for result in checks})
    if missing:
        sys.exit(f"{source}: no checks of {', '.join(missing)}")
    environment = {**report.environment, "models": sorted(models), "extracted_from": str(source)}
    write(Report(environment, checks, report.crashed_workers, report.run, report.stored_help), output)
    print(f"{len(checks)} checks of {len(models)} models from {source} -> {output}")


def table(paths: list[Path]) -> None:
    """The release table as docs/FINDINGS.md has it (``python -m pytest_fullgraph report findings --releases``)."""
    from pytest_fullgraph.publish import findings, releases
    from pytest_fullgraph.report import load

    print("\n".join(releases.release_section([(findings.shown(path), load(path)) for path in paths])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    running = commands.add_parser("run", help="the suite on each release's environment")
    running.add_argument("--venv", type=Path, action="append", required=True,
                         help="a virtual environment with one torch release and pytest_fullgraph installed")
    running.add_argument("-o", "--output", type=Path, default=Path("bench/reports/releases"))
    running.add_argument("--models", default=",".join(MODELS))
    extracting = commands.add_parser("extract", help="the table's models out of a larger report")
    extracting.add_argument("source", type=Path)
    extracting.add_argument("-o", "--output", type=Path, required=True)
    extracting.add_argument("--models", default=",".join(MODELS))
    tabling = commands.add_parser("table", help="outcome counts per release and level, and what changed")
    tabling.add_argument("reports", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "run":
        run(args.venv, args.output, tuple(args.models.split(",")))
    elif args.command == "extract":
        extract(args.source, args.output, tuple(args.models.split(",")))
    else:
        missing = [str(path) for path in args.reports if not path.is_file()]
        if missing:
            sys.exit(f"no such report: {', '.join(missing)}")
        table(args.reports)


if __name__ == "__main__":
    main()
