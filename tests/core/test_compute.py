"""Measurements taken around a check's compiled run: its peak CUDA memory, read on CUDA only."""

from __future__ import annotations

import pytest

from pytest_fullgraph.core.results import CheckResult


def test_peak_memory_is_read_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement itself (the GPU run in bench/gpu.sh shows real numbers): reset before, read after."""
    import torch

    from pytest_fullgraph.core.compute import peak_cuda_memory

    calls: list[str] = []

    def read(device: str) -> int:
        calls.append(f"read {device}")
        return 1234

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append(f"reset {device}"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", read)
    on_gpu = CheckResult("m", "greedy", "while", "inductor", 4, "pass", device="cuda:0")
    with peak_cuda_memory(on_gpu):
        calls.append("run")
    assert (calls, on_gpu.peak_memory) == (["reset cuda:0", "run", "read cuda:0"], 1234)
    on_cpu = CheckResult("m", "greedy", "while", "inductor", 4, "pass", device="cpu")
    with peak_cuda_memory(on_cpu):
        pass
    assert on_cpu.peak_memory is None and len(calls) == 3
