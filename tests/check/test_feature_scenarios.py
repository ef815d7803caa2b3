"""The generation-feature scenarios: each one's settings really change the tokens (or it says why they cannot),
selection by name, keyword and pattern, and the loop's refusals that name a feature and say why."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import StoppingCriteriaList

from pytest_fullgraph import build_tiny
from pytest_fullgraph.check.inputs import (
    generate_kwargs,
    generation_config,
    make_inputs,
    model_generation_defaults,
    scenario_values,
)
from pytest_fullgraph.check.scenarios import BASIC, PAST_WINDOW_PROMPT, SCENARIOS, Scenario, select_scenarios
from pytest_fullgraph.core.generation import generate
from pytest_fullgraph.models.shrink import SLIDING_WINDOW
from tests.conftest import checks_by_id, read_report

#: The scenarios whose settings make them (a length scenario has none: its prompt makes it, tested on its own).
FEATURES = [name for name in SCENARIOS if name not in BASIC and SCENARIOS[name].kind != "length"]
TOKENS = 4


@pytest.fixture(scope="module")
def llama() -> Any:
    return build_tiny("llama")


def _run(model: Any, scenario: Scenario) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(the scenario's tokens, its plain counterpart's tokens, its config) from eager ``generate``, the settings
    resolved as the checks resolve them."""
    inputs = make_inputs(model, scenario)
    plain = dataclasses.replace(scenario, settings={}, generate_kwargs={})
    eos, settings = scenario_values(model, inputs, scenario, TOKENS)
    plain_eos, plain_settings = scenario_values(model, inputs, plain, TOKENS)
    config = generation_config(scenario, TOKENS, eos, settings)
    plain_config = generation_config(plain, TOKENS, plain_eos, plain_settings)
    with model_generation_defaults(model, eos):
        tokens = generate(model, {**inputs, **generate_kwargs(scenario, model)}, config, scenario.seed)
    with model_generation_defaults(model, plain_eos):
        plain_tokens = generate(model, inputs, plain_config, scenario.seed)
    return tokens, plain_tokens, config


def _forwards(model: Any, scenario: Scenario, config: Any) -> int:
    """How many forwards ``generate`` runs for the scenario."""
    calls = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        with model_generation_defaults(model, None):
            generate(model, make_inputs(model, scenario), config, scenario.seed)
    finally:
        hook.remove()
    return len(calls)


@pytest.mark.parametrize("name", FEATURES)
def test_each_feature_changes_the_tokens_or_says_why_it_cannot(llama: Any, name: str) -> None:
    scenario = SCENARIOS[name]
    tokens, plain_tokens, config = _run(llama, scenario)
    same = tokens.shape == plain_tokens.shape and torch.equal(tokens, plain_tokens)
    if scenario.inert and scenario.kind == "mode":  # a mode of its own that keeps the tokens: generate runs it
        assert same, f"{name} is marked inert ({scenario.inert}) but changed the tokens"
        assistant = generate_kwargs(scenario, llama).get("assistant_model")
        assert str(config.get_generation_mode(assistant).value) == "assisted_generation"
    elif scenario.inert and scenario.kind == "prefill":  # the prompt in chunks: generate runs a forward per chunk
        assert same, f"{name} is marked inert ({scenario.inert}) but changed the tokens"
        assert _forwards(llama, scenario, config) == 3 + TOKENS - 1  # chunks of 3, 3 and 2, then one per step
    elif scenario.inert:
        assert same, f"{name} is marked inert ({scenario.inert}) but changed the tokens"
        config = copy.deepcopy(config)
        llama._prepare_special_tokens(config, kwargs_has_attention_mask=True, device="cpu")
        built = [type(item).__name__ for item in
                 [*llama._get_logits_processor(generation_config=config, input_ids_seq_length=8,
                                               encoder_input_ids=None, device="cpu", model_kwargs={}),
                  *llama._get_stopping_criteria(generation_config=config, stopping_criteria=StoppingCriteriaList())]]
        named = scenario.description.split("(")[-1].split(":")[0].rstrip(")")
        assert named in built, f"{name}: {named} is not among what generate builds: {built}"
    else:
        assert not same, f"{name}'s settings do not change llama's tokens: the scenario does not test its feature"


def _every_steps_logits(model: Any, scenario: Scenario) -> torch.Tensor:
    """Eager greedy ``generate``'s logits at every step on the scenario's prompts."""
    config = generation_config(scenario, TOKENS, None, {})
    config.output_logits, config.return_dict_in_generate = True, True
    with model_generation_defaults(model, None):
        output = model.generate(**make_inputs(model, scenario), generation_config=config)
    return torch.stack(output.logits)


def _window_widened(model: Any, window: int) -> Any:
    """The same weights with a sliding window nothing reaches: the mask, the cache and each layer read it."""
    wide = copy.deepcopy(model)
    wide.config.sliding_window = window
    for module in wide.modules():
        if getattr(module, "sliding_window", None):
            module.sliding_window = window
    return wide


@pytest.mark.parametrize(("name", "slides"), [("greedy", False), ("padded", False), ("past_window", True)])
def test_only_the_length_scenario_runs_past_the_tiny_configs_sliding_window(name: str, slides: bool) -> None:
    """gemma2 (sliding and full layers): the basic scenarios' 12 tokens stay inside its tiny window, so widening the
    window changes nothing; ``past_window``'s prompts go past it, and the same weights with a wider window give other
    logits: the window is reached."""
    model = build_tiny("gemma2")
    assert model.config.sliding_window == SLIDING_WINDOW < PAST_WINDOW_PROMPT
    scenario = SCENARIOS[name]
    assert scenario.kind == ("length" if slides else "basic")
    widened = _every_steps_logits(_window_widened(model, 10 * SLIDING_WINDOW), scenario)
    assert torch.equal(_every_steps_logits(model, scenario), widened) is not slides


def test_every_scenario_has_a_feature_and_a_unique_name_fit_for_test_ids() -> None:
    assert len({scenario.feature for scenario in SCENARIOS.values()}) == len(SCENARIOS)
    assert all("-" not in name and "," not in name for name in SCENARIOS)
    assert BASIC == ("greedy", "sample", "eos", "padded")


@pytest.mark.parametrize(("expression", "expected"), [
    ("basic", BASIC),
    ("top_*,greedy", ("greedy", "top_k", "top_p", "top_h")),
    ("eos_list,eos", ("eos", "eos_list")),  # table order, not the order given
    ("all", tuple(SCENARIOS)),
])
def test_selection(expression: str, expected: tuple[str, ...]) -> None:
    assert select_scenarios(expression) == expected


@pytest.mark.parametrize(("expression", "problem"), [
    ("nope", "unknown scenario 'nope'"),
    ("top_*,gredy", r"unknown scenario 'gredy' \(did you mean greedy\?\)"),
    ("", "no scenario given"),
    ("x*", r"'x\*' matches no scenario"),
])
def test_bad_selection_names_the_entry_close_names_and_what_is_valid(expression: str, problem: str) -> None:
    with pytest.raises(ValueError, match=rf"^{problem}; valid: all, basic \(the default\), globs such as top_\*, or a "
                                         rf"name: python -m pytest_fullgraph scenarios lists all {len(SCENARIOS)}$"):
        select_scenarios(expression)


def test_scenario_names_and_keywords_match_in_any_case() -> None:
    assert select_scenarios("Greedy,TOP_K") == ("greedy", "top_k")
    assert select_scenarios("BASIC") == BASIC and select_scenarios("Top_*") == ("top_k", "top_p", "top_h")


def test_the_option_selects_scenarios_and_a_bad_one_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing(fullgraph_settings):\n    pass\n")
    result = pytester.runpytest("--fullgraph-scenarios=greedy,smaple")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --fullgraph-scenarios: unknown scenario 'smaple' (did you mean sample*?); "
                                 "valid: all, basic (the default), *"])
    assert len(next(line for line in result.errlines if line.startswith("ERROR:"))) < 300
    pytester.makeini("[pytest]\nfullgraph_scenarios = top_k\n")
    collected = pytester.runpytest("--fullgraph-models=llama", "--fullgraph-suite=on", "--collect-only", "-q")
    ids = [line for line in collected.outlines if "test_generation_compiles_exactly" in line]
    assert ids and all("-top_k-" in line for line in ids), collected.outlines


def test_the_loop_refuses_a_feature_as_a_skip_that_says_why(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=llama", "--fullgraph-suite=on", "-k",
                                   "test_generation_compiles_exactly and decode",
                                   "--fullgraph-scenarios=prefix_constrained,max_time,top_k",
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, skipped=2)
    checks = checks_by_id(read_report(tmp_path))
    assert checks["llama-top_k-decode"]["outcome"] == "pass"
    prefix = checks["llama-prefix_constrained-decode"]
    assert prefix["outcome"] == "skip"
    assert prefix["message"].startswith("unsupported by fullgraph_generate: fullgraph_generate does not support "
                                        "prefix_allowed_tokens_fn=...: a Python function called on the host")
    assert "bound the work with max_new_tokens instead" in checks["llama-max_time-decode"]["message"]


def test_the_markdown_has_feature_views_once_features_beyond_the_basic_four_ran() -> None:
    from pytest_fullgraph import report
    from pytest_fullgraph.core.results import CheckResult
    from pytest_fullgraph.report.render import markdown

    checks = [CheckResult(model, scenario, level, "aot_eager", 4, outcome)
              for model, scenario, level, outcome in [
                  ("llama", "top_k", "decode", "pass"), ("gemma", "top_k", "decode", "pass"),
                  ("llama", "top_k", "generate", "break"), ("gemma", "top_k", "generate", "break"),
                  ("llama", "max_time", "decode", "skip"), ("gemma", "max_time", "decode", "skip"),
                  ("llama", "max_time", "generate", "break")]]
    page = markdown(report.Report({}, checks))
    assert "| top_k (`top_k`)" not in page  # a scenario named after its feature is shown once
    assert "| `top_k` | ⛔ 2 | ✅ 2 |" in page  # feature x level: generate, then decode
    assert "| `max_time` | ⛔ 1 | ⏭ 2 |" in page
    assert "| feature (scenario) | gemma | llama |" in page
    assert "| `max_time` | ·⏭ | ⛔⏭ |" in page  # feature x model: one glyph per level, · where none ran
    basic = [CheckResult("llama", "greedy", "decode", "aot_eager", 4, "pass")]
    assert "Generation features" not in markdown(report.Report({}, basic))


def test_the_scenarios_command_lists_the_table_and_names_a_bad_selection(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from pytest_fullgraph.__main__ import main

    assert main(["scenarios", "top_*,max_time", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == ["top_k", "top_p", "top_h", "max_time"]
    assert rows[-1]["kind"] == "stopping" and rows[-1]["inert"].startswith("a limit no tiny generation reaches")
    assert main(["scenarios"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == len(SCENARIOS) and table[0].startswith("greedy ")
    assert main(["scenarios", "gredy"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("pytest_fullgraph: error: unknown scenario 'gredy' (did you mean greedy?); ")
    assert error.count("\n") == 1 and len(error) < 300
