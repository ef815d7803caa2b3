"""The compiled phase of a check: the level's run under ``fullgraph=True``, its graph rule, the exact comparison with
eager's tokens and, when the compile fails, the diagnosis that records every break. ``run`` reaches it last.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.check.compare import reference_against_recompute
from pytest_fullgraph.check.state import CheckRun, explained_difference
from pytest_fullgraph.check.variations import try_variations
from pytest_fullgraph.core import breaks, compile_events
from pytest_fullgraph.core.compute import forget_compiled, peak_cuda_memory
from pytest_fullgraph.core.generation import seeded
from pytest_fullgraph.core.guards import frame_at, guard_from_reason
from pytest_fullgraph.core.messages import first_line
from pytest_fullgraph.core.outcomes import BREAK, ERROR, MISMATCH, PASS
from pytest_fullgraph.core.results import BreakRecord

if TYPE_CHECKING:
    import torch

    from pytest_fullgraph.core.results import CheckResult
    from pytest_fullgraph.levels.base import Level


def compile_and_compare(run: CheckRun, eager: torch.Tensor) -> None:
    """The level's compiled run, judged: its graph rule, then its tokens against eager's."""
    import torch

    result, level, config = run.result, run.level, run.reference
    forget_compiled(run.model)
    def compiled_run(backend: Any) -> torch.Tensor:
        return seeded(run.seed, lambda: level.run_compiled(run.model, run.inputs, config, backend))

    with compile_events.capture_compile_events() as trace:
        backend = compile_events.counting_backend(result.backend, trace)
        started = time.perf_counter()
        try:
            with peak_cuda_memory(result):
                compiled = compiled_run(backend)
        except breaks.compile_failure_types() as error:
            result.timings["compile_s"] = time.perf_counter() - started
            if breaks.hit_recompile_limit(error):
                _judge_recompile_limit(result, trace.recompile_reasons, trace.recompile_frames)
                return
            _judge_compile_failure(run, error)
            return
        result.timings["compile_s"] = time.perf_counter() - started
    _record_graphs(result, trace, level)
    result.cudagraph_skips = list(trace.cudagraph_skips)
    mode = run.reference.get_generation_mode(run.inputs.get("assistant_model")).value  # a draft: assisted
    violation = level.graph_rule.judge(trace, level.name, run.model, str(mode), run.reference,
                                       lambda: compiled_run(result.backend))
    if violation is not None:
        result.outcome, result.message = violation.outcome, violation.message
        result.first_break = violation.where or result.first_break
        return
    own = seeded(run.seed, lambda: level.judge_run(run.model, run.inputs, config, eager, compiled))
    if own is not None:
        result.outcome, result.message, result.mismatch = own.outcome, own.message, own.mismatch
        return
    if torch.equal(eager, compiled):
        counted = f"{trace.graph_count} graph(s), " if level.graph_rule.counts_graphs else ""
        result.outcome, result.message = PASS, f"{counted}tokens equal to eager"
        if result.cudagraph_skips:
            result.message += f"; CUDA graphs skipped: {'; '.join(result.cudagraph_skips)}"
        if run.second_requests:
            try_variations(run, eager, backend)
        return
    result.outcome, result.mismatch = MISMATCH, explained_difference(run, eager, compiled)
    cause = seeded(run.seed, lambda: level.mismatch_cause(run.model, run.inputs, config, eager))
    cause += reference_against_recompute(run.model, run.inputs, config, run.seed, eager)
    result.message = f"compiled tokens differ from eager at {result.mismatch.describe()}{cause}"


def _judge_compile_failure(run: CheckRun, error: BaseException) -> None:
    """A graph break is ``break``, any other compile failure ``error``; located, and diagnosed when asked."""
    result = run.result
    record = breaks.record_from_exception(error)
    result.first_break = record
    result.outcome = BREAK if breaks.is_graph_break(error) else ERROR
    result.message = record.summary()
    if run.diagnose:
        _diagnose(run)
        _blame_break_for_crash(result)


def _judge_recompile_limit(result: CheckResult, reasons: list[str],
                           frames: list[tuple[str, int, str] | None]) -> None:
    """Dynamo's recompile limit hit under ``fullgraph=True``: a failure, located at the last guard that failed (the
    value the compiled code kept being specialized on), not at the call dynamo gave up in."""
    from torch._dynamo import config

    result.recompile_reasons, result.recompiles = reasons, len(reasons)
    frame = frames[-1] if frames else None
    guard = guard_from_reason(reasons[-1], frame_at(*frame) if frame else None) if reasons else None
    last = f"; the last guard that failed: {guard.summary()}" if guard is not None else ""
    result.outcome = ERROR
    result.message = (f"dynamo's recompile limit (torch._dynamo.config.recompile_limit={config.recompile_limit}) was "
                      f"hit with fullgraph=True after {len(reasons)} recompile(s){last}")
    result.first_break = BreakRecord("torch._dynamo.exc.FailOnRecompileLimitHit", "FailOnRecompileLimitHit", None,
                                     result.message, *((guard.file, guard.line, guard.function, guard.source,
                                                        guard.origin) if guard else ("", 0, "", "", "torch")))


def _diagnose(run: CheckRun) -> None:
    """The level's diagnostic pass, recording every break; only failing checks pay for it."""
    result, level, config = run.result, run.level, run.reference
    forget_compiled(run.model)
    started = time.perf_counter()
    with compile_events.capture_compile_events() as trace:
        # Breaks are found by dynamo before any backend runs: the cheapest backend finds the same ones.
        backend = compile_events.counting_backend("eager", trace)
        try:
            seeded(run.seed, lambda: level.diagnose(run.model, run.inputs, config, backend))
        except Exception as error:  # the diagnosis is best effort; the fullgraph outcome stands
            result.message += f" (diagnostic pass failed: {type(error).__name__}: {first_line(error)})"
    result.timings["diagnose_s"] = time.perf_counter() - started
    result.breaks = trace.breaks
    _record_graphs(result, trace, level)
    forget_compiled(run.model)


def _blame_break_for_crash(result: CheckResult) -> None:
    """A fullgraph compile that crashed inside PyTorch where the model also breaks: the break is the verdict only
    when the crash is at the break (``breaks.crashed_at_break``), else the crash stays PyTorch's error, naming the
    break. Measured: mpt's ``Tensor.item()`` breaks in ``modeling_mpt.py`` without fullgraph; with it dynamo
    crashes (``PendingUnbackedSymbolNotFound``) while tracing the loop's call of the model, not at the item call.
    """
    cause = next((record for record in result.breaks if record.root_cause), None)
    if result.outcome != ERROR or result.first_break is None or cause is None:
        return
    crash = result.first_break
    if not breaks.crashed_at_break(crash, cause):
        result.message += f" (also breaks at {cause.where()}: {cause.gb_type} ({cause.origin}))"
        return
    result.outcome, result.first_break = BREAK, cause
    result.message = f"{cause.summary()} (with fullgraph=True the compiler crashed instead: {crash.summary()})"


def _record_graphs(result: CheckResult, trace: compile_events.CompileTrace, level: Level) -> None:
    counted = level.graph_rule.counts_graphs
    result.graph_count, result.graph_ops = (trace.graph_count, trace.graph_ops) if counted else (None, [])
    result.recompile_reasons, result.recompiles = trace.recompile_reasons, len(trace.recompile_reasons)
