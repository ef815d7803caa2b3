"""The benchmarks' own logic (no timing): what a failed variant's cell says, and the exactness column."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

import pytest
import torch


@pytest.fixture(scope="module")
def generation() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "bench" / "generation.py"
    spec = importlib.util.spec_from_file_location("bench_generation", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
