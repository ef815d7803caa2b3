"""The benchmarks' own logic (no timing): what a failed variant's cell says, and the exactness column."""

from __future__ import annotations

import inspect
import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from tests.bench.bench_modules import bench_module


@pytest.fixture(scope="module")
def generation() -> ModuleType:
    return bench_module("generation")


@pytest.fixture(scope="module")
def builds() -> ModuleType:
    """bench/generation.py's measurements in fresh processes, and ``throughput --jobs``' two phases."""
    return bench_module("generation_builds")


def _body_with_a_branch(step: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.sum() > 0:  # a data-dependent branch inside the while body
        x = x + 1
    return step + 1, x.clone()


def test_a_failed_variant_names_the_break_inside_while_loop(generation: ModuleType) -> None:
    """dynamo's last line ("Set TORCHDYNAMO_VERBOSE=1 ...") was all a throughput cell used to say."""
    from torch._higher_order_ops import while_loop

    def loop(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return while_loop(lambda step, x: step < 2, _body_with_a_branch, (torch.zeros((), dtype=torch.long), x))

    with pytest.raises(Exception) as caught:
        torch.compile(loop, fullgraph=True, backend="eager")(torch.ones(2))
    line = generation.failure(caught.value)
    assert line.startswith("UncapturedHigherOrderOpError: This higher order operator doesn't work unless it is "
                           "captured completely with torch.compile; inside it: Data-dependent branching [GB0170] at ")
    branch = inspect.getsourcelines(_body_with_a_branch)[1] + 1
    assert f"test_bench.py:{branch} in _body_with_a_branch (user): Detected data-dependent branching" in line
    assert "TORCHDYNAMO_VERBOSE" not in line


def test_any_other_failure_is_its_type_and_first_line(generation: ModuleType) -> None:
    assert generation.failure(ValueError("first line\nsecond line")) == "ValueError: first line"


def test_the_exactness_column_names_the_variants_that_differ() -> None:
    tables = bench_module("generation_tables")
    rows = {"ours_aoti": {"tokens_digest": "a"}, "static_compiled_forward": {"tokens_digest": "a"},
            "dynamic": {"tokens_digest": "a"}}
    assert tables.exactness(rows) == "exact"
    rows["ours_aoti"] = {"tokens_digest": "b"}
    rows["static_compiled_forward"] = {"error": "RuntimeError: boom"}  # a failed variant is its own cell
    assert tables.exactness(rows) == "MISMATCH: ours_aoti"
    assert tables.exactness({"dynamic": {"error": "x"}}) == "- (generate failed)"


class _FakeRuns:
    """Stands in for the ``one`` processes: which arguments each got, and rows as ``one`` prints them."""

    def __init__(self, failing_build: tuple[str, str] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.failing_build = failing_build

    def __call__(self, args: list[str], cache: str, threads: int | None = None) -> list[dict[str, object]]:
        self.calls.append(list(args))
        variant, model, _, batches, tokens, repeats = args[:6]
        if repeats == "0" and (model, f"{batches}x{tokens}") == self.failing_build:
            return [{"error": "BackendCompilerFailed: boom"}]
        return [{"variant": variant, "model": model, "batch": int(b), "tokens": int(t), "ms_per_token": 1.0}
                for b in batches.split(",") for t in tokens.split(",")]


def test_builds_then_measures_each_variant_in_one_process_over_its_shapes(
        builds: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Compiles in parallel, timings alone: a build per cell, then one measuring process per (variant, model)."""
    runs = _FakeRuns()
    monkeypatch.setattr(builds, "rows_in_subprocess", runs)
    setup = builds.Setup("float32", "tiny", 1, False)
    cells = list(itertools.product(["ours_aoti", "dynamic"], ["llama"], [1, 8], [64, 256]))
    builds.build_all(cells, tmp_path, setup, jobs=4)
    assert [call[5] for call in runs.calls] == ["0"] * 8
    runs.calls.clear()
    measured = builds.measure_built(cells, tmp_path, setup)
    assert [call[:6] for call in runs.calls] == [["dynamic", "llama", "inductor", "1,8", "64,256", "5"],
                                                 ["ours_aoti", "llama", "inductor", "1,8", "64,256", "5"]]
    assert measured["ours_aoti", "llama", 8, 256]["batch"] == 8
    assert measured["ours_aoti", "llama", 8, 256]["tokens"] == 256
    assert len((tmp_path / "measured.jsonl").read_text().splitlines()) == 8


def test_a_cell_that_failed_to_build_keeps_its_error_and_is_not_measured(
        builds: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runs = _FakeRuns(failing_build=("llama", "8x256"))
    monkeypatch.setattr(builds, "rows_in_subprocess", runs)
    setup = builds.Setup("float32", "tiny", 1, False)
    cells = list(itertools.product(["ours_aoti"], ["llama"], [1, 8], [64, 256]))
    builds.build_all(cells, tmp_path, setup, jobs=2)
    runs.calls.clear()
    measured = builds.measure_built(cells, tmp_path, setup)
    assert measured["ours_aoti", "llama", 8, 256] == {"error": "BackendCompilerFailed: boom"}
    assert sorted(call[3:5] for call in runs.calls) == [["1", "256"], ["1", "64"], ["8", "64"]]


def test_measuring_without_a_build_says_so(builds: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setattr(builds, "rows_in_subprocess", _FakeRuns())
    measured = builds.measure_built([("dynamic", "llama", 1, 64)], tmp_path, builds.Setup("float32", "tiny", 1, False))
    assert measured == {("dynamic", "llama", 1, 64): {"error": f"not built in {tmp_path}"}}


def test_the_release_table_takes_its_models_out_of_a_larger_report(tmp_path: Path) -> None:
    from pytest_fullgraph import CheckResult
    from pytest_fullgraph.report import Report, load, write

    checks = [CheckResult(model, "greedy", "decode", "aot_eager", 4, "pass") for model in ("llama", "opt", "gpt2")]
    write(Report({"torch": "2.13.0"}, checks), tmp_path / "all")
    bench_module("releases").extract(tmp_path / "all" / "fullgraph-report.json", tmp_path / "two", ("llama", "gpt2"))
    extracted = load(tmp_path / "two" / "fullgraph-report.json")
    assert sorted(result.model for result in extracted.checks) == ["gpt2", "llama"]
    assert extracted.environment["extracted_from"].endswith("fullgraph-report.json")


@pytest.mark.parametrize(("argv", "named"), [
    (["--models", "whisper,blendrbot"], "unknown model 'blendrbot' (did you mean blenderbot"),
    (["--models", "whisper", "--scenarios", "asisted"], "unknown scenario 'asisted' (did you mean assisted"),
])
def test_the_modes_survey_refuses_a_bad_selection_in_one_line_before_any_model_runs(
        argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--models`` and ``--scenarios`` take the plugin's selections (comma lists, globs): a comma list was once one
    unknown name per scenario, each a crash row."""
    modes = bench_module("modes")
    monkeypatch.setattr(sys, "argv", ["modes.py", *argv])
    monkeypatch.setattr(modes, "survey", lambda *_: pytest.fail("a model ran"))
    with pytest.raises(SystemExit) as exited:
        modes.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and named in err, err


def test_replace_swaps_a_reruns_checks_in_by_id_and_records_them_per_model_with_their_old_outcomes() -> None:
    from pytest_fullgraph import report
    from pytest_fullgraph.core.results import CheckResult

    replace = bench_module("replace")
    old = [CheckResult(model, "greedy", "hf_executorch", "aot_eager", 4, "error") for model in ("a", "b")]
    target = report.Report({"replaced_checks": [{"by": "earlier", "count": 1, "model": "a"}]}, old)
    rerun = report.Report({}, [CheckResult("b", "greedy", "hf_executorch", "aot_eager", 4, "pass")])
    assert replace.replace(target, rerun, "pytest ... (abc1234: why)") == {"b": 1}
    assert [result.outcome for result in target.checks] == ["error", "pass"]
    b_was = {"by": "pytest ... (abc1234: why)", "count": 1, "model": "b", "was": {old[1].check_id: "error"}}
    assert target.environment["replaced_checks"][-1] == b_was
    again = report.Report({}, [CheckResult("a", "greedy", "hf_executorch", "aot_eager", 4, "pass")])
    replace.replace(target, again, "later")  # replaces a's only check: a's earlier rerun has nothing left
    assert target.environment["replaced_checks"] == [b_was, {"by": "later", "count": 1, "model": "a",
                                                             "was": {old[0].check_id: "error"}}]
    stray = report.Report({}, [CheckResult("z", "greedy", "hf_executorch", "aot_eager", 4, "pass")])
    with pytest.raises(report.ReportError, match="the rerun holds checks the report does not: "):
        replace.replace(target, stray, "x")


def test_rejudge_turns_a_crash_away_from_the_break_into_torchs_error() -> None:
    from pytest_fullgraph.core.results import BreakRecord, CheckResult

    rejudge = bench_module("rejudge")
    cause = BreakRecord("torch._dynamo.exc.Unsupported", "Data dependent operator", "GB0033", "m",
                        "transformers/models/mvp/modeling_mvp.py", 80, "forward", "x", "model")
    message = (f"{cause.summary()} (with fullgraph=True the compiler crashed instead: InternalTorchDynamoError at "
               "pytest_fullgraph/loop/decode.py:319 in fullgraph_generate (loop): PendingUnbackedSymbolNotFound: u0)")
    result = CheckResult("mvp", "greedy", "decode", "aot_eager", 4, "break", message, first_break=cause,
                         breaks=[cause])
    assert rejudge.rejudge(result)
    assert result.outcome == "error" and result.first_break is not None
    assert (result.first_break.where(), result.first_break.origin) == ("pytest_fullgraph/loop/decode.py:319", "torch")
    assert result.message == ("InternalTorchDynamoError at pytest_fullgraph/loop/decode.py:319 in fullgraph_generate "
                              "(torch): PendingUnbackedSymbolNotFound: u0 (also breaks at "
                              "transformers/models/mvp/modeling_mvp.py:80: Data dependent operator (model))")
    assert not rejudge.rejudge(result)  # once judged, nothing more to do


def test_code_reach_decides_each_distinctive_path_from_the_config_and_the_sequence() -> None:
    """bench/code_reach.py: a sliding window of 16 never slides over 8 + 4 tokens and does over past_window's 20 + 4,
    an indexer keeping 8 selects, two experts per token are several, a recurrent scan's chunk is crossed by a longer
    prompt only; a config without the attribute has no such path."""
    from types import SimpleNamespace

    code_reach = bench_module("code_reach")
    text = SimpleNamespace(sliding_window=16, index_topk=8, num_experts_per_tok=2, chunk_size=16, use_cache=True)
    config = SimpleNamespace(get_text_config=lambda: text)
    found = {path["path"]: path["reached"] for path in code_reach.paths_of(config, 8, 12)}
    assert found == {"sliding window slides": False, "sparse indexer selects": True,
                     "several experts per token": True, "recurrent scan crosses a chunk": False}
    past = {path["path"]: path["reached"] for path in code_reach.paths_of(config, 20, 24)}
    assert past["sliding window slides"] and past["recurrent scan crosses a chunk"]
    assert not code_reach.paths_of(config, 8, 16)[0]["reached"]  # a window of 16 holds 16 tokens
    row = {"model": "m", "run": 3, "forward_path": 4, "failures": [], "paths": code_reach.paths_of(config, 8, 12)[:1]}
    assert code_reach.table({"rows": [row]})[-1] == "| m | 3 / 4 (75%) | ❌ sliding window slides (sliding_window=16) |"


def test_code_reach_reads_each_scenario_with_the_config_it_builds_its_model_with() -> None:
    """A scan in chunks of 256 is crossed by no scenario on the plain config; past_window builds the model with
    chunks of 16 (its config variant), whose 20-token prompt crosses one: reached, with both values in the row."""
    from types import SimpleNamespace

    code_reach = bench_module("code_reach")

    def config(chunk: int) -> Any:
        text = SimpleNamespace(chunk_size=chunk)
        return SimpleNamespace(get_text_config=lambda: text, model_type="mamba2")

    configs = {"": config(256), "short_chunks": config(16)}
    assert not code_reach.scenario_paths(configs, ["greedy", "padded"], 4)[0]["reached"]
    [path] = code_reach.scenario_paths(configs, ["greedy", "past_window"], 4)
    assert path["reached"] and path["value"] == 256
    row = {"model": "m", "run": 3, "forward_path": 4, "failures": [], "paths": [path]}
    assert code_reach.table({"rows": [row]})[-1] == ("| m | 3 / 4 (75%) | ✅ recurrent scan crosses a chunk "
                                                     "(chunk_size=256; 16 in past_window) |")


def test_code_reach_summary_counts_each_path_over_the_models_that_have_it() -> None:
    """The figures above the table: lines over the models that built (a model that failed to build is not one), and
    per path the models that reach it, naming those that do not."""
    code_reach = bench_module("code_reach")

    def row(model: str, run: int, reached: bool) -> dict[str, Any]:
        return {"model": model, "run": run, "forward_path": 10, "failures": [],
                "paths": [{"path": "sliding window slides", "attribute": "sliding_window", "value": 16,
                           "reached": reached}]}

    rows = [row("a", 5, True), row("b", 7, False), row("c", 9, True), {"model": "d", "error": "build: E"}]
    assert code_reach.summary({"rows": rows}) == [
        "Over the 3 models that build: 21 of 30 forward-path lines run (70%; the median model, b, 70%).",
        "- sliding window slides: 2 of 3 models; not b"]
