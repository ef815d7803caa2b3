"""Which model types' decoding modes does the loop reproduce exactly, run eagerly? A cheap breadth pass before the
compiled matrix: per model, ``generate`` in the scenario's mode against ``fullgraph_generate`` (unrolled, no
compiler), tokens compared with ``torch.equal``.

    python bench/modes.py [--scenarios beam beam_sample beam_eos] [--models llama gemma ...] [--jobs 1]
                          [--timeout 120] [--json out.json]

``--models`` and ``--scenarios`` take what ``--fullgraph-models`` and ``--fullgraph-scenarios`` take (names,
comma lists, globs, tags, ``all``); an entry that selects nothing is one line naming it, before any model runs.

Each model runs in its own process, built once for all the scenarios (a crash or hang costs that model
only). A row's outcome: ``exact``, ``mismatch`` (the first differing position), ``refused`` (the loop's
``UnsupportedGeneration``, naming why), ``generate error`` (transformers' own run of the mode fails: its error
and where), ``loop error``, ``build error``, ``known`` (the registry's reason not to build it), ``crash`` or
``timeout``. A mismatch or loop error says whether ``generate`` with the static cache the loop uses fails or
differs too (the model's static-cache path) or agrees with the default ``generate`` (then it is the loop's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import raw  # bench/raw.py

MAX_NEW_TOKENS = 6

#: The loop failed or differed where ``generate`` with the same static cache fails or differs too: the model's fault.
STATIC = "model's static cache (generate fails or differs too)"

#: A row's cause, in the table's column order: the first (outcome, phrase in its error or static-cache note) that
#: matches names it ("" matches any); a row matching none is counted under its outcome.
CAUSES: tuple[tuple[str, str, str], ...] = (
    ("exact", "", "exact"),
    ("known", "", "not built (registry reason)"),
    ("build error", "", "not built (error)"),
    ("loop error", "static cache failed", STATIC),
    ("loop error", "differs from the default too", STATIC),
    ("mismatch", "static cache failed", STATIC),
    ("mismatch", "differs from the default too", STATIC),
    ("refused", "takes no `cache`", "loop refuses (no `cache` argument)"),
    ("refused", "roll back", "loop refuses (a layer cannot roll back)"),
    ("refused", "reorder", "loop refuses (a layer cannot reorder)"),
    ("refused", "Processor", "loop refuses (processors)"),
    ("refused", "cache of its own class", "loop refuses (the model's own cache class)"),
    ("refused", "", "loop refuses (other)"),
    ("generate error", "stateful", "transformers refuses a stateful model"),
    ("generate error", "", "transformers errors"),
    ("mismatch", "", "mismatch"),
    ("loop error", "", "loop error"),
)

#: A cell lists its models when it counts at most this many.
NAMED_UP_TO = 4


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


def one(model: str, scenario_name: str, built: Any = None) -> dict[str, Any]:
    import torch

    from pytest_fullgraph.check.inputs import (
        generate_kwargs,
        generation_config,
        make_inputs,
        model_generation_defaults,
        scenario_values,
    )
    from pytest_fullgraph.check.scenarios import SCENARIOS
    from pytest_fullgraph.core.generation import UnsupportedGeneration, generate
    from pytest_fullgraph.loop.decode import fullgraph_generate
    from pytest_fullgraph.models import builtin_registry

    row: dict[str, Any] = {"model": model, "scenario": scenario_name}
    scenario = SCENARIOS[scenario_name]
    try:
        spec = builtin_registry()[model]
        if spec.known_reason:
            return {**row, "outcome": "known", "error": spec.known_reason}
        built = built if built is not None else spec.build()
        inputs = make_inputs(built, scenario)
        eos, settings = scenario_values(built, inputs, scenario, MAX_NEW_TOKENS)
        config = generation_config(scenario, MAX_NEW_TOKENS, eos, settings)
        further = generate_kwargs(scenario, built)  # the draft model of the assisted scenarios
    except Exception as error:  # a row says what went wrong; the survey goes on
        return {**row, "outcome": "build error", "error": _said(error), "where": _where(error)}
    with model_generation_defaults(built, eos):
        try:
            expected = generate(built, {**inputs, **further}, config, scenario.seed)
        except Exception as error:
            return {**row, "outcome": "generate error", "error": _said(error), "where": _where(error)}
        try:
            torch.manual_seed(scenario.seed)
            got = fullgraph_generate(built, inputs["input_ids"], inputs["attention_mask"], config, **further)
        except UnsupportedGeneration as error:
            return {**row, "outcome": "refused", "error": str(error)}
        except Exception as error:
            return {**row, "outcome": "loop error", "error": _said(error), "where": _where(error),
                    "static_cache": _static_cache(built, {**inputs, **further}, config, scenario.seed, expected)}
    if torch.equal(got, expected):
        return {**row, "outcome": "exact"}
    differ = [index for index in range(min(got.shape[1], expected.shape[1]))
              if not torch.equal(got[:, index], expected[:, index])]
    return {**row, "outcome": "mismatch", "error": f"shapes {list(got.shape)} vs {list(expected.shape)}, first "
                                                    f"differing position {differ[0] if differ else None}",
            "static_cache": _static_cache(built, {**inputs, **further}, config, scenario.seed, expected)}


def _static_cache(model: Any, inputs: dict[str, Any], config: Any, seed: int, expected: Any) -> str:
    """Whose fault a loop's failure is, as the checks say it (``compare.static_cache_verdict``): ``generate``
    with the static cache the loop uses (and, for the draft modes, one of the loop's length) fails or differs too
    (the model's static-cache path), or it equals the default ``generate`` (the loop's)."""
    from pytest_fullgraph.check.compare import static_cache_verdict

    return static_cache_verdict(model, inputs, config, seed, expected).lstrip("; ")


def every_scenario(model: str, scenarios: list[str]) -> list[dict[str, Any]]:
    """One model's rows, the model built once (imports and the build are most of a row's cost)."""
    from pytest_fullgraph.models import builtin_registry

    spec = builtin_registry()[model]
    try:
        built = None if spec.known_reason else spec.build()
    except Exception as error:  # a row says what went wrong; the survey goes on
        return [{"model": model, "scenario": scenario, "outcome": "build error", "error": _said(error),
                 "where": _where(error)} for scenario in scenarios]
    return [one(model, scenario, built) for scenario in scenarios]


def survey(model: str, scenarios: list[str], timeout: float) -> list[dict[str, Any]]:
    try:
        completed = subprocess.run([sys.executable, __file__, "--one", model, ",".join(scenarios)],
                                   capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return [{"model": model, "scenario": scenario, "outcome": "timeout", "error": f"after {timeout:g} s"}
                for scenario in scenarios]
    lines = completed.stdout.strip().splitlines()
    if completed.returncode == 0 and lines:
        return list(json.loads(lines[-1]))
    said = [line for line in completed.stderr.strip().splitlines() if line.strip()]
    return [{"model": model, "scenario": scenario, "outcome": "crash",
             "error": said[-1] if said else f"exit {completed.returncode}"} for scenario in scenarios]


def cause(row: dict[str, Any]) -> str:
    """What a row's outcome is down to, by ``CAUSES``."""
    said = f"{row.get('error', '')} {row.get('static_cache', '')}"
    return next((name for outcome, phrase, name in CAUSES if row["outcome"] == outcome and phrase in said),
                str(row["outcome"]))


def table(raw_output: dict[str, Any]) -> list[str]:
    """The results page's table of a run: per scenario, how many models each cause holds (few named)."""
    rows = raw_output["rows"]
    order = list(dict.fromkeys(name for _, _, name in CAUSES))
    causes = sorted({cause(row) for row in rows}, key=lambda name: (order.index(name) if name in order else 99, name))
    lines = ["| scenario | models | " + " | ".join(causes) + " |", "|---" * (len(causes) + 2) + "|"]
    for scenario in dict.fromkeys(row["scenario"] for row in rows):
        mine = [row for row in rows if row["scenario"] == scenario]
        cells = []
        for name in causes:
            models = sorted(row["model"] for row in mine if cause(row) == name)
            named = f" ({', '.join(models)})" if 0 < len(models) <= NAMED_UP_TO and name != "exact" else ""
            cells.append(f"{len(models)}{named}")
        lines.append(f"| `{scenario}` | {len(mine)} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="*", default=["beam", "beam_sample", "beam_eos"])
    parser.add_argument("--models", nargs="*", help="registry names (default: every built-in model)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", help="write the raw output (rows, command, commit, releases) to this file")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    started = time.time()
    if args.one:
        print(json.dumps(every_scenario(args.one[0], args.one[1].split(","))))
        return
    from pytest_fullgraph.check.scenarios import select_scenarios
    from pytest_fullgraph.models import builtin_registry

    try:
        models = builtin_registry().select(",".join(args.models)) if args.models else builtin_registry().names()
        args.scenarios = [name for entry in args.scenarios for name in select_scenarios(entry)]
    except ValueError as error:
        parser.exit(2, f"bench/modes.py: error: {error}\n")
    models = sorted(models)
    print("| model | scenario | outcome | detail |\n|---|---|---|---|", flush=True)
    rows = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for model_rows in pool.map(lambda model: survey(model, args.scenarios, args.timeout), models):
            for row in model_rows:
                rows.append(row)
                detail = " at ".join(part for part in (row.get("error", ""), row.get("where", "")) if part)
                static = f" (static-cache generate: {row['static_cache']})" if "static_cache" in row else ""
                print(f"| {row['model']} | {row['scenario']} | {row['outcome']} | {detail[:200]}{static[:120]} |",
                      flush=True)
    for scenario in args.scenarios:
        counts = Counter(row["outcome"] for row in rows if row["scenario"] == scenario)
        print(f"\n{scenario}: " + ", ".join(f"{count} {outcome}" for outcome, count in counts.most_common()))
    print("", *table({"rows": rows}), sep="\n")
    if args.json:
        raw.save(args.json, "modes", rows, started, time.time())


if __name__ == "__main__":
    main()
