"""The table of decoding modes: every row complete, each loop form and export run or refused by name, the scenarios'
mode features read from it, and a mode declared in a test alone dispatched to with nothing else edited."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny
from pytest_fullgraph.check.scenarios import MODE_FEATURES, SCENARIOS
from pytest_fullgraph.loop import decode
from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate, fullgraph_generate
from pytest_fullgraph.loop.modes import table
from pytest_fullgraph.loop.modes.table import EXPORTS, FORMS, Mode, PlanRequest, Refusal

#: What every mode implements: its loop per form (the function's name) and each export (True, or "refused").
IMPLEMENTED = {
    "core": {"unrolled": "decode_loop", "while": "decode_while_loop",
             "static": True, "dynamic": True, "noise_input": True},
    "beam": {"unrolled": "beam_loop", "while": "beam_while_loop",
             "static": True, "dynamic": True, "noise_input": True},
    "lookup": {"unrolled": "lookup_loop", "while": "lookup_while_loop",
               "static": True, "dynamic": "refused", "noise_input": "refused"},
    "assisted": {"unrolled": "assisted_loop", "while": "assisted_while_loop",
                 "static": True, "dynamic": "refused", "noise_input": "refused"},
}


def _implemented(mode: Mode) -> dict[str, Any]:
    loops = {form: "refused" if isinstance(loop, Refusal) else loop.__name__ for form, loop in mode.loops.items()}
    exports = {name: "refused" if isinstance(done, Refusal) else done for name, done in mode.exports.items()}
    return {**loops, **exports}


def test_every_row_lists_each_loop_form_and_export_as_run_or_refused() -> None:
    rows = (table.core(), *table.modes())
    assert {mode.name: _implemented(mode) for mode in rows} == IMPLEMENTED
    for mode in rows:
        assert set(mode.loops) == set(FORMS) and set(mode.exports) == set(EXPORTS)
        assert mode.generation_modes and set(mode.generation_modes) <= set(table.supported_modes())
        for refusal in [*mode.loops.values(), *mode.exports.values()]:
            assert not isinstance(refusal, Refusal) or refusal.message  # a refusal says why
    assert table.supported_modes() == ("greedy_search", "sample", "beam_search", "beam_sample", "assisted_generation")


def test_a_row_without_every_form_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match=r"declares loops \('unrolled',\); each of \('unrolled', 'while'\) is needed"):
        Mode("half", ("greedy_search",), plan=lambda request: None, loops={"unrolled": decode.decode_loop})


def test_the_scenarios_mode_features_are_the_tables_and_each_has_a_scenario() -> None:
    assert MODE_FEATURES == table.FEATURES == tuple(feature for row in table.LINES.values() for feature in row)
    assert all(any(scenario.feature == feature for scenario in SCENARIOS.values()) for feature in MODE_FEATURES)
    assert all(scenario.kind == "mode" for scenario in SCENARIOS.values() if scenario.feature in MODE_FEATURES)


#: The test's mode: the core's greedy loop under another name, claimed by a config flag, its ``while`` form refused.
CALLS: list[str] = []


def _twin_loop(*args: Any) -> Any:
    CALLS.append("unrolled")
    return decode.decode_loop(*args)


def _twin_settings(request: PlanRequest) -> str | None:
    return "twin" if getattr(request.config, "twin", False) else None


TWIN = dataclasses.replace(
    decode.MODE, name="twin", generation_modes=("greedy_search",), plan=_twin_settings,
    loops={"unrolled": _twin_loop, "while": Refusal("the twin mode does not run loop='while'")},
    exports={"static": True, "dynamic": Refusal("the twin mode exports static shapes only"), "noise_input": True})


@pytest.fixture
def twin() -> Iterator[Mode]:
    table.register(TWIN)
    CALLS.clear()
    try:
        yield TWIN
    finally:
        table.unregister("twin")


def test_a_mode_registered_in_a_test_alone_is_planned_dispatched_and_refused_by_its_row(twin: Mode) -> None:
    model = build_tiny("llama")
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = torch.ones_like(ids)
    plain = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=None)
    config = GenerationConfig(**plain.to_dict(), twin=True)
    expected = fullgraph_generate(model, ids, mask, plain)
    assert CALLS == []  # the core ran the plain config
    assert torch.equal(fullgraph_generate(model, ids, mask, config), expected)
    assert CALLS == ["unrolled"]
    with pytest.raises(UnsupportedGeneration, match=r"^the twin mode does not run loop='while'$"):
        fullgraph_generate(model, ids, mask, config, loop="while")
    with pytest.raises(UnsupportedGeneration, match=r"^the twin mode exports static shapes only$"):
        export_generate(model, ids, mask, config, dynamic=True)
    with pytest.raises(ValueError, match="a mode named 'twin' is in the table already"):
        table.register(twin)


def test_a_mode_not_registered_cannot_be_taken_out() -> None:
    with pytest.raises(ValueError, match="'twin' is not a registered mode"):
        table.unregister("twin")
