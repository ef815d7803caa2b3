"""``--fullgraph-shard=I/N``: disjoint, complete, deterministic parts, balanced by a report's costs; shards
merged equal one unsharded run, and the gate names a shard that never arrived."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_fullgraph import report
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report.shard import Shard, missing_shards, model_costs, parse_shard, partition, select_shard
from tests.conftest import read_report
from tests.plugin.test_xdist import without_timings

NAMES = st.lists(st.text("abcdefgh_", min_size=1, max_size=6), max_size=40, unique=True)


@pytest.mark.parametrize(("value", "expected"), [("1/1", Shard(1, 1)), ("3/8", Shard(3, 8)), (" 2 / 4 ", Shard(2, 4))])
def test_a_shard_is_i_of_n(value: str, expected: Shard) -> None:
    assert parse_shard(value, "--fullgraph-shard") == expected
    assert expected.label == value.replace(" ", "")


@pytest.mark.parametrize("value", ["0/0", "3/2", "x", "1/0", "0/3", "-1/2", "1/2/3", "", "1.5/2"])
def test_anything_else_is_refused_with_the_form_allowed(value: str) -> None:
    with pytest.raises(ValueError, match=rf"^--fullgraph-shard: '{value}' is not a shard; expected I/N with "):
        parse_shard(value, "--fullgraph-shard")


@given(NAMES, st.integers(1, 12), st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=6),
                                                  st.floats(0, 1e4, allow_nan=False), max_size=40))
def test_parts_are_disjoint_complete_and_the_same_for_any_order(names: list[str], count: int,
                                                                costs: dict[str, float]) -> None:
    parts = partition(names, count, costs)
    assert len(parts) == count
    flat = [name for part in parts for name in part]
    assert sorted(flat) == sorted(names)  # every model once
    assert all(list(part) == sorted(part) for part in parts)
    assert partition(list(reversed(names)), count, dict(reversed(list(costs.items())))) == parts


@given(NAMES, st.integers(1, 12))
def test_without_costs_the_split_is_even_by_count(names: list[str], count: int) -> None:
    sizes = [len(part) for part in partition(names, count)]
    assert max(sizes) - min(sizes) <= 1


@given(st.dictionaries(st.text("abcdefgh", min_size=1, max_size=5), st.floats(0.1, 1e3), min_size=1, max_size=40),
       st.integers(1, 8))
def test_with_costs_no_shard_carries_more_than_its_share_plus_one_model(costs: dict[str, float], count: int) -> None:
    """The greedy bound: the busiest shard exceeds the mean load by at most the costliest model."""
    loads = [sum(costs[name] for name in part) for part in partition(list(costs), count, costs)]
    assert max(loads) <= sum(costs.values()) / count + max(costs.values()) + 1e-6


def test_costs_separate_the_expensive_models() -> None:
    costs = {"big1": 100.0, "big2": 90.0, "a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    assert partition(list(costs), 2, costs) == [("big1",), ("a", "b", "big2", "c", "d")]
    assert partition(list(costs), 2) == [("a", "big1", "c"), ("b", "big2", "d")]  # even split by count


def test_a_model_the_costs_do_not_know_counts_as_the_median() -> None:
    parts = partition(["new", "x", "y", "z"], 2, {"x": 10.0, "y": 10.0, "z": 30.0})
    assert parts == [("z",), ("new", "x", "y")]


def test_an_empty_shard_is_refused_naming_the_counts() -> None:
    assert select_shard(["a", "b", "c"], Shard(3, 3)) == ("c",)
    with pytest.raises(ValueError, match=r"shard 4/4 is empty: 3 selected model\(s\) cannot fill 4 shards; "
                                         r"use at most 3"):
        select_shard(["a", "b", "c"], Shard(4, 4))


def test_costs_are_each_models_check_time_summed() -> None:
    checks = [CheckResult("a", "greedy", "forward", "eager", 4, "pass", timings={"eager_s": 1.0, "compile_s": 2.0}),
              CheckResult("a", "eos", "forward", "eager", 4, "pass", timings={"compile_s": 0.5}),
              CheckResult("b", "greedy", "forward", "eager", 4, "pass")]
    assert model_costs(report.Report({}, checks)) == {"a": 3.5, "b": 0.0}


def test_missing_shards_are_the_indices_of_one_count_no_report_covers() -> None:
    assert missing_shards(["1/4", "3/4"]) == ["2/4", "4/4"]
    assert missing_shards(["1/2", "2/2"]) == []
    assert missing_shards(["1/2", "1/3"]) == []  # shards of different runs: nothing to say
    assert missing_shards([]) == []


def _shard_report(label: str, model: str) -> report.Report:
    return report.Report({"torch": "2", "transformers": "5", "backend": "eager", "max_new_tokens": 4,
                          "run_slow": False, "strict": False, "breaks": "all", "models": [model], "shard": label},
                         [CheckResult(model, "greedy", "forward", "eager", 4, "pass")])


def test_merged_shards_list_their_shards_and_the_gate_fails_on_a_missing_one() -> None:
    merged = report.merge([("one", _shard_report("1/3", "a")), ("three", _shard_report("3/3", "c"))])
    assert merged.environment["shard"] == ["1/3", "3/3"]
    assert merged.environment["shards_missing"] == ["2/3"]
    assert "**Incomplete:** shard(s) 2/3 of this run are missing" in report.markdown(merged)
    gate = report.diff(merged, merged)
    assert gate.failed
    assert gate.regressions == ["INCOMPLETE: shard(s) 2/3 of this run are missing from the merged report"]
    assert not report.diff(merged, merged, allow_missing=True).failed
    complete = report.merge([("merged", merged), ("two", _shard_report("2/3", "b"))])
    assert (complete.environment["shard"], complete.environment["shards_missing"]) == (["1/3", "2/3", "3/3"], [])
    assert "shards 1/3, 2/3, 3/3" in report.markdown(complete)


@pytest.mark.breadth
def test_two_shards_merged_equal_one_unsharded_run(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    common = ["--fullgraph-models=toy,toy_break,toy_drift", "--fullgraph-backend=eager", "-k",
              "greedy-forward", "-p", "no:cacheprovider"]
    whole = toy_project.runpytest(*common, f"--fullgraph-report={tmp_path / 'whole'}")
    assert whole.ret == pytest.ExitCode.TESTS_FAILED, whole.stdout.str()  # toy_drift's mismatch
    shard_paths = []
    for label in ("1/2", "2/2"):
        out = tmp_path / label.replace("/", "of")
        result = toy_project.runpytest(*common, f"--fullgraph-shard={label}", f"--fullgraph-report={out}")
        assert f"shard={label}" in result.stdout.str()
        shard_paths.append(out / report.JSON_NAME)
    shard_models = [read_report(path.parent)["environment"]["models"] for path in shard_paths]
    assert shard_models == [["toy", "toy_drift"], ["toy_break"]]
    merged_dir = tmp_path / "merged"
    report.write(report.merge((str(path), report.load(path)) for path in shard_paths), merged_dir)
    merged, unsharded = without_timings(read_report(merged_dir)), without_timings(read_report(tmp_path / "whole"))
    assert merged["checks"] == unsharded["checks"]
    assert merged["models"] == unsharded["models"]
    assert merged["environment"]["models"] == unsharded["environment"]["models"] == ["toy", "toy_break", "toy_drift"]
    assert (merged["environment"]["shard"], merged["environment"]["shards_missing"]) == (["1/2", "2/2"], [])


def test_costs_from_an_earlier_report_balance_the_shards(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    costs = tmp_path / "costs.json"
    earlier = report.Report({}, [CheckResult(name, "greedy", "forward", "eager", 4, "pass", timings={"compile_s": s})
                                 for name, s in (("toy", 50.0), ("toy_break", 30.0), ("toy_drift", 25.0))])
    costs.write_text(json.dumps(earlier.to_dict()))
    result = toy_project.runpytest("--collect-only", "-q", "--fullgraph-models=toy,toy_break,toy_drift",
                                   "--fullgraph-shard=2/2", f"--fullgraph-shard-costs={costs}", "-k", "greedy-forward")
    assert result.ret == 0, result.stderr.str()
    collected = [line for line in result.stdout.lines if "::" in line]
    assert [line.rsplit("[", 1)[1].split("-")[0] for line in collected] == ["toy_break", "toy_drift"]


@pytest.mark.parametrize(("args", "message"), [
    (["--fullgraph-shard=3/2"], "*--fullgraph-shard: '3/2' is not a shard; expected I/N with 1 <= I <= N, e.g. 1/4*"),
    (["--fullgraph-shard=3/3", "--fullgraph-models=llama,gemma"],
     "*--fullgraph-shard: shard 3/3 is empty: 2 selected model(s) cannot fill 3 shards; use at most 2*"),
    (["--fullgraph-shard=1/2", "--fullgraph-shard-costs=missing.json"],
     "*--fullgraph-shard-costs: missing.json: cannot read (No such file or directory)*"),
    # named without a shard or progress, it is still read: a path that is not there is not passed over in silence
    (["--fullgraph-shard-costs=missing.json"], "*--fullgraph-shard-costs: missing.json: cannot read (No such file*"),
])
def test_bad_shard_options_are_usage_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_malformed_costs_report_is_a_usage_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    pytester.makefile(".json", bad="{not json")
    result = pytester.runpytest("--fullgraph-shard=1/2", "--fullgraph-shard-costs=bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fullgraph-shard-costs: bad.json: not valid JSON*"])
