"""The benchmarks' own logic (no timing): what a failed variant's cell says, and the exactness column."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest
import torch


def _bench_module(name: str) -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generation() -> ModuleType:
    return _bench_module("generation")


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


def test_the_exactness_column_names_the_variants_that_differ(generation: ModuleType) -> None:
    rows = {"ours_aoti": {"tokens_digest": "a"}, "static_compiled_forward": {"tokens_digest": "a"},
            "dynamic": {"tokens_digest": "a"}}
    assert generation._exactness(rows) == "exact"
    rows["ours_aoti"] = {"tokens_digest": "b"}
    rows["static_compiled_forward"] = {"error": "RuntimeError: boom"}  # a failed variant is its own cell
    assert generation._exactness(rows) == "MISMATCH: ours_aoti"
    assert generation._exactness({"dynamic": {"error": "x"}}) == "- (generate failed)"


def test_the_release_table_takes_its_models_out_of_a_larger_report(tmp_path: Path) -> None:
    from pytest_fullgraph import CheckResult
    from pytest_fullgraph.report import Report, load, write

    checks = [CheckResult(model, "greedy", "decode", "aot_eager", 4, "pass") for model in ("llama", "opt", "gpt2")]
    write(Report({"torch": "2.13.0"}, checks), tmp_path / "all")
    _bench_module("releases").extract(tmp_path / "all" / "fullgraph-report.json", tmp_path / "two", ("llama", "gpt2"))
    extracted = load(tmp_path / "two" / "fullgraph-report.json")
    assert sorted(result.model for result in extracted.checks) == ["gpt2", "llama"]
    assert extracted.environment["extracted_from"].endswith("fullgraph-report.json")
