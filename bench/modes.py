"""Which model types' decoding modes does the loop reproduce exactly, run eagerly? A cheap breadth pass before the
compiled matrix: per model, ``generate`` in the scenario's mode against ``fullgraph_generate`` (unrolled, no
compiler), tokens compared with ``torch.equal``.

    python bench/modes.py [--scenarios beam beam_sample beam_eos] [--models llama gemma ...] [--jobs 1]
                          [--timeout 120] [--json out.json]

Each model runs in its own process (a crash or hang costs that model only). A row's outcome: ``exact``, ``mismatch``
(the first differing position), ``refused`` (the loop's ``UnsupportedGeneration``, naming why), ``generate
error`` (transformers' own run of the mode fails: its error and where), ``loop error``, ``build error`` or
``timeout``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAX_NEW_TOKENS = 6


def _where(error: BaseException) -> str:
    """The innermost frame of the error in transformers or this package: the site a reader opens."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if "transformers/" in frame.filename or "pytest_fullgraph/" in frame.filename]
    if not frames:
        return ""
    frame = frames[-1]
    return f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"


def one(model: str, scenario_name: str) -> dict[str, Any]:
    import torch

    from pytest_fullgraph.decode import fullgraph_generate
    from pytest_fullgraph.generation import UnsupportedGeneration, generate
    from pytest_fullgraph.inputs import generation_config, make_inputs, model_generation_defaults, scenario_values
    from pytest_fullgraph.models import builtin_registry
    from pytest_fullgraph.scenarios import SCENARIOS

    row: dict[str, Any] = {"model": model, "scenario": scenario_name}
    scenario = SCENARIOS[scenario_name]
    try:
        spec = builtin_registry()[model]
        if spec.known_reason:
            return {**row, "outcome": "known", "error": spec.known_reason}
        built = spec.build()
        inputs = make_inputs(built, scenario)
        eos, settings = scenario_values(built, inputs, scenario, MAX_NEW_TOKENS)
        config = generation_config(scenario, MAX_NEW_TOKENS, eos, settings)
    except Exception as error:  # a row says what went wrong; the survey goes on
        return {**row, "outcome": "build error", "error": _said(error), "where": _where(error)}
    with model_generation_defaults(built, eos):
        try:
            expected = generate(built, inputs, config, scenario.seed)
        except Exception as error:
            return {**row, "outcome": "generate error", "error": _said(error), "where": _where(error)}
        try:
            torch.manual_seed(scenario.seed)
            got = fullgraph_generate(built, inputs["input_ids"], inputs["attention_mask"], config)
        except UnsupportedGeneration as error:
            return {**row, "outcome": "refused", "error": str(error)}
        except Exception as error:
            return {**row, "outcome": "loop error", "error": _said(error), "where": _where(error)}
    if torch.equal(got, expected):
        return {**row, "outcome": "exact"}
    differ = [index for index in range(min(got.shape[1], expected.shape[1]))
              if not torch.equal(got[:, index], expected[:, index])]
    return {**row, "outcome": "mismatch", "error": f"shapes {list(got.shape)} vs {list(expected.shape)}, first "
                                                    f"differing position {differ[0] if differ else None}"}


def survey(model: str, scenario: str, timeout: float) -> dict[str, Any]:
    try:
        completed = subprocess.run([sys.executable, __file__, "--one", model, scenario], capture_output=True,
                                   text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"model": model, "scenario": scenario, "outcome": "timeout", "error": f"after {timeout:g} s"}
    lines = completed.stdout.strip().splitlines()
    if completed.returncode == 0 and lines:
        return dict(json.loads(lines[-1]))
    said = [line for line in completed.stderr.strip().splitlines() if line.strip()]
    return {"model": model, "scenario": scenario, "outcome": "crash",
            "error": said[-1] if said else f"exit {completed.returncode}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="*", default=["beam", "beam_sample", "beam_eos"])
    parser.add_argument("--models", nargs="*", help="registry names (default: every built-in model)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    from pytest_fullgraph.models import builtin_registry

    models = args.models or sorted(builtin_registry().names())
    pairs = [(model, scenario) for model in models for scenario in args.scenarios]
    print("| model | scenario | outcome | detail |\n|---|---|---|---|", flush=True)
    rows = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(lambda pair: survey(*pair, args.timeout), pairs):
            rows.append(row)
            detail = " at ".join(part for part in (row.get("error", ""), row.get("where", "")) if part)
            print(f"| {row['model']} | {row['scenario']} | {row['outcome']} | {detail[:200]} |", flush=True)
    for scenario in args.scenarios:
        counts = Counter(row["outcome"] for row in rows if row["scenario"] == scenario)
        print(f"\n{scenario}: " + ", ".join(f"{count} {outcome}" for outcome, count in counts.most_common()))
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(rows, stream, indent=1)


if __name__ == "__main__":
    main()
