"""The conditions every run of a check happens under, so that seeded runs can be compared token for token:
pinned threads, inductor's exactness settings, no compiled state left from an earlier check, and (on CUDA) the
peak memory of the compiled run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_fullgraph.core.results import CheckResult

#: Threads used while a check runs: reductions are then reproducible run to run.
CHECK_THREADS = 1

#: inductor settings a check runs under, by dtype, so that compiled runs can equal eager ones: inductor's own
#: random numbers differ from eager's unless ``fallback_random``. For bfloat16 and float16, bench/precision.py
#: measured what else could make inductor round as eager does; nothing did (see docs), so rounding flips
#: remain and the diagnosis classifies them.
EXACTNESS_SETTINGS: dict[str, dict[str, Any]] = {
    "float32": {"fallback_random": True},
    "bfloat16": {"fallback_random": True},
    "float16": {"fallback_random": True},
}


def exactness_settings(backend: str, dtype: str) -> dict[str, Any]:
    """The ``torch._inductor.config`` values a check of this backend and dtype runs under (none off inductor)."""
    return dict(EXACTNESS_SETTINGS.get(dtype, EXACTNESS_SETTINGS["float32"])) if backend == "inductor" else {}


@contextlib.contextmanager
def reproducible_compute(backend: str, dtype: str = "float32") -> Iterator[None]:
    """Pin threads, and apply the backend's exactness settings, so seeded runs are comparable."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(CHECK_THREADS)
    try:
        settings = exactness_settings(backend, dtype)
        if settings:
            import torch._inductor.config as inductor_config

            with inductor_config.patch(settings):
                yield
        else:
            yield
    finally:
        torch.set_num_threads(threads)


def forget_compiled(model: Any) -> None:
    """Start each compiled run from scratch: no dynamo cache or transformers-held compiled forward."""
    import torch

    torch._dynamo.reset()
    for attribute in ("_compiled_call", "_last_compile_config"):
        if attribute in vars(model):
            delattr(model, attribute)


@contextlib.contextmanager
def peak_cuda_memory(result: CheckResult) -> Iterator[None]:
    """Record in ``result.peak_memory`` the most CUDA memory held at once while the block runs (the model's
    weights included: what the device must have free for this check); nothing off CUDA."""
    import torch

    if not result.device.startswith("cuda"):
        yield
        return
    torch.cuda.reset_peak_memory_stats(result.device)
    try:
        yield
    finally:
        result.peak_memory = int(torch.cuda.max_memory_allocated(result.device))
