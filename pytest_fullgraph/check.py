"""One check = (model, scenario, level): the decision tree that turns runs into a ``CheckResult``.

eager reference → determinism → the level's own loop run eagerly (if it has one) → compiled run → graph rule →
exact comparison → diagnosis. Everything that differs between levels is asked of the ``Level`` object; this
module never branches on which level it is.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from pytest_fullgraph import breaks
from pytest_fullgraph.compare import (
    eager_failure_blame,
    eager_logit_gap,
    first_difference,
    precision_verdict,
    static_cache_verdict,
)
from pytest_fullgraph.generation import generate, seeded
from pytest_fullgraph.levels import LoopNotCaptured
from pytest_fullgraph.results import (
    BREAK,
    ERROR,
    MISMATCH,
    NONDETERMINISTIC,
    PASS,
    SKIP,
    CheckResult,
    Mismatch,
    first_line,
)
from pytest_fullgraph.scenarios import (
    Scenario,
    generation_config,
    make_inputs,
    model_device,
    model_dtype,
    model_generation_defaults,
    needs_greedy_tokens,
    pick_eos_token,
    plain_greedy,
    resolve,
    vocab_size,
)
from pytest_fullgraph.scenarios import generate_kwargs as scenario_generate_kwargs

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

    from pytest_fullgraph.levels import Level

#: Threads used while a check runs: reductions are then reproducible run to run.
CHECK_THREADS = 1
#: How PyTorch says an op has no kernel for a dtype on this device: the combination is skipped, not failed.
_NO_KERNEL = re.compile(r"not implemented for '(BFloat16|Half|Float8\w*)'")


#: inductor settings a check runs under, by dtype, so that compiled runs can equal eager ones: inductor's own
#: random numbers differ from eager's unless ``fallback_random``. For bfloat16 and float16, bench/precision.py
#: measured what else could make inductor round as eager does; nothing did (see the README), so rounding flips
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


class CheckTimeout(BaseException):
    """Raised into a check that runs past its time limit; a ``BaseException`` so that no ``except Exception``
    on the way (the model's, transformers', dynamo's) turns it into something else."""


#: When a check's time runs out during an import, the timeout waits this long and looks again.
IMPORT_GRACE_S = 0.2


def _importing(frame: FrameType | None) -> bool:
    """Whether the interrupted code is inside an import (importlib's bootstrap frames on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``CheckTimeout`` in this thread after ``seconds`` (0: no limit), by SIGALRM.

    Only the main thread of a POSIX process can take the signal; elsewhere there is no limit. An import in
    progress is let finish first. A timer that was already armed (pytest-timeout's signal method, say) is
    re-armed afterwards with the time it had left.
    """
    if seconds <= 0 or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        if _importing(frame):  # an import stopped half way leaves a broken module behind for every later check
            signal.setitimer(signal.ITIMER_REAL, IMPORT_GRACE_S)
            return
        raise CheckTimeout(seconds)

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, expire)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = previous_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), previous_interval)


def run_check(
    model: PreTrainedModel | BaseException,
    model_name: str,
    scenario: Scenario | str,
    level: Level | str,
    backend: str,
    max_new_tokens: int,
    *,
    diagnose: bool = True,
    timeout: float = 0,
    artifacts: Path | None = None,
    artifact_runtime: str = "pt2",
) -> CheckResult:
    """Run one check; never raises for a model's or compiler's failure: that becomes the outcome.

    ``scenario`` and ``level`` are objects or built-in names. ``diagnose``: when the fullgraph compile fails,
    run the level's diagnostic pass to record every break. ``timeout``: seconds after which the check is stopped
    and recorded as an ``error`` naming the stage it was in (0: no limit). ``artifacts``: a directory where a
    passing check's level saves what it produced (``Level.save_artifact``: the export level's program).
    """
    import torch

    scenario, level = _resolve(scenario, level)
    result = CheckResult(model_name, scenario.name, level.name, backend, max_new_tokens, outcome=ERROR)
    if isinstance(model, BaseException):
        result.message = f"model {model_name!r} failed to build: {type(model).__name__}: {first_line(model)}"
        result.stage = "build"
        return result
    result.device, result.dtype = model_device(model), model_dtype(model)
    unavailable = level.unavailable_reason(result.device)
    if unavailable is not None:
        result.outcome, result.message = SKIP, f"skipped: {unavailable}"
        return result
    inputs = make_inputs(model, scenario)
    prompt_width = int(inputs["input_ids"].shape[1])
    stage = "eager generation"
    base: GenerationConfig | None = None
    config: GenerationConfig | None = None
    try:
        with time_limit(timeout), torch.no_grad(), reproducible_compute(backend, result.dtype):
            try:
                eos, settings = scenario_values(model, inputs, scenario, max_new_tokens)
                result.eos_token_id = eos
                base = generation_config(scenario, max_new_tokens, eos, settings)
                inputs.update(scenario_generate_kwargs(scenario, vocab_size(model)))
                config = level.reference_config(base)
                with model_generation_defaults(model, eos):
                    started = time.perf_counter()
                    eager = generate(model, inputs, config, scenario.seed)
                    result.timings["eager_s"] = time.perf_counter() - started
                    if not _deterministic(result, model, inputs, config, scenario.seed, eager, prompt_width):
                        return result
                    stage = f"eager generation by {level.own_loop or 'the level'}"
                    try:
                        if not _own_loop_agrees(result, level, model, inputs, config, scenario.seed, eager):
                            return result
                    except LoopNotCaptured as not_captured:
                        stage = "compiled generation"
                        _judge_compile_failure(result, not_captured.error, model, inputs, config, level,
                                               scenario.seed, diagnose)
                        return result
                    stage = "compiled generation"
                    _compile_and_compare(result, model, inputs, config, level, scenario.seed, eager, diagnose)
                    if artifacts is not None and result.outcome == PASS:
                        _save_artifact(result, level, artifacts, artifact_runtime)
            except Exception as error:  # isolate: one model's crash is that check's outcome, nothing more
                located = breaks.record_from_exception(error)
                where = f" at {located.where()}" if located.file else ""
                detail = f"{where}: {type(error).__name__}: {first_line(error)}"
                if stage.startswith("eager generation") and _NO_KERNEL.search(str(error)):
                    result.outcome, result.message = SKIP, f"{result.dtype} cannot run here{detail}"
                elif _unsupported(error):  # the loop refuses a setting by name, saying why: no verdict to give
                    result.outcome, result.message = SKIP, f"unsupported by {level.own_loop or 'the level'}: {error}"
                else:
                    result.outcome, result.message = ERROR, f"{stage} failed{detail}"
                    if (stage.startswith("eager generation") and base is not None and config is not None
                            and not _unsupported(error)):
                        with model_generation_defaults(model, result.eos_token_id):
                            result.message += eager_failure_blame(model, inputs, base, config, scenario.seed,
                                                                  by_own_loop=stage != "eager generation")
                if stage == "compiled generation":
                    result.first_break = located
    except CheckTimeout:
        forget_compiled(model)  # a compile stopped half way must not leave its caches to the next check
        if result.outcome == BREAK:  # the verdict stands; only the diagnostic pass that lists every break stopped
            result.message += f" (the pass recording every break was stopped by the {timeout:g} s timeout)"
        else:
            result.outcome, result.message = ERROR, f"timeout after {timeout:g} s, during {stage}"
    finally:
        result.stage = stage
    return result


def _save_artifact(result: CheckResult, level: Level, directory: Path, runtime: str) -> None:
    """Only a program that gave exactly eager's tokens is saved; a failure to save is noted, the verdict stands."""
    try:
        saved = level.save_artifact(directory / result.check_id, result.model, runtime)
    except Exception as error:
        result.message += f"; saving the artifact failed ({type(error).__name__}: {first_line(error)})"
        return
    result.artifact = str(saved) if saved is not None else ""


def _unsupported(error: Exception) -> bool:
    """Our loop refusing a model (``UnsupportedGeneration``) is its own diagnosis; no blame to add."""
    from pytest_fullgraph.decode import UnsupportedGeneration

    return isinstance(error, UnsupportedGeneration)


def _resolve(scenario: Scenario | str, level: Level | str) -> tuple[Scenario, Level]:
    from pytest_fullgraph.levels import builtin_levels
    from pytest_fullgraph.scenarios import SCENARIOS

    return (SCENARIOS[scenario] if isinstance(scenario, str) else scenario,
            builtin_levels()[level] if isinstance(level, str) else level)


def scenario_values(model: PreTrainedModel, inputs: dict[str, Any], scenario: Scenario,
                     max_new_tokens: int) -> tuple[int | None, dict[str, Any]]:
    """The scenario's EOS id (one the model really emits mid-generation) and its settings resolved for this
    model, from a plain greedy run of its prompts when it picks tokens."""
    prompt_width = int(inputs["input_ids"].shape[1])
    free = None
    if needs_greedy_tokens(scenario):
        with model_generation_defaults(model, None):
            free = generate(model, inputs, generation_config(plain_greedy(scenario), max_new_tokens, None),
                            scenario.seed)
    eos = pick_eos_token(free, prompt_width) if scenario.uses_eos and free is not None else None
    return eos, resolve(scenario, free, prompt_width, max_new_tokens, eos, vocab_size(model))


def _deterministic(result: CheckResult, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                   seed: int, eager: torch.Tensor, prompt_width: int) -> bool:
    """Eager generation must equal itself on a second run, or exactness cannot be judged."""
    import torch

    again = generate(model, inputs, config, seed)
    if torch.equal(eager, again):
        return True
    result.outcome = NONDETERMINISTIC
    result.mismatch = first_difference(eager, again, prompt_width)
    result.message = f"eager generation differs from itself: {result.mismatch.describe()}"
    return False


def _own_loop_agrees(result: CheckResult, level: Level, model: PreTrainedModel, inputs: dict[str, Any],
                     config: GenerationConfig, seed: int, eager: torch.Tensor) -> bool:
    """A level with a loop of its own: that loop run eagerly must equal ``generate`` before compiling it.

    A difference here is the loop's or the model's static-cache path's, never the compiler's; the message
    says which of the two.
    """
    import torch

    ours = seeded(seed, lambda: level.run_own_loop_eagerly(model, inputs, config))
    if ours is None or torch.equal(eager, ours):
        return True
    result.outcome = MISMATCH
    result.mismatch = _explained_difference(model, inputs, config, seed, eager, ours)
    result.message = (f"{level.own_loop} run eagerly differs from model.generate at "
                      f"{result.mismatch.describe(level.own_loop)}"
                      f"{static_cache_verdict(model, inputs, config, seed, eager)}")
    return False


def _explained_difference(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                          eager: torch.Tensor, other: torch.Tensor) -> Mismatch:
    """Where two runs first differ, eager's logit gap there and, for a greedy step, whether the difference
    is a rounding flip or a divergence (sampled steps depend on the random draw, which float64 cannot replay)."""
    mismatch = first_difference(eager, other, int(inputs["input_ids"].shape[1]))
    mismatch.eager_logit_gap = eager_logit_gap(model, inputs, config, seed, mismatch)
    if not config.do_sample:
        mismatch.precision = precision_verdict(model, inputs, eager, mismatch)
    elif model_dtype(model) != "float32":
        mismatch.precision_note = ("rounding is judged at greedy steps only: a sampled token depends on the whole "
                                   "distribution, not on which of two logits is ahead")
    return mismatch


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


def _compile_and_compare(result: CheckResult, model: PreTrainedModel, inputs: dict[str, Any],
                         config: GenerationConfig, level: Level, seed: int, eager: torch.Tensor,
                         diagnose: bool) -> None:
    import torch

    forget_compiled(model)
    with breaks.capture_compile_events() as trace:
        backend = breaks.counting_backend(result.backend, trace)
        started = time.perf_counter()
        try:
            with peak_cuda_memory(result):
                compiled = seeded(seed, lambda: level.run_compiled(model, inputs, config, backend))
        except breaks.compile_failure_types() as error:
            result.timings["compile_s"] = time.perf_counter() - started
            _judge_compile_failure(result, error, model, inputs, config, level, seed, diagnose)
            return
        result.timings["compile_s"] = time.perf_counter() - started
    _record_graphs(result, trace, level)
    result.cudagraph_skips = list(trace.cudagraph_skips)
    violation = level.graph_rule.judge(trace, level.name, model)
    if violation is not None:
        result.outcome, result.message = violation.outcome, violation.message
        return
    if torch.equal(eager, compiled):
        counted = f"{trace.graph_count} graph(s), " if level.graph_rule.counts_graphs else ""
        result.outcome, result.message = PASS, f"{counted}tokens equal to eager"
        if result.cudagraph_skips:
            result.message += f"; CUDA graphs skipped: {'; '.join(result.cudagraph_skips)}"
        return
    mismatch = _explained_difference(model, inputs, config, seed, eager, compiled)
    result.outcome, result.mismatch = MISMATCH, mismatch
    result.message = f"compiled tokens differ from eager at {mismatch.describe()}"


def _judge_compile_failure(result: CheckResult, error: BaseException, model: PreTrainedModel,
                           inputs: dict[str, Any], config: GenerationConfig, level: Level, seed: int,
                           diagnose: bool) -> None:
    """A graph break is ``break``, any other compile failure ``error``; located, and diagnosed when asked."""
    record = breaks.record_from_exception(error)
    result.first_break = record
    result.outcome = BREAK if breaks.is_graph_break(error) else ERROR
    result.message = record.summary()
    if diagnose:
        _diagnose(result, model, inputs, config, level, seed)
        _blame_break_for_crash(result)


def _diagnose(result: CheckResult, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
              level: Level, seed: int) -> None:
    """The level's diagnostic pass, recording every break; only failing checks pay for it."""
    forget_compiled(model)
    started = time.perf_counter()
    with breaks.capture_compile_events() as trace:
        # Breaks are found by dynamo before any backend runs: the cheapest backend finds the same ones.
        backend = breaks.counting_backend("eager", trace)
        try:
            seeded(seed, lambda: level.diagnose(model, inputs, config, backend))
        except Exception as error:  # the diagnosis is best effort; the fullgraph outcome stands
            result.message += f" (diagnostic pass failed: {type(error).__name__}: {first_line(error)})"
    result.timings["diagnose_s"] = time.perf_counter() - started
    result.breaks = trace.breaks
    _record_graphs(result, trace, level)
    forget_compiled(model)


def _blame_break_for_crash(result: CheckResult) -> None:
    """A fullgraph compile that crashed inside PyTorch where the model also breaks is reported as that break.

    Measured: mpt's forward reads the cache length with ``Tensor.item()``; without fullgraph that is a clean
    break in ``modeling_mpt.py``, with fullgraph dynamo crashes (``PendingUnbackedSymbolNotFound``) a few frames
    later. The break is the model's; the crash stays in the message.
    """
    if result.outcome != ERROR or result.first_break is None:
        return
    cause = next((record for record in result.breaks if record.root_cause), None)
    if cause is None:
        return
    crash = result.first_break
    result.outcome, result.first_break = BREAK, cause
    result.message = f"{cause.summary()} (with fullgraph=True the compiler crashed instead: {crash.summary()})"


def _record_graphs(result: CheckResult, trace: breaks.CompileTrace, level: Level) -> None:
    counted = level.graph_rule.counts_graphs
    result.graph_count = trace.graph_count if counted else None
    result.graph_ops = trace.graph_ops if counted else []
    result.recompile_reasons = trace.recompile_reasons
    result.recompiles = len(trace.recompile_reasons)
