"""Which causal-LM types of the installed transformers build tiny and generate eagerly with ``build_tiny``?

    python bench/breadth.py [--types llama gemma ...] [--jobs 2] [--timeout 120] [--json out.json]

Each model type runs in its own process (a type that hangs or exhausts memory cannot take the survey down):
build the tiny config, build the model with seeded weights, count parameters, generate 2 tokens greedily.
Prints one Markdown row per type and a summary of the failures grouped by their first line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", nargs="*", help="model types (default: every causal-LM type)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

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
    ok = [row for row in rows if "error" not in row]
    print(f"\n{len(ok)} of {len(rows)} build and generate; "
          f"{sum(1 for row in ok if row['parameters'] < 2_000_000)} under 2M parameters")
    for reason, count in Counter(row["error"][:100] for row in rows if "error" in row).most_common():
        print(f"- {count}x {reason}")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(rows, stream, indent=1)


if __name__ == "__main__":
    main()
