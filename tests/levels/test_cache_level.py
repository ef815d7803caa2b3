"""The ``cache`` level: the eager reference's cache paths (default, static) against recomputing every step, token for
token and step by step against float64; a planted wrong cache path is a divergence named by path, step and layer,
a near-tie is a rounding flip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_fullgraph import build_tiny, run_check
from pytest_fullgraph.core.logits import StepOutputs
from pytest_fullgraph.levels import cache as cache_level
from pytest_fullgraph.levels.cache_judge import first_off, near_tie_step, noise_of, pr_48289_says, tolerance
from tests.conftest import checks_by_id, read_report


@pytest.fixture
def keys_drift_in_the_default_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A wrong default cache: from the first decode step on, ``DynamicLayer`` hands attention keys that are not
    the ones it stored (the static cache's layers and recomputing are untouched)."""
    from transformers.cache_utils import DynamicLayer

    update = DynamicLayer.update

    def drifting(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        keys, values = update(self, key_states, value_states, *args, **kwargs)
        return (keys * 1.5, values) if key_states.shape[-2] == 1 else (keys, values)

    monkeypatch.setattr(DynamicLayer, "update", drifting)
    yield


@pytest.mark.parametrize("scenario", ["greedy", "sample", "padded"])
def test_a_right_model_passes_with_every_path_within_rounding(scenario: str) -> None:
    result = run_check(build_tiny("llama"), "llama", scenario, "cache", "eager", 16)
    assert result.outcome == "pass", result.message
    assert result.message == ("the default cache (DynamicCache), recomputing every step (use_cache=False), the static "
                              "cache (StaticCache): the same tokens over 16 steps and every step's logits within "
                              "rounding of recompute's")
    assert result.graph_count is None  # nothing is compiled


def test_the_level_is_opt_in_and_a_run_naming_it_judges_each_scenario(toy_project: pytest.Pytester,
                                                                      tmp_path: Path) -> None:
    """As a user runs it: collected only when named, 16 new tokens, its verdicts in the report."""
    collected = toy_project.runpytest("--fullgraph-models=llama", "--fullgraph-suite=on", "--co", "-q")
    assert "-cache-" not in collected.stdout.str()
    result = toy_project.runpytest("--fullgraph-models=llama", "--fullgraph-levels=cache", "--fullgraph-suite=on",
                                   "-k", "test_generation_compiles_exactly", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=4)
    checks = checks_by_id(read_report(tmp_path))
    assert sorted(checks) == [f"llama-{name}-cache" for name in ("eos", "greedy", "padded", "sample")]
    assert {(check["outcome"], check["max_new_tokens"]) for check in checks.values()} == {("pass", 16)}


def test_a_wrong_default_cache_is_a_divergence_naming_the_path_step_and_layer(
        keys_drift_in_the_default_cache: None) -> None:
    result = run_check(build_tiny("llama"), "llama", "greedy", "cache", "eager", 16)
    assert result.outcome == "mismatch" and result.mismatch is not None, result.message
    assert result.mismatch.kind == "divergence"
    assert "the default cache (DynamicCache) is off at step 1:" in result.message
    assert "first off at layer 0 (DynamicLayer)" in result.message  # the keys drift from the first layer on
    assert "that cache path of the model or transformers is wrong" in result.message
    assert "the static cache (StaticCache) is off" not in result.message  # its layers are not DynamicLayer
    assert "rounding" not in result.message  # the others differ from a wrong reference: that is not a near-tie


def test_a_loop_that_is_right_against_a_wrong_reference_blames_the_reference(
        keys_drift_in_the_default_cache: None) -> None:
    """The static-cache loop is right here and the reference is not: the mismatch blames the reference."""
    result = run_check(build_tiny("llama"), "llama", "greedy", "decode", "eager", 16, recompiles=False)
    assert result.outcome == "mismatch", result.message
    assert result.message.endswith("recomputing every step without a cache gives the static cache's: the default "
                                   "cache's path, the eager reference, is wrong, not the static cache's nor the loop")


def test_a_compiled_mismatch_says_when_the_reference_differs_from_recompute(
        keys_drift_in_the_default_cache: None) -> None:
    from pytest_fullgraph.check.compare import reference_against_recompute
    from pytest_fullgraph.check.inputs import generation_config, make_inputs
    from pytest_fullgraph.check.scenarios import SCENARIOS
    from pytest_fullgraph.core.generation import generate

    model = build_tiny("llama")
    inputs, config = make_inputs(model, SCENARIOS["greedy"]), generation_config(SCENARIOS["greedy"], 16, None, {})
    eager = generate(model, inputs, config, 0)
    note = reference_against_recompute(model, inputs, config, 0, eager)
    assert note.startswith("; the eager reference itself differs from recomputing every step without a cache "
                           "(use_cache=False) at row "), note


def test_a_path_transformers_refuses_by_name_is_left_out_and_said() -> None:
    """A chunked prefill needs a cache: recomputing is refused by generate, the static cache is still compared."""
    result = run_check(build_tiny("llama"), "llama", "prefill_chunk", "cache", "eager", 4)
    assert result.outcome == "pass", result.message
    assert result.message.startswith("the default cache (DynamicCache), the static cache (StaticCache): the same "
                                     "tokens over 4 steps")
    assert "recomputing every step (use_cache=False) not compared: transformers' generate refuses it (Cannot use " \
           "prefill chunking without a cache" in result.message


# the judgement itself, on numbers made up to sit each side of the line


def test_the_tolerance_is_the_larger_of_the_dtypes_own_distance_and_a_few_dozen_rounding_steps() -> None:
    assert tolerance(1e-5, 10.0, "float32") == pytest.approx(64e-5)
    assert tolerance(0.0, 10.0, "float32") == pytest.approx(64 * 2 ** -23 * 8)
    assert tolerance(None, 10.0, "float32") == pytest.approx(1024 * 2 ** -23 * 8)  # float64 could not run


def test_first_off_finds_the_first_index_past_its_own_tolerance_and_the_row() -> None:
    reference = [torch.zeros(2, 3, dtype=torch.float64) for _ in range(3)]
    values = [torch.full((2, 3), 1e-4), torch.tensor([[0.0, 0, 0], [0, 0, 0.5]]), torch.full((2, 3), 9.0)]
    off = first_off(values, reference, [1e-5] * 3, "float32")
    assert off is not None and (off.index, off.row, off.distance) == (1, 1, 0.5)
    assert first_off(values[:1], reference, [1e-5], "float32") is None  # 10x its own distance: within 64x


def test_a_float64_row_that_is_not_finite_is_left_out_of_the_noise() -> None:
    exact = torch.tensor([[1.0, 2.0], [float("nan"), 0.0]], dtype=torch.float64)
    assert noise_of(torch.tensor([[1.0, 2.5], [7.0, 0.0]]), exact) == 0.5
    assert noise_of(exact, torch.full((2, 2), float("nan"), dtype=torch.float64)) is None


def test_near_ties_are_read_on_scores_as_pr_48289_reads_them() -> None:
    scores = [torch.tensor([[3.0, 1.0], [2.0, 0.0]]), torch.tensor([[5.0, 4.999], [1.0, 0.0]])]
    assert near_tie_step(scores) == (1, pytest.approx(1e-3, abs=1e-6))
    assert "stops comparing ids at step 1" in pr_48289_says(scores, 1)
    assert "it would fail" in pr_48289_says(scores, 0)


def _steps(values: list[list[float]]) -> list[StepOutputs]:
    return [StepOutputs(torch.tensor([row], dtype=torch.float64), []) for row in values]


def _path(name: str, tokens: list[int], logits: list[list[float]]) -> cache_level.PathRun:
    output = SimpleNamespace(sequences=torch.tensor([[1, 2, *tokens]]), scores=[torch.tensor([row]) for row in logits],
                             logits=[torch.tensor([row]) for row in logits], hidden_states=None,
                             past_key_values=None)
    return cache_level.PathRun(name, output)


def _judge(monkeypatch: pytest.MonkeyPatch, runs: dict[str, cache_level.PathRun],
           exact: list[list[float]], keep_float64: bool = False) -> Any:
    """``judge_paths`` with float64 and the dtype's recompute made up: the dtype lands 1e-6 off float64."""
    def recompute(model: Any, *args: Any) -> list[StepOutputs]:
        shift = 0.0 if model == "float64" else 1e-6
        return _steps([[value + shift for value in row] for row in exact])

    monkeypatch.setattr(cache_level, "recompute_steps", recompute)
    if not keep_float64:
        monkeypatch.setattr(cache_level, "float64_copy", lambda model: "float64")
    model = SimpleNamespace(config=SimpleNamespace(get_text_config=lambda: SimpleNamespace()))
    config = SimpleNamespace(get_generation_mode=lambda assistant: SimpleNamespace(value="greedy_search"))
    inputs = {"input_ids": torch.tensor([[1, 2]]), "attention_mask": torch.ones(1, 2)}
    return cache_level.judge_paths(model, inputs, config, runs["default"].output.sequences, runs)  # type: ignore[arg-type]


def test_a_token_flip_where_every_path_is_within_rounding_is_a_rounding_mismatch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tied = [[1.0, 1.0 + 2e-6, 0.0], [0.0, 2.0, 1.0]]
    verdict = _judge(monkeypatch, {"default": _path("default", [1, 1], tied),
                                   "recompute": _path("recompute", [1, 1], tied),
                                   "static": _path("static", [0, 2], [[1.0 + 4e-6, 1.0, 0.0], [2.0, 0.0, 1.0]])},
                     tied)
    assert verdict.outcome == "mismatch" and verdict.mismatch.kind == "rounding", verdict.message
    assert "the static cache differs from recompute at row 0, position 2 (new token 0): 0 where recompute has 1" \
        in verdict.message
    assert "stops comparing ids at step 0" in verdict.message  # PR #48289 would not have looked


def test_logits_off_with_the_same_tokens_are_still_a_divergence(monkeypatch: pytest.MonkeyPatch) -> None:
    right = [[0.0, 3.0, 1.0], [0.0, 1.0, 3.0]]
    verdict = _judge(monkeypatch, {"default": _path("default", [1, 2], right),
                                   "recompute": _path("recompute", [1, 2], right),
                                   "static": _path("static", [1, 2], [[0.0, 3.0, 1.0], [0.0, 1.5, 3.0]])}, right)
    assert verdict.outcome == "mismatch" and verdict.mismatch.kind == "divergence", verdict.message
    assert "the static cache is off at step 1: its logits are 0.5 off recompute's" in verdict.message
    assert "its tokens still equal recompute's over 2 steps" in verdict.message


def test_without_float64_the_tolerance_is_rounding_steps_and_the_verdict_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    right = [[0.0, 3.0, 1.0], [0.0, 1.0, 3.0]]

    def fails(model: Any) -> Any:
        raise RuntimeError("expected m1 and m2 to have the same dtype, but got: float != double")

    runs = {"default": _path("default", [1, 2], right), "recompute": _path("recompute", [1, 2], right),
            "static": _path("static", [1, 2], [[0.0, 3.0, 1.0], [0.0, 1.5, 3.0]])}
    monkeypatch.setattr(cache_level, "float64_copy", fails)
    verdict = _judge(monkeypatch, runs, right, keep_float64=True)
    assert verdict.mismatch.kind == "divergence", verdict.message
    assert "float64 could not run the model, so the tolerance is 1024 float32 rounding steps" in verdict.message
    assert verdict.message.endswith("(float64 recomputing failed: RuntimeError: expected m1 and m2 to have the same "
                                    "dtype, but got: float != double)")
