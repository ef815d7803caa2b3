"""``--fullgraph-pretrained=NAME=DIR``: a checkpoint saved to a local directory is checked like the tiny models,
offline; a missing or unreadable directory is a usage error naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_fullgraph import build_tiny
from pytest_fullgraph.models import Registry
from pytest_fullgraph.models.pretrained import parse_pretrained, register_pretrained
from tests.conftest import checks_by_id, read_report


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama saved as a user saves a real one."""
    directory = tmp_path_factory.mktemp("checkpoint") / "tiny-llama"
    build_tiny("llama").save_pretrained(directory)
    return directory


@pytest.mark.breadth
def test_a_saved_checkpoint_is_checked_offline_beside_the_tiny_models(pytester: pytest.Pytester, checkpoint: Path,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a download attempt would fail the build
    result = pytester.runpytest_subprocess(f"--fullgraph-pretrained=mine={checkpoint}", "--fullgraph-models=gemma",
                                           "-k", "greedy-forward", "--fullgraph-backend=eager", "-p",
                                           "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=2)
    assert "fullgraph: models=gemma,mine " in result.stdout.str()
    checks = checks_by_id(read_report(tmp_path))
    assert checks["mine-greedy-forward"]["outcome"] == "pass"
    assert checks["mine-greedy-forward"]["model_class"] == "LlamaForCausalLM"
    assert checks["mine-greedy-forward"]["parameters"] == sum(p.numel() for p in build_tiny("llama").parameters())


def test_without_a_selection_only_the_checkpoints_run(pytester: pytest.Pytester, checkpoint: Path) -> None:
    result = pytester.runpytest("--collect-only", "-q", f"--fullgraph-pretrained=mine={checkpoint}", "-p",
                                "no:cacheprovider")
    assert result.ret == 0, result.stderr.str()
    models = {line.rsplit("[", 1)[1].rstrip("]").split("-")[0] for line in result.outlines if "[" in line}
    assert models == {"mine"}


def test_a_checkpoint_is_held_to_its_saved_positions_at_start_up(pytester: pytest.Pytester, checkpoint: Path) -> None:
    """Its config, read when it is registered, gives the limit: nothing is loaded to refuse the run."""
    result = pytester.runpytest(f"--fullgraph-pretrained=mine={checkpoint}", "--fullgraph-max-new-tokens=300",
                                "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --fullgraph-max-new-tokens=300: mine holds at most 256 positions (max_position_embeddings), "
            "and its prompts take 8, so at most 248 new tokens") in result.errlines


def test_the_registered_checkpoint_is_tagged_and_loads_as_saved(checkpoint: Path) -> None:
    import torch

    registry = Registry()
    assert register_pretrained(registry, f"mine={checkpoint}", "--fullgraph-pretrained") == ("mine",)
    assert registry.select("tag:pretrained") == ("mine",)
    assert registry["mine"].family == "llama"
    loaded, built = registry["mine"].build(), build_tiny("llama")
    assert not loaded.training
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), built.state_dict().values(),
                                                 strict=True))


@pytest.mark.parametrize(("value", "message"), [
    ("mine", "'mine' is not NAME=DIR (e.g. mine=/path/to/checkpoint)"),
    ("=x", "'=x' is not NAME=DIR"),
    ("a=x,a=y", "'a' is given twice"),
])
def test_malformed_entries_are_named(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^--fullgraph-pretrained: {re.escape(message)}"):
        parse_pretrained(value, "--fullgraph-pretrained")


def test_a_missing_or_unreadable_directory_is_a_usage_error_naming_it(pytester: pytest.Pytester,
                                                                      tmp_path: Path) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    missing = tmp_path / "nowhere"
    result = pytester.runpytest(f"--fullgraph-pretrained=mine={missing}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--fullgraph-pretrained: mine={missing}: no such directory*"])
    empty = tmp_path / "empty"
    empty.mkdir()
    result = pytester.runpytest(f"--fullgraph-pretrained=mine={empty}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--fullgraph-pretrained: mine={empty}: transformers cannot read a model config "
                                 "there (*Error: *"])
    result = pytester.runpytest(f"--fullgraph-pretrained=llama={empty}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_a_name_already_taken_says_to_pick_another_not_a_python_argument(pytester: pytest.Pytester,
                                                                         checkpoint: Path) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(f"--fullgraph-pretrained=llama={checkpoint}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --fullgraph-pretrained: llama={checkpoint}: 'llama' is already a model's "
                                 f"name; give the checkpoint another NAME, e.g. my_llama={checkpoint}"])
    assert "replace=True" not in result.stderr.str()
