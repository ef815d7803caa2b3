"""Which causal-LM types of the installed transformers build tiny and generate eagerly with ``build_tiny``?

    python bench/breadth.py [--types llama gemma ...] [--jobs 2] [--timeout 120] [--json bench/results/breadth.json]

Each model type runs in its own process (a type that hangs or exhausts memory cannot take the survey down):
build the tiny config, build the model with seeded weights, count parameters, generate 2 tokens greedily.
Prints one Markdown row per type as it finishes, then the summary table (``table``: how many build and generate, how
many of those are under 2M parameters, the failures grouped by their first line) that bench/results/breadth.md shows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import raw  # bench/raw.py

#: A tiny build counts as small under this many parameters (the suite's models are meant to compile in seconds).
SMALL = 2_000_000


def one(model_type: str) -> dict[str, Any]:
    import torch

    from pytest_fullgraph.models import build_tiny

    started = time.perf_counter()
    model = build_tiny(model_type)
    built = time.perf_counter() - started
    parameters = sum(p.numel() for p in model.parameters())
    output = model.generate(torch.tensor([[5, 6, 7, 8]]), max_new_tokens=2, do_sample=False, pad_token_id=0)
    return {"type": model_type, "class": type(model).__name__, "parameters": parameters,
            "build_s": round(built, 2), "generated": list(output.shape),
            "can_compile_fullgraph": bool(getattr(model, "_can_compile_fullgraph", False))}


def survey(model_type: str, timeout: float) -> dict[str, Any]:
    try:
        completed = subprocess.run([sys.executable, __file__, "--one", model_type], capture_output=True, text=True,
                                   timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"type": model_type, "error": f"timeout after {timeout:g} s"}
    lines = completed.stdout.strip().splitlines()
    if completed.returncode == 0 and lines:
        return dict(json.loads(lines[-1]))
    error_lines = [line for line in completed.stderr.strip().splitlines() if line.strip()]
    return {"type": model_type, "error": error_lines[-1] if error_lines else f"exit {completed.returncode}"}


def table(raw_output: dict[str, Any]) -> list[str]:
    """The results page's table of a survey: types that build and generate, how many are small, each failure's count."""
    rows = raw_output["rows"]
    ok = [row for row in rows if "error" not in row]
    lines = ["| result | types |", "|---|---|", f"| build and generate | {len(ok)} of {len(rows)} |",
             f"| of those under {SMALL // 1_000_000}M parameters | {sum(row['parameters'] < SMALL for row in ok)} |"]
    failures: dict[str, list[str]] = {}
    for row in rows:
        if "error" in row:
            failures.setdefault(row["error"][:100], []).append(row["type"])
    for reason, types in sorted(failures.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"| fails: {reason.replace('|', '/')} | {len(types)} ({', '.join(sorted(types))}) |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", nargs="*", help="model types (default: every causal-LM type)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", help="write the raw output (rows, command, commit, releases) to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    started = time.time()
    types = args.types or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    print("| type | class | parameters | build s | result |")
    print("|---|---|---|---|---|", flush=True)
    rows = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(lambda t: survey(t, args.timeout), types):  # rows print as they finish, in order
            rows.append(row)
            result = row.get("error") or f"generates {row['generated']}"
            print(f"| {row['type']} | {row.get('class', '')} | {row.get('parameters', '')} | "
                  f"{row.get('build_s', '')} | {result[:160]} |", flush=True)
    print("", *table({"rows": rows}), sep="\n")
    if args.json:
        raw.save(args.json, "breadth", rows, started, time.time())


if __name__ == "__main__":
    main()
