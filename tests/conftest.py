"""Shared helpers for the plugin's own tests: toy models planted with known faults, run through pytester."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

# Imported up front: pytester's in-process runs drop the modules they import when they end, and numpy (under
# torch and transformers) cannot be imported twice in one process. A selection beyond the records' names loads
# transformers' model mapping inside such a run.
import transformers.models.auto.modeling_auto  # noqa: F401

pytest_plugins = ["pytester"]

#: Why a ``breadth`` test is skipped by default: the tests that build whole programs (AOTInductor), run the suite many
#: times over, or take 15 s and more in fresh processes (measured per test, bench/results/main-command.md) keep
#: `.ci/run` past its minutes; each behaviour keeps a quicker test in the default run, and the workflow's ``plugin``
#: job runs them all on every pull request.
SLOW_REASON = "a slow breadth test of the plugin: run with --slow-tests (the workflow's plugin job does)"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow-tests", action="store_true", default=False,
                     help="also run the plugin's slow breadth tests (marked breadth)")


def pytest_configure(config: pytest.Config) -> None:
    # not ``slow``: the plugin under test owns that marker (its slow tier, --run-slow) and would skip these too
    config.addinivalue_line("markers", f"breadth: {SLOW_REASON}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow-tests"):
        return
    for item in items:
        if item.get_closest_marker("breadth") is not None:
            item.add_marker(pytest.mark.skip(reason=SLOW_REASON))

#: A conftest for pytester runs: toy models built on the tiny llama, each with a known behaviour.
#: Line numbers matter: tests assert the planted break is reported at PLANTED_BREAK_LINE.
TOY_CONFTEST = textwrap.dedent('''\
    import torch
    from transformers import LlamaForCausalLM
    from pytest_fullgraph import build_tiny, register_model


    class PlantedBreak(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            if out.logits.sum() > 0:  # planted graph break: data-dependent branch
                out.logits = out.logits + 0
            return out


    class DriftsWhenCompiled(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            if torch.compiler.is_compiling():
                out.logits = out.logits.clone()
                out.logits[..., 5] = out.logits[..., 5] + 1000.0
            return out


    def broken_build():
        raise RuntimeError("this model cannot be built")


    register_model("toy", lambda: build_tiny("llama"))
    register_model("toy_break", lambda: build_tiny("llama", model_class=PlantedBreak))
    register_model("toy_drift", lambda: build_tiny("llama", model_class=DriftsWhenCompiled))
    register_model("toy_broken", broken_build)


    class TiesWhenCompiled(LlamaForCausalLM):
        """Its top token always has an exact twin; compiled, a small bias picks the twin: a rounding flip."""

        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            logits = out.logits.clone()
            top = logits.argmax(-1, keepdim=True)
            twin = (top + 1) % logits.shape[-1]
            tied = logits.gather(-1, top)
            if torch.compiler.is_compiling():
                tied = tied + tied.abs() * 0.01 + 0.001
            out.logits = logits.scatter(-1, twin, tied)
            return out


    class NoHalfKernels(LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            if self.dtype == torch.float16:
                raise RuntimeError("addmm_impl_cpu_ not implemented for " + repr("Half"))
            return super().forward(*args, **kwargs)


    register_model("toy_tie", lambda: build_tiny("llama", model_class=TiesWhenCompiled))
    register_model("toy_nohalf", lambda: build_tiny("llama", model_class=NoHalfKernels))


    class StepBreak(LlamaForCausalLM):
        """Breaks in the decode steps only: in the while form, inside the while_loop body."""

        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            if kwargs["input_ids"].shape[1] == 1 and out.logits.sum() > 0:  # planted: decode steps only
                out.logits = out.logits + 0
            return out


    register_model("toy_step_break", lambda: build_tiny("llama", model_class=StepBreak))
''')
PLANTED_BREAK_LINE = 9
#: Where ``toy_step_break`` breaks (in decode steps only).
STEP_BREAK_LINE = next(number for number, line in enumerate(TOY_CONFTEST.splitlines(), 1)
                       if "planted: decode steps only" in line)



@pytest.fixture(scope="session")
def modules_loaded_outside_pytester() -> None:
    """Import, in this process, every module an in-process pytester run of a check would import first.

    pytester restores ``sys.modules`` after each in-process run: torch or transformers modules first
    imported inside one run would be dropped and imported again by the next, which breaks torch's C
    extension and transformers' lazy modules. Running one tiny check of each compiled kind here keeps them.
    """
    from transformers import LlamaForCausalLM  # noqa: F401  (the toy conftest subclasses it)

    from pytest_fullgraph import build_tiny, run_check

    for level in ("forward", "decode", "while"):
        run_check(build_tiny("llama"), "llama", "greedy", level, "eager", 1)


@pytest.fixture
def pytester(pytester: pytest.Pytester, modules_loaded_outside_pytester: None) -> pytest.Pytester:
    """pytester, once the modules its in-process runs would import are loaded: any test that runs one, in any
    order on any worker, finds them there (a run of ``pytester`` tests alone broke without it)."""
    return pytester


@pytest.fixture
def toy_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project with the toy models registered; selecting models collects the shipped conformance suite."""
    pytester.makeconftest(TOY_CONFTEST)
    return pytester


def read_report(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "fullgraph-report.json").read_text())


def checks_by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{c['model']}-{c['scenario']}-{c['level']}": c for c in report["checks"]}
