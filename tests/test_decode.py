"""fullgraph_generate's contract: unsupported settings are named; the decode level finds model breaks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny
from pytest_fullgraph.decode import UnsupportedGeneration, fullgraph_generate
from tests.conftest import PLANTED_BREAK_LINE, checks_by_id, read_report


@pytest.mark.parametrize(("settings", "named"), [
    ({"num_beams": 2}, "num_beams=2"),
    ({"num_return_sequences": 2, "do_sample": True}, "num_return_sequences=2"),
    ({"penalty_alpha": 0.6, "top_k": 4}, "penalty_alpha=0.6"),
    ({"output_scores": True, "return_dict_in_generate": True}, "output_scores=True"),
])
def test_unsupported_settings_raise_naming_the_setting(settings: dict[str, object], named: str) -> None:
    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=2, pad_token_id=0, **settings)
    with pytest.raises(UnsupportedGeneration, match=f"does not support {named}"):
        fullgraph_generate(model, torch.tensor([[5, 6, 7]]), None, config)


def test_eager_loop_equals_generate_with_eos_list_and_min_new_tokens() -> None:
    model = build_tiny("gemma")
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = (ids != 0).long()
    free = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0,
                          eos_token_id=None)
    eos = [int(free[0, 5]), int(free[1, 6])]  # tokens the rows really emit, so both stop early
    config = GenerationConfig(max_new_tokens=6, min_new_tokens=2, do_sample=False, pad_token_id=0, eos_token_id=eos)
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    assert expected.shape[1] < 10 or (expected == 0).any()  # EOS really cut or padded the output
    assert torch.equal(fullgraph_generate(model, ids, mask, config), expected)


def test_decode_level_is_one_graph_and_attributes_model_breaks(toy_project: pytest.Pytester,
                                                               tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy,toy_break", "--fullgraph-backend=eager", "-k",
                                   "greedy and decode", "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, xfailed=1)
    checks = checks_by_id(read_report(tmp_path))
    assert checks["toy-greedy-decode"]["graph_count"] == 1
    first = checks["toy_break-greedy-decode"]["first_break"]
    assert (first["file"], first["line"], first["origin"]) == ("conftest.py", PLANTED_BREAK_LINE, "user")
