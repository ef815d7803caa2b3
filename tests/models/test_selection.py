"""Selecting models: names, keywords, glob patterns, tags and exclusions; sorted, validated, and lazy."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_fullgraph import models
from pytest_fullgraph.models import ModelSpec, Registry


def _spec(name: str, *tags: str) -> ModelSpec:
    return ModelSpec(name, lambda: None, tags=frozenset(tags))  # type: ignore[arg-type,return-value]


def _registry(more: Iterable[ModelSpec] = ()) -> Registry:
    loaded = list(more)
    return Registry([_spec("llama", "popular"), _spec("gemma", "popular")], more=lambda: loaded)


MORE = (_spec("qwen2"), _spec("qwen3", "moe"), _spec("qwen3_moe", "moe"), _spec("mamba", "ssm"))


def test_names_keywords_globs_and_tags_select_a_sorted_set() -> None:
    registry = _registry(MORE)
    assert registry.select("qwen3,llama,qwen3") == ("llama", "qwen3")
    assert registry.select("qwen*") == ("qwen2", "qwen3", "qwen3_moe")
    assert registry.select("tag:moe,mamba") == ("mamba", "qwen3", "qwen3_moe")
    assert registry.select("popular") == registry.select("tag:popular") == ("gemma", "llama")
    assert registry.select("all") == ("gemma", "llama", "mamba", "qwen2", "qwen3", "qwen3_moe")


def test_exclude_removes_in_the_same_forms() -> None:
    registry = _registry(MORE)
    assert registry.select("all", "tag:moe,gemma") == ("llama", "mamba", "qwen2")
    assert registry.select("qwen*", "*_moe") == ("qwen2", "qwen3")
    with pytest.raises(ValueError, match=r"excluding 'qwen\*' leaves none of the models 'qwen3' selects"):
        registry.select("qwen3", "qwen*")


@pytest.mark.parametrize(("expression", "message"), [
    ("lama", r"^unknown model 'lama' \(did you mean llama\?\); python -m pytest_fullgraph models --no-build lists "
             r"all 6 models$"),
    ("tag:mo", r"^unknown tag 'tag:mo' \(did you mean tag:moe\?\); "),
    ("tag:sliding", r"^no model has 'tag:sliding'; "),
    ("phi*", r"^'phi\*' matches no model; "),
    ("llama,zzz,yyy", r"^unknown model 'zzz', unknown model 'yyy'; .* lists all 6 models; a model of your own: "
                      r"register it in the rootdir conftest.py or a plugin \(a sub-directory's conftest.py loads too "
                      r"late\)$"),
    ("mamab", r"^unknown model 'mamab' \(did you mean mamba, llama\?\); [^;]*$"),  # a typo: no registration advice
    ("late", r"^unknown model 'late'; .*; a model of your own: register it"),
    (",", r"^',' selects no model; give names, all, popular, tag:TAG or a glob such as qwen\* "),
])
def test_an_entry_that_selects_nothing_is_named_with_close_names(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _registry(MORE).select(expression)


def test_a_name_a_test_passes_to_fullgraph_check_is_named_in_one_line() -> None:
    assert _registry(MORE).unknown("lama") == ("unknown model 'lama' (did you mean llama?); python -m "
                                               "pytest_fullgraph models --no-build lists all 6 models")


@pytest.mark.parametrize(("expression", "expected"), [
    ("LLAMA", ("llama",)),
    ("Qwen3,GEMMA", ("gemma", "qwen3")),
    ("QWEN*", ("qwen2", "qwen3", "qwen3_moe")),
    ("TAG:MoE,ALL", ("gemma", "llama", "mamba", "qwen2", "qwen3", "qwen3_moe")),
    ("Popular", ("gemma", "llama")),
])
def test_names_keywords_and_tags_match_in_any_case(expression: str, expected: tuple[str, ...]) -> None:
    assert _registry(MORE).select(expression) == expected


def test_a_name_in_two_cases_is_taken_as_spelled_and_refused_when_neither() -> None:
    registry = Registry([_spec("Mine"), _spec("mine")])
    assert registry.select("mine") == ("mine",) and registry.select("Mine") == ("Mine",)
    with pytest.raises(ValueError, match=r"unknown model 'MINE' \(did you mean Mine\?\)"):
        registry.select("MINE")


def test_the_builtin_registry_suggests_at_most_five_names_in_one_short_line() -> None:
    registry = models.builtin_registry()
    with pytest.raises(ValueError) as raised:
        registry.select("lama")
    message = str(raised.value)
    suggested = message.split("did you mean ", 1)[1].split("?", 1)[0].split(", ")
    assert suggested[0] == "llama" and len(suggested) <= 5
    assert len(message) < 300 and "\n" not in message
    assert f"lists all {len(registry)} models" in message


def test_names_the_records_know_resolve_without_loading_the_installed_types() -> None:
    def refuse() -> list[ModelSpec]:
        raise AssertionError("resolving llama,gemma must not import transformers' model mapping")

    registry = Registry([_spec("llama"), _spec("gemma")], more=refuse)
    assert registry.select("gemma,llama") == ("gemma", "llama")
    with pytest.raises(AssertionError):
        registry.select("qwen2")


def test_the_builtin_default_selection_imports_nothing_heavy(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> tuple[str, ...]:
        raise AssertionError("the default selection loaded every installed model type")

    monkeypatch.setattr(models.build, "installed_model_types", refuse)
    assert models.builtin_registry().select("llama,gemma") == ("gemma", "llama")


def test_explicit_registrations_win_over_the_lazily_loaded_types() -> None:
    mine = _spec("qwen2", "mine")
    registry = _registry(MORE)
    registry.add(mine, replace=True)
    assert registry["qwen2"] is mine and len(registry) == 6
    with pytest.raises(ValueError, match="'qwen3' is already registered"):
        registry.add(_spec("qwen3"))  # a name an installed type has needs replace=True


@pytest.mark.parametrize("bad", ["", "a,b", "all", " x", "qwen*", "a[1]", "tag:x"])
def test_names_that_a_selection_could_not_name_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid model name"):
        _spec(bad)


def test_the_builtin_registry_holds_every_installed_causal_lm_type() -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    registry = models.builtin_registry()
    assert set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) <= set(registry.names())
    assert 25 <= len(registry.select("popular")) <= 35
    assert {"qwen3_moe", "mixtral"} <= set(registry.select("tag:moe"))
    assert "gemma2" in registry.select("tag:sliding") and "mamba" in registry.select("tag:ssm")
    assert "gpt_neo" in registry.select("tag:sliding")  # its local layers' window_size
    assert {"mamba2", "llama4_text", "minimax"} <= set(registry.select("tag:chunked")) and "big_bird" not in \
        registry.select("tag:chunked")  # big_bird's block_size is sparse attention's
    assert "llama" not in registry.select("tag:moe")


def test_exclude_and_selection_errors_name_their_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--fullgraph-models=llama,gemma", "--fullgraph-exclude=lama")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --fullgraph-exclude: unknown model 'lama' (did you mean llama, *"])
    result = pytester.runpytest("--fullgraph-models=gemma", "--fullgraph-exclude=gemma")
    result.stderr.fnmatch_lines(["ERROR: --fullgraph-exclude='gemma' leaves none of the 1 model(s) selected by "
                                 "--fullgraph-models='gemma'; exclude fewer"])
    result = pytester.runpytest("--fullgraph-exclude=all")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --fullgraph-exclude='all' leaves none of the 2 model(s) selected by "
                                 "--fullgraph-models='llama,gemma'; exclude fewer"])
    result = pytester.runpytest("--collect-only", "--fullgraph-suite=off", "--fullgraph-models=gemma*,llama",
                                "--fullgraph-exclude=gemma3*,gemma4*")
    assert result.ret == 0, result.stderr.str()
    assert "fullgraph: models=gemma,gemma2,llama " in result.stdout.str()


@pytest.mark.parametrize(("args", "line"), [
    (["--fullgraph-models=lama"], "ERROR: --fullgraph-models: unknown model 'lama' (did you mean llama, *?); "
                                  "python -m pytest_fullgraph models --no-build lists all * models"),
    (["--fullgraph-models=llama,nosuchthing"], "ERROR: --fullgraph-models: unknown model 'nosuchthing'; * a model "
                                               "of your own: register it in the rootdir conftest.py or a plugin *"),
    (["--fullgraph-exclude=gema"], "ERROR: --fullgraph-exclude: unknown model 'gema' (did you mean gemma*"),
])
def test_an_unknown_model_is_one_short_line_with_close_names(pytester: pytest.Pytester, args: list[str],
                                                             line: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
    error = next(text for text in result.errlines if text.startswith("ERROR:"))
    assert len(error) < 300


def test_a_name_in_capitals_selects_the_model(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--collect-only", "--fullgraph-suite=off", "--fullgraph-models=LLAMA,Gemma")
    assert result.ret == 0, result.stderr.str()
    assert "fullgraph: models=gemma,llama " in result.stdout.str()
