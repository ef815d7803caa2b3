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
    with pytest.raises(ValueError, match=r"'qwen3' without 'qwen\*' leaves no model"):
        registry.select("qwen3", "qwen*")


@pytest.mark.parametrize(("expression", "message"), [
    ("lama", r"unknown model name\(s\): lama \(did you mean llama\?\)"),
    ("tag:nosuch", r"tag:nosuch \(selects no model\)"),
    ("phi*", r"phi\* \(selects no model\)"),
    ("llama,zzz,yyy", r"unknown model name\(s\): zzz, yyy; valid: all, popular \(keywords\), glob patterns"),
])
def test_an_entry_that_selects_nothing_is_named_with_what_is_valid(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        _registry(MORE).select(expression)
    assert "tag:moe" in str(raised.value) and "qwen3_moe" in str(raised.value)  # the valid choices are listed


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
    assert "llama" not in registry.select("tag:moe")


def test_exclude_and_selection_errors_name_their_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--fullgraph-models=llama,gemma", "--fullgraph-exclude=lama")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fullgraph-exclude: unknown model name(s): lama (did you mean llama or *"])
    result = pytester.runpytest("--fullgraph-models=gemma", "--fullgraph-exclude=gemma")
    result.stderr.fnmatch_lines(["*--fullgraph-models: 'gemma' without 'gemma' leaves no model*"])
    result = pytester.runpytest("--collect-only", "--fullgraph-suite=off", "--fullgraph-models=gemma*,llama",
                                "--fullgraph-exclude=gemma3*,gemma4*")
    assert result.ret == 0, result.stderr.str()
    assert "fullgraph: models=gemma,gemma2,llama " in result.stdout.str()
