"""The ceiling on ``--fullgraph-max-new-tokens``: the positions a model's config declares, less the scenarios'
prompts. Unit tests with fake configs and registries (no model built, no transformers), and one run of a model
known only once built, checked when its check runs."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_fullgraph.check.scenarios import longest_prompt
from pytest_fullgraph.levels.builtin import builtin_levels
from pytest_fullgraph.models import ModelSpec, Registry
from pytest_fullgraph.models.positions import Positions, declared_positions, selection_too_long, too_long
from pytest_fullgraph.plugin.options import OPTIONS, Chosen
from pytest_fullgraph.plugin.session import FullgraphSession
from pytest_fullgraph.plugin.settings import Settings, resolve_settings


class Composite:
    """A config whose decoder's positions are in its text config (gemma3's shape)."""

    def __init__(self, text: Any) -> None:
        self.text = text

    def get_text_config(self, decoder: bool = False) -> Any:
        return self.text


@pytest.mark.parametrize(("config", "expected"), [
    (SimpleNamespace(max_position_embeddings=256), Positions("m", 256, "max_position_embeddings")),
    (SimpleNamespace(max_seq_len=128), Positions("m", 128, "max_seq_len")),  # mpt
    (SimpleNamespace(max_target_positions=448, max_source_positions=1500),
     Positions("m", 448, "max_target_positions")),  # whisper's decoder
    (Composite(SimpleNamespace(max_position_embeddings=64)), Positions("m", 64, "max_position_embeddings")),
    (SimpleNamespace(max_position_embeddings=-1), None),  # xlnet: no limit
    (SimpleNamespace(max_position_embeddings=True), None),
    (SimpleNamespace(state_size=8), None),  # mamba: nothing bounds the length
])
def test_declared_positions_reads_the_field_that_bounds_the_length(config: Any, expected: Positions | None) -> None:
    assert declared_positions("m", config) == expected


def test_too_long_names_the_tightest_model_and_counts_the_prompt() -> None:
    limits = [Positions("big", 1024, "max_position_embeddings"), Positions("small", 256, "max_seq_len")]
    assert too_long(limits, 8, 248) == ""
    assert too_long(limits, 8, 249) == ("small holds at most 256 positions (max_seq_len), and its prompts take 8, "
                                        "so at most 248 new tokens")
    assert too_long(limits, 8, 5000).endswith("so at most 248 new tokens (too many for big too)")
    assert too_long([Positions("tiny", 4, "max_position_embeddings")], 8, 1).endswith("so at most 0 new tokens")


def test_too_long_stays_one_line_for_many_models() -> None:
    limits = [Positions(f"m{index}", 256, "max_position_embeddings") for index in range(9)]
    assert too_long(limits, 8, 300).endswith("(too many for m1, m2, m3, m4, m5 and 3 more too)")


def fake_registry() -> Registry:
    def config(positions: int) -> Any:
        return lambda: SimpleNamespace(max_position_embeddings=positions)

    def unreadable() -> Any:
        raise ValueError("this config does not build")

    return Registry([ModelSpec("long", lambda: None, config=config(1024)),  # type: ignore[arg-type,return-value]
                     ModelSpec("short", lambda: None, config=config(64)),  # type: ignore[arg-type,return-value]
                     ModelSpec("built_only", lambda: None),  # type: ignore[arg-type,return-value]
                     ModelSpec("broken", lambda: None, config=unreadable),  # type: ignore[arg-type,return-value]
                     ModelSpec("never", lambda: None, known_reason="no",  # type: ignore[arg-type,return-value]
                               config=config(2))])


def settings(models: tuple[str, ...], tokens: int, scenarios: tuple[str, ...] = ("greedy",)) -> Settings:
    return Settings(models=models, backend="eager", max_new_tokens=tokens, run_slow=False, strict=False,
                    scenarios=scenarios)


def chosen(models: str, tokens: int, source: str = "--fullgraph-max-new-tokens") -> dict[str, Chosen]:
    """The options as ``read_options`` gives them: defaults but for the models and ``max_new_tokens``."""
    values = {option.dest: Chosen(option.default) for option in OPTIONS}
    return {**values, "fullgraph_models": Chosen(models, "--fullgraph-models"),
            "fullgraph_max_new_tokens": Chosen(tokens, source)}


def test_a_set_value_past_a_selected_models_positions_is_a_usage_error() -> None:
    """Models whose limit is not known before a build (only a build, a config that fails, never built) are not
    read at start-up."""
    every = "long,short,built_only,broken,never"
    assert resolve_settings(chosen(every, 56), fake_registry()).max_new_tokens == 56
    with pytest.raises(pytest.UsageError) as refused:
        resolve_settings(chosen(every, 100), fake_registry())
    assert str(refused.value) == ("--fullgraph-max-new-tokens=100: short holds at most 64 positions "
                                  "(max_position_embeddings), and its prompts take 8, so at most 56 new tokens")
    assert selection_too_long(fake_registry(), ["long", "built_only", "broken", "never"], 8, 1000) == ""


def test_a_default_value_reads_no_config() -> None:
    """The defaults fit every built-in model; reading configs would import transformers in every run."""
    registry = Registry([ModelSpec("short", lambda: None,  # type: ignore[arg-type,return-value]
                                   config=lambda: pytest.fail("a config was read"))])
    assert resolve_settings(chosen("short", 4000, source=""), registry).max_new_tokens == 4000


def test_the_longest_prompt_of_the_selected_scenarios_counts() -> None:
    assert longest_prompt(("forced_bos",)) == 1
    assert longest_prompt(("forced_bos", "padded")) == 8


def test_a_model_known_only_once_built_is_held_to_its_positions_at_check_time() -> None:
    session = FullgraphSession(settings(("built_only",), 60), fake_registry(), builtin_levels())
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64))
    assert session.too_long("built_only", model, "greedy", 56) == ""
    assert session.too_long("built_only", model, "forced_bos", 60) == ""  # a 1-token prompt: 61 positions fit
    assert session.too_long("built_only", model, "greedy", 60) == (
        "max_new_tokens=60: built_only holds at most 64 positions (max_position_embeddings), and its prompts "
        "take 8, so at most 56 new tokens")
    assert session.too_long("built_only", model, "greedy", 256) == ""  # a level's own length (while256) is its own


SHORT_MODEL = textwrap.dedent('''\
    import torch
    from transformers import LlamaForCausalLM

    from pytest_fullgraph import register_model, tiny_config


    def build():
        config = tiny_config("llama")
        config.max_position_embeddings = 10
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


    register_model("short", build)
''')


def test_a_registered_model_with_too_few_positions_is_an_error_naming_its_limit(pytester: pytest.Pytester) -> None:
    """Its config is known only once built: the check is an error with the one line, not a run to the time limit."""
    pytester.makeconftest(SHORT_MODEL)
    pytester.makepyfile(test_short=textwrap.dedent('''\
        def test_short(fullgraph_check):
            result = fullgraph_check("short", "greedy", "decode", verdict=False)
            assert (result.outcome, result.message) == ("error", "max_new_tokens=4: short holds at most 10 positions "
                "(max_position_embeddings), and its prompts take 8, so at most 2 new tokens")
    '''))
    result = pytester.runpytest("test_short.py", "--fullgraph-models=short", "--fullgraph-backend=eager",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
