"""Does a check reach the model's own code? Lines of each model's ``modeling_*.py`` that the scenarios run.

For each model type, its tiny model generates the scenarios (the four basic ones and ``past_window``) eagerly, on
the default cache and on the static cache (the reference and the compiled levels' cache), under ``coverage``
restricted to the model's modeling file. The forward path is the executable lines of the ``forward`` of each class
of that file the built model instantiates, and of the file's other functions and methods that ran: a line there that
never ran is a branch the checks do not take. Beside it, the distinctive paths of each family (``PATHS``), decided
from the config each scenario builds its model with against that scenario's longest prompt and sequence: a sliding
window shorter than the sequence, a sparse-attention indexer that selects (its top-k below the sequence), more than
one expert per token, a chunked attention's boundary, a recurrent chunk's boundary (the prompt's scan), lightning
attention's block (minimax). ``past_window`` builds models with chunks cut to its window (``models.variants``).

    pip install coverage   # a bench dependency only
    python bench/code_reach.py --json bench/results/code-reach.json [--models llama,gemma] [--tokens 4]
        [--scenarios greedy,sample,eos,padded,past_window]
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import raw  # bench/raw.py

from pytest_fullgraph.models.tags import CHUNK_FIELDS_OF_TYPE, chunk_fields

#: The scenarios measured unless ``--scenarios`` says otherwise: the basic four and the one that runs past a window.
SCENARIOS = "greedy,sample,eos,padded,past_window"


@dataclass(frozen=True)
class DistinctivePath:
    """A family's code a check must reach to test it: named, with the config value that decides whether the
    generated sequence (prompt + new tokens) reaches it."""

    name: str
    attribute: str
    #: whether a sequence reaches it: (the config value, the longest prompt, the longest sequence)
    reached: Callable[[Any, int, int], bool]


#: Fields that are a chunk in one model type only (``tags.CHUNK_FIELDS_OF_TYPE``: minimax's ``block_size``).
TYPE_CHUNK_FIELDS = frozenset(field for fields in CHUNK_FIELDS_OF_TYPE.values() for field in fields)
PATHS = (
    DistinctivePath("sliding window slides", "sliding_window", lambda value, prompt, length: length > value),
    # gpt_neo's local layers
    DistinctivePath("sliding window slides", "window_size", lambda value, prompt, length: length > value),
    DistinctivePath("sparse indexer selects", "index_topk", lambda value, prompt, length: length > value),
    DistinctivePath("several experts per token", "num_experts_per_tok", lambda value, prompt, length: value > 1),
    DistinctivePath("chunked attention crosses a chunk", "attention_chunk_size",
                    lambda value, prompt, length: length > value),
    # the scans run in chunks over the prompt only; each decode step is one token
    DistinctivePath("recurrent scan crosses a chunk", "chunk_size", lambda value, prompt, length: value < prompt),
    DistinctivePath("recurrent scan crosses a chunk", "mamba_chunk_size", lambda value, prompt, length: value < prompt),
    DistinctivePath("lightning attention crosses a block", "block_size",
                    lambda value, prompt, length: value < prompt),
)


def paths_of(config: Any, prompt: int, length: int) -> list[dict[str, Any]]:
    """The distinctive paths the config has, each with its value and whether a scenario's longest prompt and
    sequence reach it."""
    text = config.get_text_config()
    found = []
    for path in PATHS:
        if path.attribute in TYPE_CHUNK_FIELDS and path.attribute not in chunk_fields(config):
            continue  # a chunk field of one model type only: big_bird's block_size is its sparse attention's
        value = getattr(text, path.attribute, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:  # 0: none (qwen2_moe's window)
            found.append({"path": path.name, "attribute": path.attribute, "value": value,
                          "reached": bool(path.reached(value, prompt, length))})
    return found


def scenario_paths(configs: dict[str, Any], scenarios: list[str], tokens: int) -> list[dict[str, Any]]:
    """The distinctive paths over the scenarios, each reached when any scenario reaches it, with the config the
    scenario builds its model with (``configs`` by config variant: past_window's chunks are cut to its window)."""
    from pytest_fullgraph.check.scenarios import SCENARIOS

    merged: dict[str, dict[str, Any]] = {}
    for name in scenarios:
        variant, prompt = SCENARIOS[name].model_variant, max(SCENARIOS[name].prompt_lengths)
        for found in paths_of(configs[variant], prompt, prompt + tokens):
            row = merged.setdefault(found["attribute"], {**found, "reached": False})
            if found["value"] != row["value"]:
                row["variant_value"] = {"scenario": name, "value": found["value"]}
            row["reached"] = row["reached"] or found["reached"]
    return list(merged.values())


def forward_path_lines(model: Any, statements: set[int], run: set[int], file: str) -> set[int]:
    """The executable lines of the ``forward`` of each class of the file the model instantiates, and of every other
    function or method of the file that ran: lines there that never ran are branches the checks do not take."""
    module = sys.modules[type(model).__module__]
    functions = [inspect.unwrap(function) for _, function in inspect.getmembers(module, inspect.isfunction)]
    forwards = []
    for klass in {type(sub) for sub in model.modules()}:
        for name, member in vars(klass).items():
            if inspect.isfunction(member):  # transformers' decorators wrap forward: its own lines are inside
                functions.append(inspect.unwrap(member))
                forwards += [functions[-1]] if name == "forward" else []
    spans = []
    for function in functions:
        if inspect.getsourcefile(function) != file:
            continue
        lines, first = inspect.getsourcelines(function)
        span = range(first, first + len(lines))
        if function in forwards or run & set(span):
            spans.append(span)
    return {line for line in statements if any(line in span for span in spans)}


def measure(model_type: str, tokens: int, scenarios: list[str]) -> dict[str, Any]:
    """One model's lines run and distinctive paths; an ``error`` in place of them when it cannot be measured."""
    import coverage
    import torch

    from pytest_fullgraph import build_tiny
    from pytest_fullgraph.check.inputs import generation_config, make_inputs, model_generation_defaults, scenario_values
    from pytest_fullgraph.check.scenarios import SCENARIOS
    from pytest_fullgraph.core.generation import generate, static_cache_config

    try:  # the scenarios' config variants (past_window's short chunks) are built beside the default config
        model = build_tiny(model_type)
        models = {variant: build_tiny(model_type, variant=variant) if variant else model
                  for variant in {SCENARIOS[name].model_variant for name in scenarios}}
    except Exception as error:  # recorded per model; the other models are still measured
        return {"model": model_type, "error": f"build: {type(error).__name__}: {str(error)[:120]}"}
    file = inspect.getsourcefile(type(model)) or ""
    tracer = coverage.Coverage(include=[file], data_file=None)
    failures = []
    tracer.start()
    try:
        for name in scenarios:
            for static in (False, True):
                try:
                    scenario = SCENARIOS[name]
                    built = models[scenario.model_variant]
                    inputs = make_inputs(built, scenario)
                    eos, settings = scenario_values(built, inputs, scenario, tokens)
                    config = generation_config(scenario, tokens, eos, settings)
                    with torch.no_grad(), model_generation_defaults(built, eos):
                        generate(built, inputs, static_cache_config(config) if static else config, scenario.seed)
                except Exception as error:  # a scenario that fails runs fewer lines; the row says which
                    failures.append(f"{name}{'/static' if static else ''}: {type(error).__name__}")
    finally:
        tracer.stop()
    _, statements, _, _, _ = tracer.analysis2(file)
    run = set(tracer.get_data().lines(file) or ())
    path = forward_path_lines(model, set(statements), run, file)
    return {"model": model_type, "file": file.split("site-packages/")[-1], "statements": len(statements),
            "forward_path": len(path), "run": len(run & path), "missed": sorted(path - run), "failures": failures,
            "paths": scenario_paths({variant: built.config for variant, built in models.items()}, scenarios, tokens)}


def table(raw_output: dict[str, Any]) -> list[str]:
    """The page's table: one row per model, lines run of the forward path, and the distinctive paths reached."""
    lines = ["| model | lines run / forward path | distinctive paths (reached ✅, missed ❌) |", "|---|---|---|"]
    for row in raw_output["rows"]:
        if "error" in row:
            lines.append(f"| {row['model']} | not measured ({' '.join(row['error'].split())}) | |")
            continue
        share = f"{row['run']} / {row['forward_path']} ({_percent(row['run'], row['forward_path'])})"
        paths = ", ".join(f"{'✅' if path['reached'] else '❌'} {path['path']} ({path['attribute']}="
                          f"{path['value']}{_variant(path)})" for path in row["paths"])
        failed = f"; failed: {', '.join(row['failures'])}" if row["failures"] else ""
        lines.append(f"| {row['model']} | {share}{failed} | {paths} |")
    return lines


def _percent(run: int, of: int) -> str:
    """Lines run as a whole percentage of the lines there are (a file with none: 0 of 1)."""
    return f"{100 * run / max(of, 1):.0f}%"


def summary(raw_output: dict[str, Any]) -> list[str]:
    """The page's figures above the table, one line each: the lines run over every model that was measured, and per
    distinctive path the models that have it, how many of them reach it, and those that do not."""
    rows = [row for row in raw_output["rows"] if "error" not in row]
    run, path = sum(row["run"] for row in rows), sum(row["forward_path"] for row in rows)
    shares = sorted(rows, key=lambda row: row["run"] / max(row["forward_path"], 1))
    median = shares[len(shares) // 2]
    lines = [f"Over the {len(rows)} models that build: {run:,} of {path:,} forward-path lines run "
             f"({_percent(run, path)}; the median model, {median['model']}, "
             f"{_percent(median['run'], median['forward_path'])})."]
    by_path: dict[str, list[tuple[str, bool]]] = {}
    for row in rows:
        for found in row["paths"]:
            by_path.setdefault(found["path"], []).append((row["model"], found["reached"]))
    for name, models in by_path.items():
        missed = sorted(model for model, reached in models if not reached)
        lines.append(f"- {name}: {len(models) - len(missed)} of {len(models)} models"
                     + (f"; not {', '.join(missed)}" if missed else ""))
    return lines


def _variant(path: dict[str, Any]) -> str:
    """The value a scenario's config variant gives the path's attribute, where it differs."""
    variant = path.get("variant_value")
    return f"; {variant['value']} in {variant['scenario']}" if variant else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="Where the raw output goes")
    parser.add_argument("--models", default="all", help="Comma list of model types (default: all)")
    parser.add_argument("--tokens", type=int, default=4, help="New tokens per generation (the suite's default: 4)")
    parser.add_argument("--scenarios", default=SCENARIOS, help=f"Comma list of scenarios (default: {SCENARIOS})")
    args = parser.parse_args()
    from pytest_fullgraph.models.build import installed_model_types

    models = installed_model_types() if args.models == "all" else tuple(args.models.split(","))
    started = time.time()
    rows = []
    for model_type in models:
        rows.append(measure(model_type, args.tokens, args.scenarios.split(",")))
        print(table({"rows": rows[-1:]})[-1], flush=True)
    raw.save(args.json, "code_reach", rows, started, time.time(), tokens=args.tokens, scenarios=args.scenarios)


if __name__ == "__main__":
    main()
