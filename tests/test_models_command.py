"""``python -m pytest_fullgraph models``: the table of registered models, as a user runs it."""

from __future__ import annotations

import json

import pytest

from pytest_fullgraph.__main__ import main
from tests.factories import cli


def run_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The same command in this process: transformers is imported once, not once per call."""
    try:
        status = main(["models", *args])
    except SystemExit as exit_:  # argparse's errors
        status = int(exit_.code or 0)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_json_rows_say_class_size_flag_tags_and_status(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_here(capsys, "llama,mamba,musicgen", "--json")
    assert status == 0, err
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["llama"]["status"] == "ok" and rows["llama"]["class"] == "LlamaForCausalLM"
    assert 0 < rows["llama"]["parameters"] < 2_000_000 and rows["llama"]["can_compile_fullgraph"] is True
    assert rows["mamba"]["tags"] == ["popular", "ssm"]
    assert rows["musicgen"]["status"].startswith("skipped: the causal-LM class (MusicgenForCausalLM) needs")
    assert rows["musicgen"]["parameters"] is None  # a model with a known reason is never built


def test_the_table_and_its_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_here(capsys, "tag:mla", "--exclude", "deepseek*", "--no-build")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["model", "class", "parameters", "flag", "tags", "status"]
    assert not any(line.startswith("deepseek") for line in lines)
    assert any(line.startswith("minicpm3 ") and "mla" in line for line in lines)
    assert lines[-1].endswith("models (not built)")


def test_a_bad_selection_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_here(capsys, "lama")
    assert (status, out) == (2, "")
    assert err.startswith("pytest_fullgraph: error: unknown model 'lama' (did you mean llama, ")
    assert "python -m pytest_fullgraph models --no-build lists all" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.breadth
def test_a_model_that_prints_does_not_corrupt_the_json() -> None:
    completed = cli("models", "reformer", "--json")  # transformers' reformer prints a warning on stdout at every step
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)[0]["status"] == "ok"
    assert "not a recognized input" in completed.stderr


def test_shards_preview_the_models_each_ci_job_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The shards of a selection, listed with ``--shard``, are disjoint and together the whole selection."""
    parts = []
    for label in ("1/3", "2/3", "3/3"):
        status, out, err = run_here(capsys, "popular", "--no-build", "--json", "--shard", label)
        assert status == 0, err
        parts.append([row["name"] for row in json.loads(out)])
    whole = [row["name"] for row in json.loads(run_here(capsys, "popular", "--no-build", "--json")[1])]
    assert sorted(name for part in parts for name in part) == whole
    assert [len(part) for part in parts] == [9, 8, 8]
    status, _, err = run_here(capsys, "popular", "--no-build", "--shard", "0/3")
    assert (status, err.strip()) == (
        2, "pytest_fullgraph: error: --shard: '0/3' is not a shard; expected I/N with 1 <= I <= N, e.g. 1/4")
