"""Which inductor settings make reduced-precision compiled generation round as eager does?

For each dtype and candidate setting, the while_loop form of ``fullgraph_generate`` is compiled once with
inductor (its graph does not grow with the tokens, so one compile serves every prompt of one shape) and run
on several seeded prompts; each compiled sequence is compared with the eager loop's, and each difference is
classified (rounding flip or divergence) from float64, as the suite's checks do.

    python bench/precision.py --model mid --dtypes bfloat16 float16 --prompts 6 --tokens 24 \
        --json bench/results/precision.json

``--model mid`` is a llama of hidden 512, 4 layers, vocabulary 4096 (the size at which bfloat16 flips were
first seen); ``tiny`` is the suite's tiny llama. Each (dtype, setting) runs in a fresh process so that no
compiled code is shared. Prints one Markdown row per run (``table``: what bench/results/precision.md shows).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import raw  # bench/raw.py

#: Candidate settings, by name: ``torch._inductor.config`` values patched around compile and run.
#: (``cpp.enable_floating_point_contract_flag`` is already "off" by default in torch 2.13, so FMA contraction is
#: not a candidate; ``cpp.simdlen=1`` turns off vectorisation, which reorders reductions.)
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "emulate_precision_casts": {"emulate_precision_casts": True},
    "no_simd": {"cpp.simdlen": 1},
    "emulate+no_simd": {"emulate_precision_casts": True, "cpp.simdlen": 1},
}


def build(model: str, dtype: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pytest_fullgraph import build_tiny

    if model == "tiny":
        built = build_tiny("llama")
    else:
        config = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                             pad_token_id=0, bos_token_id=1, eos_token_id=2)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            built = LlamaForCausalLM(config).eval()
    return built.to(getattr(torch, dtype))


def one(model_name: str, dtype: str, setting: str, prompts: int, tokens: int) -> dict[str, Any]:
    import torch
    import torch._inductor.config as inductor_config
    from transformers import GenerationConfig

    from pytest_fullgraph.check.compare import first_difference, precision_verdict
    from pytest_fullgraph.check.inputs import left_padded_prompts, model_generation_defaults
    from pytest_fullgraph.core.model_facts import vocab_size
    from pytest_fullgraph.loop.decode import fullgraph_generate

    torch.set_num_threads(1)
    model = build(model_name, dtype)
    config = GenerationConfig(max_new_tokens=tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
    compiled_loop: Any = None

    def compiler(loop: Any) -> Any:
        nonlocal compiled_loop
        if compiled_loop is None:
            compiled_loop = torch.compile(loop, fullgraph=True, backend="inductor")
        return compiled_loop

    results = []
    started = time.perf_counter()
    with torch.no_grad(), model_generation_defaults(model, None), \
            inductor_config.patch({"fallback_random": True, **SETTINGS[setting]}):
        for seed in range(prompts):
            inputs = left_padded_prompts([8], seed, vocab_size(model))
            eager = fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, loop="while")
            compiled = fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config,
                                          loop="while", compiler=compiler)
            if torch.equal(eager, compiled):
                results.append("equal")
                continue
            mismatch = first_difference(eager, compiled, 8)
            verdict = precision_verdict(model, inputs, eager, mismatch)
            results.append(f"{verdict.kind if verdict else 'unclassified'}@{mismatch.step}")
    return {"model": model_name, "dtype": dtype, "setting": setting, "results": results,
            "seconds": round(time.perf_counter() - started, 1)}


def row_line(row: dict[str, Any]) -> str:
    """One run's row: the prompts whose compiled tokens equal eager's, and each difference's class and position."""
    if "failed" in row:
        return f"| {row['model']} | {row['dtype']} | {row['setting']} | failed: {row['failed']} | | |"
    differences = [result for result in row["results"] if result != "equal"]
    return (f"| {row['model']} | {row['dtype']} | {row['setting']} | {len(row['results']) - len(differences)}/"
            f"{len(row['results'])} | {', '.join(differences) or '—'} | {row['seconds']} |")


HEADER = ["| model | dtype | setting | prompts equal | differences (class@new token) | seconds |",
          "|---|---|---|---|---|---|"]


def table(raw_output: dict[str, Any]) -> list[str]:
    """The results page's table of a run: its rows, as printed."""
    return [*HEADER, *(row_line(row) for row in raw_output["rows"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "mid"), default="mid")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--json", help="write the raw output (rows, command, commit, releases) to this file")
    parser.add_argument("--one", nargs=2, metavar=("DTYPE", "SETTING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.model, args.one[0], args.one[1], args.prompts, args.tokens)))
        return
    started, rows = time.time(), []
    print(*HEADER, sep="\n")
    for dtype in args.dtypes:
        for setting in args.settings:
            rows.append(_run(args, dtype, setting))
            print(row_line(rows[-1]), flush=True)
    if args.json:
        raw.save(args.json, "precision", rows, started, time.time())


def _run(args: argparse.Namespace, dtype: str, setting: str) -> dict[str, Any]:
    """One (dtype, setting) in a fresh process: no compiled code shared between rows."""
    completed = subprocess.run([sys.executable, __file__, "--model", args.model, "--prompts", str(args.prompts),
                                "--tokens", str(args.tokens), "--one", dtype, setting],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        said = completed.stderr.strip().splitlines()
        return {"model": args.model, "dtype": dtype, "setting": setting,
                "failed": said[-1] if said else f"exit {completed.returncode}"}
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":
    main()
