"""One check = (model, scenario, level): the decision tree that turns runs into a ``CheckResult``.

Its phases, each of which may end the check with a verdict: eager reference → its determinism → the level's own
loop run eagerly (if it has one) → compiled run → graph rule → exact comparison → diagnosis. Everything that
differs between levels is asked of the ``Level`` object; this module never branches on which level it is. The
compiled phase and what follows it are ``compiled``; what the phases share, ``state``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_fullgraph.check.compare import eager_failure_blame, first_difference
from pytest_fullgraph.check.compiled import compile_and_compare
from pytest_fullgraph.check.inputs import generate_kwargs as scenario_generate_kwargs
from pytest_fullgraph.check.inputs import generation_config, make_inputs, model_generation_defaults, scenario_values
from pytest_fullgraph.check.own_loop import own_loop_difference, own_loop_eagerly
from pytest_fullgraph.check.scenarios import SCENARIOS, Scenario
from pytest_fullgraph.check.state import CheckRun
from pytest_fullgraph.core import breaks
from pytest_fullgraph.core.compute import forget_compiled, reproducible_compute
from pytest_fullgraph.core.generation import GENERATE_REFUSES, UnsupportedGeneration, generate
from pytest_fullgraph.core.messages import first_line, summary
from pytest_fullgraph.core.model_facts import model_device, model_dtype
from pytest_fullgraph.core.outcomes import BREAK, ERROR, MISMATCH, NONDETERMINISTIC, PASS, SKIP, Stage
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.core.timer import CheckTimeout, time_limit
from pytest_fullgraph.levels.builtin import builtin_levels

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from pytest_fullgraph.levels.base import Level

#: How PyTorch says an op has no kernel for a dtype on this device: the combination is skipped, not failed.
_NO_KERNEL = re.compile(r"not implemented for '(BFloat16|Half|Float8\w*)'")


def run_check(
    model: PreTrainedModel,
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
    recompiles: bool = True,
) -> CheckResult:
    """Run one check; never raises for a model's or compiler's failure: that becomes the outcome.

    ``scenario`` and ``level`` are objects or built-in names. ``diagnose``: when the fullgraph compile fails,
    run the level's diagnostic pass to record every break. ``timeout``: seconds after which the check is stopped
    and recorded as an ``error`` naming the stage it was in (0: no limit). ``artifacts``: a directory where a
    passing check's level saves what it produced (``Level.save_artifact``: the export level's program).
    ``recompiles``: a pass calls its compiled object again with the level's variations (``check.variations``).
    """
    import torch

    scenario, level = _resolve(scenario, level)
    result = CheckResult(model_name, scenario.name, level.name, backend, max_new_tokens, outcome=ERROR,
                         device=model_device(model), dtype=model_dtype(model))
    unavailable = level.unavailable_reason(result.device)
    if unavailable is not None:
        result.outcome, result.message = SKIP, f"skipped: {unavailable}"
        return result
    run = CheckRun(result, model, scenario, level, make_inputs(model, scenario), diagnose, recompiles)
    try:
        with time_limit(timeout), torch.no_grad(), reproducible_compute(backend, result.dtype):
            try:
                _run_phases(run, max_new_tokens)
            except Exception as error:  # isolate: one model's crash is that check's outcome, nothing more
                _judge_exception(run, error)
            if artifacts is not None and result.outcome == PASS:
                _save_artifact(result, level, artifacts, artifact_runtime)
    except CheckTimeout:
        _judge_timeout(run, timeout)
    finally:
        result.stage = run.stage.label(level.own_loop)
    return result


def failed_build(model_name: str, scenario: str, level: str, backend: str, max_new_tokens: int, dtype: str,
                 error: BaseException) -> CheckResult:
    """The result of a check whose model did not build: an error of the ``build`` stage, with the cause."""
    return CheckResult(model_name, scenario, level, backend, max_new_tokens, ERROR,
                       f"model {model_name!r} failed to build: {type(error).__name__}: {first_line(error)}",
                       dtype=dtype, stage=Stage.BUILD.label())


def _run_phases(run: CheckRun, max_new_tokens: int) -> None:
    """The phases in order; each returns False once it has given the check its verdict."""
    eos, settings = scenario_values(run.model, run.inputs, run.scenario, max_new_tokens)
    run.result.eos_token_id = eos
    run.base = generation_config(run.scenario, max_new_tokens, eos, settings)
    run.inputs.update(scenario_generate_kwargs(run.scenario, run.model))
    run.config = run.level.reference_config(run.base)
    with model_generation_defaults(run.model, eos):
        started = time.perf_counter()
        eager = generate(run.model, run.inputs, run.config, run.seed)
        run.result.timings["eager_s"] = time.perf_counter() - started
        if not _deterministic(run, eager):
            return
        run.stage = Stage.OWN_LOOP
        if not _own_loop_agrees(run, eager):
            return
        run.stage = Stage.COMPILED
        compile_and_compare(run, eager)


def _judge_exception(run: CheckRun, error: Exception) -> None:
    """An exception out of a phase: a skip when the dtype has no kernel here, or transformers or our loop refuses
    the setting by name; otherwise an error of the phase, blamed (for an eager failure) on whichever path fails
    alone."""
    result = run.result
    located = breaks.record_from_exception(error)
    where = f" at {breaks.error_site(located)}" if located.file else ""
    detail = f"{where}: {type(error).__name__}: {summary(error)}"
    eager = run.stage in (Stage.EAGER, Stage.OWN_LOOP)
    if eager and _NO_KERNEL.search(str(error)):
        result.outcome, result.message = SKIP, f"{result.dtype} cannot run here{detail}"
    elif run.stage is Stage.EAGER and GENERATE_REFUSES.search(str(error)):
        result.outcome, result.message = SKIP, f"transformers' generate refuses this mode for this model{detail}"
    elif isinstance(error, UnsupportedGeneration):  # the loop refuses a setting by name: its own diagnosis
        result.outcome, result.message = SKIP, f"unsupported by {run.level.own_loop or 'the level'}: {error}"
    else:
        result.outcome, result.message = ERROR, f"{run.stage.label(run.level.own_loop)} failed{detail}"
        if eager and run.base is not None and run.config is not None:
            with model_generation_defaults(run.model, result.eos_token_id):
                result.message += eager_failure_blame(run.model, run.inputs, run.base, run.config, run.seed,
                                                      by_own_loop=run.stage is Stage.OWN_LOOP,
                                                      loop=run.level.own_loop_blame)
    if run.stage is Stage.COMPILED:
        result.first_break = located


def _judge_timeout(run: CheckRun, timeout: float) -> None:
    forget_compiled(run.model)  # a compile stopped half way must not leave its caches to the next check
    result = run.result
    if result.outcome == BREAK:  # the verdict stands; only the diagnostic pass that lists every break stopped
        result.message += f" (the pass recording every break was stopped by the {timeout:g} s timeout)"
    else:
        result.outcome = ERROR
        result.message = f"timeout after {timeout:g} s, during {run.stage.label(run.level.own_loop)}"


def _save_artifact(result: CheckResult, level: Level, directory: Path, runtime: str) -> None:
    """Only a program that gave exactly eager's tokens is saved; a failure to save is noted, the verdict stands."""
    try:
        saved = level.save_artifact(directory / result.check_id, result.model, runtime)
    except Exception as error:
        result.message += f"; saving the artifact failed ({type(error).__name__}: {first_line(error)})"
        return
    result.artifact = str(saved) if saved is not None else ""


def _resolve(scenario: Scenario | str, level: Level | str) -> tuple[Scenario, Level]:
    return (SCENARIOS[scenario] if isinstance(scenario, str) else scenario,
            builtin_levels()[level] if isinstance(level, str) else level)


def _deterministic(run: CheckRun, eager: torch.Tensor) -> bool:
    """Eager generation must equal itself on a second run, or exactness cannot be judged."""
    import torch

    again = generate(run.model, run.inputs, run.reference, run.seed)
    if torch.equal(eager, again):
        return True
    result = run.result
    result.outcome, result.mismatch = NONDETERMINISTIC, first_difference(eager, again, run.prompt_width)
    result.message = f"eager generation differs from itself: {result.mismatch.describe()}"
    return False


def _own_loop_agrees(run: CheckRun, eager: torch.Tensor) -> bool:
    """A level with a loop of its own: that loop run eagerly must equal ``generate`` before compiling it.

    A difference here is the loop's or the model's static-cache path's, never the compiler's; the message
    says which of the two.
    """
    ours = own_loop_eagerly(run)
    difference = None if ours is None else own_loop_difference(run, eager, ours)
    if difference is None:
        return True
    result = run.result
    result.outcome, (result.mismatch, verdict) = MISMATCH, difference
    where = result.mismatch.describe(run.level.own_loop)
    result.message = f"{run.level.own_loop} run eagerly differs from model.generate at {where}{verdict}"
    return False
