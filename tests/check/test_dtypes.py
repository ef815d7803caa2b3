"""The dtype axis and the precision-aware diagnosis, run as users run the suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from tests.conftest import read_report

FORWARD_GREEDY = ["-k", "greedy and forward", "-p", "no:cacheprovider"]


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{c['model']}-{c['scenario']}-{c['level']}-{c['dtype']}": c for c in report["checks"]}


def test_every_check_runs_in_every_selected_dtype(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-dtype=float32,bfloat16",
                                   "--fullgraph-backend=eager", "-v", *FORWARD_GREEDY,
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*[[]toy-greedy-forward-float32[]] PASSED*",
                                 "*[[]toy-greedy-forward-bfloat16[]] PASSED*"])
    report = read_report(tmp_path)
    checks = by_id(report)
    assert sorted(checks) == ["toy-greedy-forward-bfloat16", "toy-greedy-forward-float32"]
    assert report["environment"]["dtypes"] == ["float32", "bfloat16"]
    page = (tmp_path / "fullgraph-report.md").read_text()
    assert "| forward (float32) | 1 | 1 | 1 of 1 |\n| forward (bfloat16) | 1 | 1 | 1 of 1 |" in page
    assert "**2** of 2 models pass every check: toy (float32), toy (bfloat16)." in page


def test_a_dtype_without_kernels_here_is_a_skip_with_the_reason(toy_project: pytest.Pytester,
                                                                tmp_path: Path) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy_nohalf", "--fullgraph-dtype=float16,float32",
                                   "--fullgraph-backend=eager", "-rs", *FORWARD_GREEDY,
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*float16 cannot run here*not implemented for 'Half'*"])
    assert by_id(read_report(tmp_path))["toy_nohalf-greedy-forward-float16"]["outcome"] == "skip"


def test_bad_dtype_is_a_usage_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--fullgraph-dtype=float32,int8,fp4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("--fullgraph-dtype='float32,int8,fp4': 'int8', 'fp4' is not a dtype; use a comma list of float32, "
            "bfloat16, float16") in result.stderr.str()


@pytest.mark.parametrize(("model", "kind", "cell"), [("toy_tie", "rounding", "〰️ rounding"),
                                                     ("toy_drift", "divergence", "❌ divergence")])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_rounding_flip_and_a_divergence_are_told_apart(toy_project: pytest.Pytester, tmp_path: Path, model: str,
                                                         kind: str, cell: str, dtype: str) -> None:
    """toy_tie's top token has an exact twin that a compiled-only bias picks (tied in float64: rounding);
    toy_drift adds 1000 to a logit when compiled (far apart in float64: divergence)."""
    result = toy_project.runpytest(f"--fullgraph-models={model}", f"--fullgraph-dtype={dtype}",
                                   "--fullgraph-backend=eager", *FORWARD_GREEDY, f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(failed=1)  # the verdict stays exact: any token difference fails
    check = by_id(read_report(tmp_path))[f"{model}-greedy-forward-{dtype}"]
    precision = check["mismatch"]["precision"]
    assert (check["outcome"], precision["kind"], precision["dtype"]) == ("mismatch", kind, dtype)
    if kind == "rounding":
        assert precision["reference_gap"] == 0.0  # the twins are exactly tied in float64
    else:
        assert abs(precision["reference_gap"]) > 100 * precision["rounding_step"]
    result.stdout.fnmatch_lines([f"*float64 reference logits * {dtype} rounding steps there*: {kind}*"])
    label = model if dtype == "float32" else f"{model} ({dtype})"
    assert f"| {label} | {cell} |" in (tmp_path / "fullgraph-report.md").read_text()


def test_the_gate_can_ignore_rounding_flips(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    import subprocess
    import sys

    for name, model in (("base", "toy"), ("cur", "toy_tie")):
        toy_project.runpytest(f"--fullgraph-models={model}", "--fullgraph-backend=eager", *FORWARD_GREEDY,
                              f"--fullgraph-report={tmp_path / name}")
    # the same check id in both: rename the model of the current run's check
    import json

    current = tmp_path / "cur" / "fullgraph-report.json"
    data = json.loads(current.read_text())
    data["checks"][0]["model"] = "toy"
    current.write_text(json.dumps(data))
    baseline = tmp_path / "base" / "fullgraph-report.json"

    def gate(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest_fullgraph", "report", "diff", str(baseline),
                               str(current), *extra], capture_output=True, text=True, check=False)

    assert gate().returncode == 1
    lenient = gate("--divergences-only")
    assert lenient.returncode == 0, lenient.stdout


def test_a_conftest_models_globals_resolve_when_the_suite_compiles_it(toy_project: pytest.Pytester,
                                                                      tmp_path: Path) -> None:
    """toy_tie's forward reads the conftest's ``torch`` global under dynamo. A second module named
    ``conftest`` loaded for the suite's directory (this repository once had an empty root conftest.py) made
    that ``AttributeError: module 'conftest' has no attribute 'torch'`` at the decode level."""
    result = toy_project.runpytest("--fullgraph-models=toy_tie", "--fullgraph-backend=eager", "-k",
                                   "greedy and decode", "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(failed=1)
    check = by_id(read_report(tmp_path))["toy_tie-greedy-decode-float32"]
    assert check["outcome"] == "mismatch" and check["mismatch"]["precision"]["kind"] == "rounding"


def test_a_mixture_of_experts_model_gets_a_float64_verdict() -> None:
    """grouped_mm, the experts' default kernel, has no float64: the reference switches to the eager experts
    (without it, every bfloat16 mismatch of qwen2_moe, mixtral and qwen3_moe went unjudged)."""
    import torch

    from pytest_fullgraph.check.compare import precision_verdict
    from pytest_fullgraph.core.results import Mismatch
    from pytest_fullgraph.models import build_tiny

    model: Any = cast(Any, build_tiny("qwen2_moe")).to(torch.bfloat16)
    prompt = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    reference = torch.cat([prompt, torch.tensor([[20, 21], [22, 23]])], dim=1)
    mismatch = Mismatch(row=1, position=5, step=1, eager_token=23, compiled_token=40)
    inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
    verdict = precision_verdict(model, inputs, reference, mismatch)
    assert verdict is not None and verdict.dtype == "bfloat16", mismatch.precision_note
    assert next(model.parameters()).dtype == torch.bfloat16  # the model under test is untouched


def test_an_unjudged_mismatch_says_why() -> None:
    from pytest_fullgraph.check.compare import precision_verdict
    from pytest_fullgraph.core.results import Mismatch

    class NoFloat64:
        dtype = None

        def parameters(self) -> Any:
            import torch

            return iter([torch.zeros(1, dtype=torch.bfloat16)])

        def __call__(self, **kwargs: Any) -> Any:
            raise RuntimeError("no float64 kernel here")

        def to(self, dtype: Any) -> Any:
            return self

    import torch

    mismatch = Mismatch(row=0, position=3, step=0, eager_token=5, compiled_token=6)
    inputs = {"input_ids": torch.tensor([[3, 4, 5]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    assert precision_verdict(cast(Any, NoFloat64()), inputs, torch.tensor([[3, 4, 5, 6]]), mismatch) is None
    assert mismatch.precision_note == ("rounding is not judged: the float64 reference failed (RuntimeError: no "
                                       "float64 kernel here)")
    assert mismatch.describe().endswith(mismatch.precision_note)


def _static_cache_offset_model(relative_error_in_ulps: float, absolute: float = 0.0) -> Any:
    """A tiny llama whose static-cache path is off by ``relative_error_in_ulps`` units in the last place of its
    dtype (what different rounding gives), and token 2 favoured by ``absolute`` (a real bug, in every dtype)."""
    import torch
    from transformers import LlamaForCausalLM, StaticCache

    from pytest_fullgraph.models import build_tiny

    class OffWithStaticCache(LlamaForCausalLM):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            out = super().forward(*args, **kwargs)
            if any(isinstance(value, StaticCache) for value in kwargs.values()):
                eps = torch.finfo(out.logits.dtype).eps
                out.logits = out.logits + out.logits.abs() * (relative_error_in_ulps * eps)
                out.logits[..., 2] += absolute
            return out

    return cast(Any, build_tiny("llama", model_class=cast(Any, OffWithStaticCache))).to(torch.bfloat16)


def _first_seed_where_the_caches_differ(model: Any, inputs: dict[str, Any], config: Any) -> tuple[int, Any]:
    import torch

    from pytest_fullgraph.core.generation import generate, static_cache_config

    for seed in range(64):
        default = generate(model, inputs, config, seed)
        if not torch.equal(default, generate(model, inputs, static_cache_config(config), seed)):
            return seed, default
    raise AssertionError("the two cache paths never drew differently: the scripted model lost its rounding")


@pytest.mark.parametrize(("absolute", "verdict"), [
    (0.0, "but not in float32 (same seed and settings): in bfloat16 the two caches round attention differently and "
          "a sampled draw near a boundary flips; precision, which shows neither the model's static-cache path nor "
          "the loop wrong"),
    (3.0, "in float32 too: the model's static-cache path is wrong, not the loop"),
])
def test_a_sampled_static_cache_difference_in_bfloat16_is_blamed_only_if_float32_agrees(absolute: float,
                                                                                       verdict: str) -> None:
    """A sampled step has no float64 rounding class; float32, where a few ulps flip no draw, decides."""
    import torch
    from transformers import GenerationConfig

    from pytest_fullgraph.check.compare import static_cache_verdict

    model = _static_cache_offset_model(relative_error_in_ulps=4.0, absolute=absolute)
    prompt = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    inputs = {"input_ids": prompt, "attention_mask": torch.ones_like(prompt)}
    config = GenerationConfig(do_sample=True, top_k=0, max_new_tokens=16, pad_token_id=0, eos_token_id=None)
    seed, default = _first_seed_where_the_caches_differ(model, inputs, config)
    message = static_cache_verdict(model, inputs, config, seed, default)
    assert message.startswith("; model.generate with a static cache differs from the default too")
    assert message.endswith(verdict), message
    assert next(model.parameters()).dtype == torch.bfloat16  # the float32 run used a copy
