"""The CUDA-graphs levels (``mode="reduce-overhead"``): skips with a reason off CUDA, inductor's skip reasons
recorded with the check, the device a run used kept apart in merges and collated groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_fullgraph import build_tiny, report
from pytest_fullgraph.check.run import run_check
from pytest_fullgraph.core import compile_events
from pytest_fullgraph.core.results import PASS, SKIP, CheckResult
from pytest_fullgraph.levels.builtin import CudagraphsLevel, CudagraphsWhileLevel, builtin_levels
from pytest_fullgraph.publish.collate import group_name
from pytest_fullgraph.report.merge import merge
from pytest_fullgraph.report.render import markdown
from pytest_fullgraph.report.schema import ReportError
from pytest_fullgraph.report.terminal import terminal_lines
from tests.conftest import checks_by_id, read_report


@pytest.mark.parametrize("level", [CudagraphsLevel(), CudagraphsWhileLevel()])
def test_a_cudagraphs_check_on_the_cpu_is_a_skip_that_says_what_it_needs(level: CudagraphsLevel) -> None:
    result = run_check(build_tiny("llama"), "llama", "greedy", level, "inductor", 4)
    assert result.outcome == SKIP
    assert result.message == (f"skipped: level {level.name!r} needs a cuda device; this check ran on cpu "
                              "(run with --fullgraph-device=cuda)")
    assert result.timings == {}  # nothing generated, nothing compiled


def test_the_cudagraphs_levels_are_slow_tier_only() -> None:
    levels = builtin_levels()
    assert all(levels[name].slow_only for name in ("cudagraphs", "cudagraphs_while"))
    assert levels["cudagraphs"].unavailable_reason("cuda:1") is None
    assert levels["decode"].unavailable_reason("cpu") is None


def test_inductor_cudagraph_skip_reasons_are_captured_in_order_once_each() -> None:
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    with compile_events.capture_compile_events() as trace:
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1 instances)")
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to cpu device (arg0_1)")
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1 instances)")
    log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to something after the block")
    assert trace.cudagraph_skips == ["skipping cudagraphs due to mutated inputs (1 instances)",
                                     "skipping cudagraphs due to cpu device (arg0_1)"]


def test_a_counting_backend_in_a_mode_compiles_with_inductor_and_counts() -> None:
    with compile_events.capture_compile_events() as trace:
        backend = compile_events.counting_backend("aot_eager", trace).with_mode("reduce-overhead")
        compiled = torch.compile(lambda x: (x * 2).sin(), backend=backend, fullgraph=True)
        assert torch.equal(compiled(torch.ones(3)), (torch.ones(3) * 2).sin())
    assert (backend.name, backend.mode, trace.graph_count) == ("inductor", "reduce-overhead", 1)


def _skipped_check(model: str) -> CheckResult:
    return CheckResult(model, "greedy", "cudagraphs", "inductor", 16, PASS, "1 graph(s), tokens equal to eager",
                       device="cuda:0", cudagraph_skips=["skipping cudagraphs due to mutated inputs (2 instances)"])


def test_cudagraph_skips_are_in_the_markdown_the_terminal_and_the_json(tmp_path: Path) -> None:
    checks = [_skipped_check("llama"), _skipped_check("gemma"),
              CheckResult("gemma", "greedy", "decode", "inductor", 16, PASS, device="cuda:0")]
    written = report.Report({"device": "cuda:0", "run_slow": True}, checks)
    report.write(written, tmp_path)
    page = markdown(written)
    assert "## CUDA graphs skipped" in page
    assert ("| skipping cudagraphs due to mutated inputs (2 instances) | `gemma-greedy-cudagraphs-float32`, "
            "`llama-greedy-cudagraphs-float32` |") in page
    assert "CUDA graphs skipped in 2 check(s): skipping cudagraphs due to mutated inputs (2 instances)" in \
        terminal_lines(written)
    loaded = report.load(tmp_path / report.JSON_NAME)
    skips = {check.check_id: check.cudagraph_skips for check in loaded.checks}
    assert skips == {"llama-greedy-cudagraphs-float32": ["skipping cudagraphs due to mutated inputs (2 instances)"],
                     "gemma-greedy-cudagraphs-float32": ["skipping cudagraphs due to mutated inputs (2 instances)"],
                     "gemma-greedy-decode-float32": []}
    assert "CUDA graphs skipped" not in markdown(report.Report({}, checks[2:]))


def test_reports_of_different_devices_do_not_merge_and_old_reports_ran_on_the_cpu() -> None:
    environment = {"torch": "2.13.0", "transformers": "5.24.0", "backend": "inductor", "max_new_tokens": 16,
                   "run_slow": True, "strict": False, "breaks": "all"}
    old = report.Report(environment, [CheckResult("llama", "greedy", "decode", "inductor", 16, PASS)])
    cpu = report.Report({**environment, "device": "cpu"}, [CheckResult("gemma", "greedy", "decode", "inductor", 16,
                                                                        PASS)])
    cuda = report.Report({**environment, "device": "cuda:0"}, [])
    assert len(merge([("old", old), ("cpu", cpu)]).checks) == 2
    with pytest.raises(ReportError, match=r"cuda: device is 'cuda:0' but an earlier report has 'cpu'"):
        merge([("old", old), ("cuda", cuda)])


def test_a_gpu_run_is_its_own_collated_group() -> None:
    assert group_name(report.Report({"run_slow": True, "torch": "2.15.0+cu128", "device": "cuda:0"})) == \
        "slow-cuda-torch2.15.0"
    assert group_name(report.Report({"run_slow": True, "torch": "2.15.0", "device": "cpu"})) == "slow-torch2.15.0"


def test_the_slow_tier_on_the_cpu_skips_the_cudagraphs_checks_with_their_reason(toy_project: pytest.Pytester,
                                                                                 tmp_path: Path) -> None:
    result = toy_project.runpytest("--run-slow", "--fullgraph-models=llama", "--fullgraph-suite=on", "-k",
                                   "greedy-cudagraphs", f"--fullgraph-report={tmp_path}", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs a cuda device; this check ran on cpu (run with --fullgraph-device=cuda)*"])
    checks = checks_by_id(read_report(tmp_path))
    assert {check_id: check["outcome"] for check_id, check in checks.items()} == {
        "llama-greedy-cudagraphs": "skip", "llama-greedy-cudagraphs_while": "skip"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs (mode='reduce-overhead') need a GPU")
@pytest.mark.parametrize("level", [CudagraphsLevel(), CudagraphsWhileLevel()])
def test_a_cudagraphs_check_on_cuda_gives_eager_tokens(level: CudagraphsLevel) -> None:
    model: Any = build_tiny("llama")
    model.to("cuda")
    result = run_check(model, "llama", "greedy", level, "inductor", 8)
    assert result.device.startswith("cuda")
    assert result.outcome == PASS, result.message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="--fullgraph-device=cuda needs a GPU")
def test_the_slow_tier_on_cuda_runs_the_cudagraphs_checks_there(toy_project: pytest.Pytester,
                                                                 tmp_path: Path) -> None:
    result = toy_project.runpytest("--run-slow", "--fullgraph-models=llama", "--fullgraph-suite=on",
                                   "--fullgraph-device=cuda", "-k", "greedy-cudagraphs",
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=2)
    written = read_report(tmp_path)
    assert written["environment"]["device"] == "cuda"
    assert {check["device"] for check in written["checks"]} == {"cuda:0"}
