"""Tokens/s of every way a model leaves Python, on the same prompts, each checked exact against ``generate``
(not a test: results go to bench/results/exporters.md by hand; needs the extras:
``pip install -e ".[onnx,executorch]"``).

    python bench/export_paths.py --model llama --batch 1 --tokens 32 --json bench/results/export_paths.json
    python bench/export_paths.py --model llama --batch 1 --tokens 32 --paths hf_dynamo ours_pt2

Paths: ``generate`` (the default dynamic cache: the reference), transformers' exporters' programs
(``hf_dynamo``, ``hf_onnx``, ``hf_executorch`` with XNNPACK) each run by its ``ModelRunner`` in our host loop
(``hf_export.host_loop``, fed as ``generate`` feeds the forward), transformers' ExecuTorch helper
(``hf_et_helper``: ``TorchExportableModuleWithStaticCache.generate``) and its exported module driven at the right
positions (``hf_et_module``), and our whole loop exported as one program and loaded as a user ships it
(``ours_pt2``, ``ours_aoti``, ``ours_executorch``, ``ours_executorch_portable``). Per path: the build (export,
lowering, saving and loading), the steady time per generated token (median of ``--repeats`` runs after a warm
one), tokens/s, and whether its tokens equal ``generate``'s (``torch.equal``). A path that fails says its
exception's type and first line; the others still run. Prints one Markdown row per path as it finishes;
``--json FILE`` keeps the raw output (bench/raw.py), from which ``table(raw)`` renders the same table for
bench/results/exporters.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import raw  # bench/raw.py

PROMPT_LENGTH = 8
#: name -> function(model, inputs, config, directory) returning a no-argument callable that generates
Builder = Callable[[Any, dict[str, Any], Any, Path], Callable[[], Any]]


def _exporter(level_name: str) -> Builder:
    def build(model: Any, inputs: dict[str, Any], config: Any, directory: Path) -> Callable[[], Any]:
        from pytest_fullgraph.levels.builtin import builtin_levels
        from pytest_fullgraph.levels.hf import HfExporterLevel

        level = builtin_levels()[level_name]  # the level's own export, runner and host loop, timed
        assert isinstance(level, HfExporterLevel)
        return level.exported_loop(model, inputs, level.reference_config(config))
    return build


def _et_helper(driven: bool) -> Builder:
    def build(model: Any, inputs: dict[str, Any], config: Any, directory: Path) -> Callable[[], Any]:
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        from pytest_fullgraph.levels.hf import _export, _exportable, _positions_loop, _rows

        with _exportable(model, inputs, config) as module:
            program = _export(module, inputs)
        if driven:
            forward = program.module()
            return lambda: _rows(inputs, lambda row: _positions_loop(forward, row, config.max_new_tokens))
        return lambda: _rows(inputs, lambda row: TorchExportableModuleWithStaticCache.generate(
            program, row, config.max_new_tokens))
    return build


def _ours(runtime: str) -> Builder:
    def build(model: Any, inputs: dict[str, Any], config: Any, directory: Path) -> Callable[[], Any]:
        from pytest_fullgraph import load_generate, save_generate
        from pytest_fullgraph.loop.decode import export_generate

        program = export_generate(model, inputs["input_ids"], inputs["attention_mask"], config)
        loaded = load_generate(save_generate(program, directory / runtime, runtime=runtime))
        return lambda: loaded(inputs["input_ids"], inputs["attention_mask"])
    return build


def _generate(model: Any, inputs: dict[str, Any], config: Any, directory: Path) -> Callable[[], Any]:
    return lambda: model.generate(**inputs, generation_config=config)


PATHS: dict[str, Builder] = {
    "generate": _generate, "hf_dynamo": _exporter("hf_dynamo"), "hf_onnx": _exporter("hf_onnx"),
    "hf_executorch": _exporter("hf_executorch"), "hf_et_helper": _et_helper(driven=False),
    "hf_et_module": _et_helper(driven=True), "ours_pt2": _ours("pt2"), "ours_aoti": _ours("aoti"),
    "ours_executorch": _ours("executorch"), "ours_executorch_portable": _ours("executorch_portable"),
}


def measure(name: str, model: Any, inputs: dict[str, Any], config: Any, expected: Any, repeats: int,
            directory: Path) -> dict[str, Any]:
    """One path's row: build seconds, ms per token, tokens/s, exact or where it differs (or its error)."""
    import torch

    started = time.perf_counter()
    try:
        with torch.no_grad():
            run = PATHS[name](model, inputs, config, directory)
            tokens = run()  # the warm run; its tokens are the ones compared
            build = time.perf_counter() - started
            times = []
            for _ in range(repeats):
                begin = time.perf_counter()
                run()
                times.append(time.perf_counter() - begin)
    except Exception as error:  # one path's failure is its row
        first = str(error).strip().splitlines()[0][:150] if str(error).strip() else ""
        return {"path": name, "error": f"{type(error).__name__}: {first}"}
    generated = int(config.max_new_tokens) * int(inputs["input_ids"].shape[0])
    per_token = statistics.median(times) / int(config.max_new_tokens)
    exact = "exact" if tokens.shape == expected.shape and torch.equal(tokens, expected) else _where(tokens, expected)
    return {"path": name, "build_s": build, "ms_per_token": per_token * 1000,
            "tokens_per_s": generated / statistics.median(times), "tokens": exact}


HEADER = ["| path | build s | ms / token | tokens/s | tokens |", "|---|---|---|---|---|"]


def row_line(row: dict[str, Any]) -> str:
    """One path's row as printed; a failed path says its error where the build time would be."""
    if "error" in row:
        return f"| {row['path']} | error: {row['error']} | | | |"
    return (f"| {row['path']} | {row['build_s']:.1f} | {row['ms_per_token']:.2f} | {row['tokens_per_s']:.0f} | "
            f"{row['tokens']} |")


def table(raw_output: dict[str, Any]) -> list[str]:
    """The results page's table of a run: its rows, as printed."""
    return [*HEADER, *(row_line(row) for row in raw_output["rows"])]


def _where(tokens: Any, expected: Any) -> str:
    if tokens.shape != expected.shape:
        return f"differs: shape {tuple(tokens.shape)} vs {tuple(expected.shape)}"
    row, column = (tokens != expected).nonzero()[0].tolist()
    return f"differs: row {row}, new token {column - PROMPT_LENGTH + 1}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--json", help="write the raw output (rows, command, commit, releases) to this file")
    arguments = parser.parse_args()
    started = time.time()

    import torch
    import transformers
    from transformers import GenerationConfig

    from pytest_fullgraph import build_tiny

    model = build_tiny(arguments.model)
    vocab = int(model.config.get_text_config().vocab_size)
    input_ids = torch.randint(3, vocab, (arguments.batch, PROMPT_LENGTH), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    config = GenerationConfig(max_new_tokens=arguments.tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        expected = model.generate(**inputs, generation_config=config)
    print(f"{arguments.model}, batch {arguments.batch}, prompt {PROMPT_LENGTH}, {arguments.tokens} new tokens, "
          f"greedy; torch {torch.__version__}, transformers {transformers.__version__}, python "
          f"{sys.version.split()[0]}, {torch.get_num_threads()} threads")
    print(*HEADER, sep="\n")
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name in arguments.paths:
            rows.append(measure(name, model, inputs, config, expected, arguments.repeats, Path(directory)))
            print(row_line(rows[-1]), flush=True)
    if arguments.json:
        raw.save(arguments.json, "export_paths", rows, started, time.time(), model=arguments.model,
                 batch=arguments.batch, tokens=arguments.tokens, repeats=arguments.repeats,
                 prompt_length=PROMPT_LENGTH, threads=torch.get_num_threads())


if __name__ == "__main__":
    main()
