"""``report merge``: shards of one run into one report, refusing what does not belong together (the same file
twice, conflicting checks, another configuration), keeping each shard's environment, stop signal and order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.results import CheckResult
from tests.factories import GENERATION_UTILS, REPORT_ENVIRONMENT, a_break, a_check, cli, saved_report


def test_merge_of_shards_writes_json_and_markdown(tmp_path: Path) -> None:
    site = a_break(GENERATION_UTILS, 10, "generation", function="generate")
    shard_a = saved_report(tmp_path / "a", [a_check("llama", "break", level="generate", breaks=[site])])
    shard_b = saved_report(tmp_path / "b", [a_check("gemma", "break", level="generate", breaks=[site]),
                                            a_check("gemma", "pass", level="forward")])
    merged_dir = tmp_path / "merged"
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(merged_dir))
    assert completed.returncode == 0, completed.stderr
    merged = report.load(merged_dir / report.JSON_NAME)
    assert sorted(r.check_id for r in merged.checks) == [
        "gemma-greedy-forward-float32", "gemma-greedy-generate-float32", "llama-greedy-generate-float32"]
    text = (merged_dir / report.MARKDOWN_NAME).read_text()
    assert ("| `transformers/generation/utils.py:10` (generate)<br>`if x:` | "
            "[GB0170](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html) "
            "Data-dependent branching | generation | gemma, llama | 2 |") in text


def test_merge_rejects_conflicting_shards(tmp_path: Path) -> None:
    shard_a = saved_report(tmp_path / "a", [a_check("llama", "pass", level="generate")])
    shard_b = saved_report(tmp_path / "b", [a_check("llama", "mismatch", level="generate")])
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(tmp_path / "m"))
    assert completed.returncode == 2
    assert "check llama-greedy-generate-float32 is 'mismatch' there but 'pass'" in completed.stderr


def test_merge_refuses_the_same_file_twice(tmp_path: Path) -> None:
    shard = saved_report(tmp_path / "a", [a_check("llama", "pass")])
    for second in (str(shard), str(tmp_path / "a" / ".." / "a" / report.JSON_NAME)):
        completed = cli("report", "merge", str(shard), second, "-o", str(tmp_path / "m"))
        assert completed.returncode == 2
        assert completed.stderr.startswith(f"pytest_fullgraph: error: {second}: the same report given twice")
        assert len(completed.stderr.splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    shard = saved_report(tmp_path / "a", [a_check("llama", "pass")])
    blocker = tmp_path / "file"
    blocker.write_text("")
    completed = cli("report", "merge", str(shard), "-o", str(blocker / "out"))
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"pytest_fullgraph: error: {blocker / 'out'}: cannot write")
    assert len(completed.stderr.splitlines()) == 1


def test_merged_environment_describes_every_shard(tmp_path: Path) -> None:
    shard_a = saved_report(tmp_path / "a", [a_check("llama", "pass")], models=["llama"], git_revision="abc",
                       levels={"forward": "F"})
    shard_b = saved_report(tmp_path / "b", [a_check("gemma", "pass")], models=["gemma", "llama"], git_revision="def",
                       levels={"mine": "M"})
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(tmp_path / "m"))
    assert completed.returncode == 0, completed.stderr
    environment = report.load(tmp_path / "m" / report.JSON_NAME).environment
    assert environment["models"] == ["gemma", "llama"]
    assert environment["git_revision"] == ["abc", "def"]
    assert environment["levels"] == {"forward": "F", "mine": "M"}
    assert environment["merged_from"] == [str(shard_a), str(shard_b)]
    assert environment["torch"] == "2.13.0"


@pytest.mark.parametrize(("setting", "first", "second", "named"), [
    ("max_new_tokens", 4, 16, "max_new_tokens is 16 but an earlier report has 4"),
    ("run_slow", False, True, "tier (run_slow) is True but an earlier report has False"),
    ("strict", False, True, "strictness is True but an earlier report has False"),
    ("backend", "aot_eager", "inductor", "backend is 'inductor' but an earlier report has 'aot_eager'"),
])
def test_merge_refuses_shards_of_another_configuration(tmp_path: Path, setting: str, first: object,
                                                       second: object, named: str) -> None:
    shard_a = saved_report(tmp_path / "a", [a_check("llama", "pass")], **{setting: first})
    shard_b = saved_report(tmp_path / "b", [a_check("gemma", "pass")], **{setting: second})
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(tmp_path / "m"))
    assert completed.returncode == 2
    assert completed.stderr.strip() == (f"pytest_fullgraph: error: {shard_b}: {named}; merge reports of one "
                                        "configuration")


def test_a_merge_keeps_the_signal_that_stopped_a_shard() -> None:
    stopped = report.Report(dict(REPORT_ENVIRONMENT), [a_check("llama", "pass")],
                            run={"exitstatus": 2, "interrupted": True, "signal": "SIGTERM"})
    finished = report.Report(dict(REPORT_ENVIRONMENT), [a_check("gemma", "pass")], run={"exitstatus": 0,
                                                                                 "interrupted": False})
    merged = report.merge([("a.json", stopped), ("b.json", finished)])
    assert merged.run == {"exitstatus": 2, "interrupted": True, "signal": "SIGTERM"}
    assert "the run was interrupted (SIGTERM, exit status 2)" in report.markdown(merged)
    assert report.merge([("b.json", finished)]).run == {"exitstatus": 0, "interrupted": False}


def test_a_merged_report_shows_levels_and_scenarios_in_the_order_a_run_does(tmp_path: Path) -> None:
    """Report JSON stores its legend's keys sorted; merged, or read back, the matrix still reads forward, generate,
    decode / greedy, sample, eos (not decode, export, forward / eos, greedy), as a single run's does."""
    from pytest_fullgraph.report.tables import columns

    checks = [CheckResult(model, scenario, level, "eager", 4, "pass")
              for model in ("llama", "gemma") for level in ("forward", "generate", "decode")
              for scenario in ("greedy", "sample", "eos")]
    legend = {"levels": {name: name for name in ("decode", "forward", "generate")},
              "scenarios": {name: name for name in ("eos", "greedy", "sample")}}
    first = saved_report(tmp_path / "a", [c for c in checks if c.model == "llama"])
    second = saved_report(tmp_path / "b", [c for c in checks if c.model == "gemma"])
    for path in (first, second):  # the legend as the JSON stores it: keys sorted
        data = json.loads(path.read_text())
        data["environment"].update(legend)
        path.write_text(json.dumps(data, sort_keys=True))
    merged = report.merge([(str(first), report.load(first)), (str(second), report.load(second))])
    expected = [(level, scenario) for level in ("forward", "generate", "decode")
                for scenario in ("greedy", "sample", "eos")]
    assert columns(merged) == expected
    assert columns(report.load(first)) == expected
