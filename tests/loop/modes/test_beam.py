"""Beam search and beam sampling in the loop: the oracle model's beams computed by hand equal ``generate``'s equal
the loop's, eager and compiled, both forms; scores and beam indices bit for bit; refusals name what they refuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny
from pytest_fullgraph.core.generation import generate_fn, static_cache_config
from pytest_fullgraph.loop.decode import UnsupportedGeneration, fullgraph_generate
from pytest_fullgraph.models.oracle import SCORE_TABLE, build_oracle
from tests.conftest import checks_by_id, read_report
from tests.loop.modes.beam_reference import Search, search_row

ORACLE = build_oracle()
VOCAB = ORACLE.config.vocab_size


def _config(search: Search, **extra: Any) -> GenerationConfig:
    return GenerationConfig(num_beams=search.num_beams, max_new_tokens=search.max_new_tokens,
                            eos_token_id=list(search.eos) or None, length_penalty=search.length_penalty,
                            early_stopping=search.early_stopping, num_return_sequences=search.num_return_sequences,
                            pad_token_id=0, do_sample=False, output_scores=True, return_dict_in_generate=True,
                            **extra)


def _padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    width = max(len(prompt) for prompt in prompts)
    pads = [width - len(prompt) for prompt in prompts]
    ids = torch.tensor([[0] * pad + prompt for pad, prompt in zip(pads, prompts, strict=True)])
    return ids, (ids != 0).long(), pads


def assert_same_beams(got: Any, expected: Any) -> None:
    """``generate``'s beam output, field by field, with ``torch.equal``: no tolerance anywhere."""
    assert torch.equal(got.sequences, expected.sequences), (got.sequences, expected.sequences)
    assert torch.equal(got.sequences_scores, expected.sequences_scores)
    assert torch.equal(got.beam_indices, expected.beam_indices)
    assert len(got.scores) == len(expected.scores)
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(got.scores, expected.scores, strict=True))


def test_the_oracle_keeps_its_scores_through_transformers_initialisation() -> None:
    assert ORACLE.table.tolist() == list(torch.tensor(SCORE_TABLE, dtype=torch.float32).tolist())


searches = st.builds(
    Search, num_beams=st.integers(2, 4), max_new_tokens=st.integers(1, 6),
    eos=st.lists(st.integers(1, VOCAB - 1), max_size=2, unique=True).map(tuple),
    length_penalty=st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0]), early_stopping=st.sampled_from([True, False, "never"]),
    num_return_sequences=st.integers(1, 2))
prompt_sets = st.lists(st.lists(st.integers(1, VOCAB - 1), min_size=1, max_size=5), min_size=1, max_size=3)


@settings(max_examples=50, deadline=None)
@given(search=searches, prompts=prompt_sets)
def test_beams_computed_by_hand_equal_generate_and_the_loop(search: Search, prompts: list[list[int]]) -> None:
    ids, mask, pads = _padded(prompts)
    config = _config(search)
    expected: Any = generate_fn(ORACLE)(input_ids=ids, attention_mask=mask, generation_config=config)
    for row, (prompt, pad) in enumerate(zip(ids.tolist(), pads, strict=True)):
        by_hand = search_row(prompt, pad, search, VOCAB)[: search.num_return_sequences]
        for rank, (score, generated) in enumerate(by_hand):
            flat = row * search.num_return_sequences + rank
            assert float(expected.sequences_scores[flat]) == score
            width = len(prompt) + len(generated)
            assert expected.sequences[flat, len(prompt):width].tolist() == generated
    # the unrolled form: the while form's body is traced at every call (seconds each); its own tests are below
    assert_same_beams(fullgraph_generate(ORACLE, ids, mask, config), expected)


def test_a_cache_that_does_not_follow_its_beams_changes_the_oracles_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle sees its prefix only through the cache: a reorder left out must show in the tokens."""
    from pytest_fullgraph.loop.modes import beam

    ids, mask, _ = _padded([[3, 1, 2], [5, 6]])
    config = _config(Search(num_beams=3, max_new_tokens=5, num_return_sequences=3))
    expected: Any = generate_fn(ORACLE)(input_ids=ids, attention_mask=mask, generation_config=config)
    moved = expected.beam_indices[:, 1:] != expected.beam_indices[:, :1]
    assert bool(moved.any())  # some returned beam came from another beam's row: the cache had to follow it
    monkeypatch.setattr(beam, "reorder_cache", lambda cache, rows: None)
    assert not torch.equal(fullgraph_generate(ORACLE, ids, mask, config).sequences, expected.sequences)


@pytest.mark.breadth  # inductor compiles: the workflow's plugin job runs them on every pull request
@pytest.mark.parametrize("loop", ["unrolled", "while"])
def test_compiled_beams_of_the_oracle_are_generates_bit_for_bit(loop: str) -> None:
    """The oracle's forward is exact in float32, so any difference would be the beam bookkeeping's: none."""
    ids, mask, _ = _padded([[3, 1, 2], [5, 6]])
    config = _config(Search(num_beams=3, max_new_tokens=4, eos=(4,), length_penalty=0.5, num_return_sequences=2))
    expected: Any = generate_fn(ORACLE)(input_ids=ids, attention_mask=mask, generation_config=config)
    assert int(expected.beam_indices.eq(-1).sum()) > 0  # EOS really ended a returned beam early
    torch._dynamo.reset()
    compiled = fullgraph_generate(ORACLE, ids, mask, config, loop=loop,
                                  compiler=lambda function: torch.compile(function, fullgraph=True, backend="inductor"))
    assert_same_beams(compiled, expected)


@pytest.mark.parametrize("settings_", [
    pytest.param({"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.5}, id="return2"),
    pytest.param({"num_beams": 2, "early_stopping": True, "length_penalty": 2.0}, id="early",
                 marks=pytest.mark.breadth),
    pytest.param({"num_beams": 2, "early_stopping": "never", "length_penalty": 1.5}, id="never",
                 marks=pytest.mark.breadth),
    pytest.param({"num_beams": 3, "do_sample": True, "top_k": 0}, id="sample"),
])
def test_llama_beams_in_the_eager_loop_are_generates(settings_: dict[str, Any]) -> None:
    """A real model: sequences equal ``generate``'s (default dynamic cache). The unrolled loop's scores equal
    ``generate``'s with the static cache the loop uses, bit for bit (the dynamic cache's attention sums over fewer
    keys: its scores differ in the last bits, up to 1.3e-5 measured on this model). Run uncompiled, the ``while``
    form's body runs in Python, so its scores are the static cache's bit for bit too."""
    model = build_tiny("llama")
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = (ids != 0).long()
    free = generate_fn(model)(input_ids=ids, attention_mask=mask, max_new_tokens=6, pad_token_id=0, eos_token_id=None)
    eos = [int(free[0, 5]), int(free[1, 7])]  # tokens the rows really emit, so beams end early
    config = GenerationConfig(max_new_tokens=6, pad_token_id=0, eos_token_id=eos, output_scores=True,
                              return_dict_in_generate=True, **settings_)
    torch.manual_seed(7)
    expected: Any = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config)
    torch.manual_seed(7)
    static: Any = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=static_cache_config(config))
    for loop in ("unrolled", "while"):
        torch.manual_seed(7)
        got = fullgraph_generate(model, ids, mask, config, loop=loop)
        assert torch.equal(got.sequences, expected.sequences)
        assert torch.equal(got.beam_indices, static.beam_indices)
        assert_same_beams(got, static)


def test_plain_sequences_when_generate_returns_plain_sequences() -> None:
    ids, mask, _ = _padded([[3, 1, 2]])
    config = GenerationConfig(num_beams=2, max_new_tokens=3, pad_token_id=0)
    got = fullgraph_generate(ORACLE, ids, mask, config)
    assert isinstance(got, torch.Tensor)
    assert torch.equal(got, generate_fn(ORACLE)(input_ids=ids, attention_mask=mask, generation_config=config))


def test_stop_strings_with_beams_are_refused_by_name() -> None:
    config = GenerationConfig(num_beams=2, max_new_tokens=3, pad_token_id=0, stop_strings=["a"])
    with pytest.raises(UnsupportedGeneration, match="stop_strings with beam search"):
        fullgraph_generate(ORACLE, torch.tensor([[3, 1]]), None, config, tokenizer=object())


def test_a_cache_layer_that_cannot_follow_the_beams_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_fullgraph.loop.modes import beam

    monkeypatch.setattr(beam, "REORDERABLE", frozenset({"SomeOtherLayer"}))
    config = GenerationConfig(num_beams=2, max_new_tokens=3, pad_token_id=0)
    with pytest.raises(UnsupportedGeneration, match="cannot reorder cache layer StaticLayer of OracleForCausalLM"):
        fullgraph_generate(ORACLE, torch.tensor([[3, 1]]), None, config)


@pytest.mark.breadth  # the main command with --fullgraph-scenarios=beam* runs the same checks
def test_the_suite_judges_beam_modes_at_every_level_of_the_loop(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    """llama's beam search passes the loop's levels with ``generate``'s exact tokens; transformers' own forward
    level is an error that says why: its beam search never calls the compiled forward."""
    result = toy_project.runpytest("--fullgraph-models=llama", "--fullgraph-suite=on", "-k",
                                   "test_generation_compiles_exactly and (decode or forward)",
                                   "--fullgraph-scenarios=beam_eos,beam_sample", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=2, failed=2)
    checks = checks_by_id(read_report(tmp_path))
    for scenario in ("beam_eos", "beam_sample"):
        decode = checks[f"llama-{scenario}-decode"]
        assert (decode["outcome"], decode["graph_count"]) == ("pass", 1), decode["message"]
        forward = checks[f"llama-{scenario}-forward"]
        assert forward["outcome"] == "error"
        assert "transformers' beam_" in forward["message"] and "calls the model's forward uncompiled" in \
            forward["message"]


FRESH_PROCESS = """
import sys, torch
from pytest_fullgraph.levels.artifacts import load_generate
saved = torch.load(sys.argv[2])
run = load_generate(sys.argv[1])
for limit, expected in saved["expected"].items():
    print(torch.equal(run(saved["input_ids"], saved["attention_mask"], max_new_tokens=limit), expected))
"""


@pytest.mark.breadth  # an export and a second interpreter
def test_a_saved_beam_search_program_gives_generates_sequences_in_a_fresh_process(tmp_path: Path) -> None:
    """Beam search (4 beams, EOS, two sequences returned) as one ``while`` program, saved as .pt2 and loaded by
    another interpreter: ``generate``'s sequences for its bound and for a shorter length."""
    import subprocess
    import sys

    from pytest_fullgraph.levels.artifacts import save_generate
    from pytest_fullgraph.loop.decode import export_generate

    model = build_tiny("llama")
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = (ids != 0).long()
    config = GenerationConfig(max_new_tokens=6, pad_token_id=0, eos_token_id=[24], num_beams=4,
                              num_return_sequences=2, length_penalty=0.5)
    expected = {}
    for limit in (6, 3):
        config.max_new_tokens = limit
        expected[limit] = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config)
    config.max_new_tokens = 6
    artifact = save_generate(export_generate(model, ids, mask, config, loop="while"), tmp_path / "beams.pt2")
    torch.save({"input_ids": ids, "attention_mask": mask, "expected": expected}, tmp_path / "inputs.pt")
    completed = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(artifact), str(tmp_path / "inputs.pt")],
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.stdout.split() == ["True", "True"], completed.stderr[-2000:]


def test_beams_with_a_repetition_penalty_over_a_padded_batch_are_generates() -> None:
    """generate builds its processors after expanding the inputs per beam: the repetition penalty's per-row
    padding lengths must be per beam row too (found by the property suite: 'Incompatible prompt_ignore_length')."""
    model = build_tiny("llama")
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = (ids != 0).long()
    config = GenerationConfig(max_new_tokens=4, pad_token_id=0, eos_token_id=None, num_beams=2,
                              repetition_penalty=1.3)
    expected = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(fullgraph_generate(model, ids, mask, config), expected)


def test_the_while_forms_processors_never_read_generates_fill_as_a_token() -> None:
    """Without an EOS id generate fills unwritten positions with -1; the ``while`` form's processors see the
    whole buffer (masked past its length), and the n-gram ban indexed the vocabulary with that -1 (found by the
    property suite's beam draws)."""
    model = build_tiny("llama")
    model.generation_config.eos_token_id = None  # else generate takes the model's EOS id, and fills with it
    ids = torch.tensor([[34, 41, 77, 22, 25, 9, 98, 22], [0] * 7 + [88]])
    mask = (ids != 0).long()
    config = GenerationConfig(max_new_tokens=2, num_beams=2, no_repeat_ngram_size=3, pad_token_id=0,
                              eos_token_id=None)
    expected = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config)
    torch._dynamo.reset()
    compiled = fullgraph_generate(model, ids, mask, config, loop="while",
                                  compiler=lambda function: torch.compile(function, fullgraph=True,
                                                                          backend="aot_eager"))
    assert torch.equal(compiled, expected)
