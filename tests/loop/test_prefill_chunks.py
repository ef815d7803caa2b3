"""Chunked prefill (``prefill_chunk_size``): the loop runs the prompt in ``generate``'s chunks, inside its one graph, in
both forms; the modes and exports that cannot are refused by name."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny, run_check
from pytest_fullgraph.check.inputs import left_padded_prompts
from pytest_fullgraph.check.scenarios import SCENARIOS
from pytest_fullgraph.core.generation import generate_fn
from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate, fullgraph_generate
from pytest_fullgraph.loop.steps import prompt_chunks


def _plan(chunk: int | None) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(config=GenerationConfig(prefill_chunk_size=chunk))


@pytest.mark.parametrize(("chunk", "width", "expected"), [
    (None, 8, [(0, 8)]), (3, 8, [(0, 3), (3, 6), (6, 8)]), (8, 8, [(0, 8)]), (16, 5, [(0, 5)]),
])
def test_the_prompt_is_cut_as_torch_split_cuts_it(chunk: int | None, width: int,
                                                  expected: list[tuple[int, int]]) -> None:
    assert prompt_chunks(_plan(chunk), width) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("loop", ["unrolled", "while"])
def test_the_loop_run_eagerly_gives_generates_chunked_tokens(loop: str) -> None:
    model = build_tiny("llama")
    inputs = left_padded_prompts([8, 5], 0, model.config.vocab_size)
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0, prefill_chunk_size=3)
    expected = generate_fn(model)(**inputs, generation_config=config)
    assert torch.equal(fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, loop=loop),
                       expected)


def test_the_chunks_are_inside_the_decode_levels_one_graph() -> None:
    result = run_check(build_tiny("llama"), "llama", SCENARIOS["prefill_chunk"], "decode", "eager", 2,
                       recompiles=False)
    assert (result.outcome, result.graph_count) == ("pass", 1), result.message


def test_a_mode_that_prefills_whole_and_a_dynamic_export_refuse_it_by_name() -> None:
    model = build_tiny("llama")
    prompt = torch.tensor([[5, 6, 7, 8, 9]])
    beams = GenerationConfig(max_new_tokens=2, num_beams=2, pad_token_id=0, prefill_chunk_size=2)
    with pytest.raises(UnsupportedGeneration, match="prefill_chunk_size=2 in greedy and sampling only; its beam"):
        fullgraph_generate(model, prompt, None, beams)
    chunked = GenerationConfig(max_new_tokens=2, pad_token_id=0, prefill_chunk_size=2)
    with pytest.raises(UnsupportedGeneration, match=r"export_generate\(dynamic=True\) does not support "
                                                    "prefill_chunk_size=2: the chunks are cut from the example's"):
        export_generate(model, torch.cat([prompt, prompt]), None, chunked, dynamic=True)


def test_the_scenario_is_a_prefill_feature() -> None:
    assert SCENARIOS["prefill_chunk"].kind == "prefill"
    assert SCENARIOS["prefill_chunk"].settings == {"prefill_chunk_size": 3}


def test_the_committed_run_passes_llama_and_gemma_at_every_level_but_generate_as_docs_say() -> None:
    from pytest_fullgraph import report
    from tests import REPOSITORY

    committed = "bench/reports/prefill/llama-gemma-aot_eager.json.gz"
    checks = report.load(REPOSITORY / committed).checks
    assert {(result.model, result.level): result.outcome for result in checks} == {
        (model, level): "break" if level == "generate" else "pass"
        for model in ("gemma", "llama") for level in ("forward", "generate", "decode", "export", "while")}
    assert committed in (REPOSITORY / "docs" / "levels.md").read_text()


def prefill_counts(checks: list) -> str:
    """Per level, the committed prefill_chunk run's checks by outcome, as docs/levels.md words them."""
    from collections import Counter

    from pytest_fullgraph.core.names import OWN_LEVEL_NAMES

    by_level: dict[str, Counter[str]] = {}
    for result in checks:
        by_level.setdefault(result.level, Counter())[result.outcome] += 1
    def counted(level: str) -> str:
        return ", ".join(f"{count} {outcome}" for outcome, count in sorted(by_level[level].items()))

    return "; ".join(f"`{level}` {counted(level)}" for level in OWN_LEVEL_NAMES if level in by_level)


def test_the_counts_docs_quote_for_every_model_are_the_committed_shards() -> None:
    from pytest_fullgraph import report
    from tests import REPOSITORY

    shards = sorted((REPOSITORY / "bench/reports/prefill/all").glob("*.json.gz"))
    assert shards, "no committed prefill_chunk shard under bench/reports/prefill/all"
    checks = [result for shard in shards for result in report.load(shard).checks]
    models = len({result.model for result in checks})
    quoted = f"over {models} models ({len(shards)} of 4 shards committed): {prefill_counts(checks)}"
    assert quoted in " ".join((REPOSITORY / "docs" / "levels.md").read_text().split())
