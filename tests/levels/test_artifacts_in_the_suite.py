"""``--fullgraph-artifacts``: the suite saves each passing export check's program for the runtime chosen,
checks one exported program over three shapes, and says why a sampling program is not saved for ExecuTorch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from pytest_fullgraph import build_tiny, load_generate
from pytest_fullgraph.levels.artifacts import RUNTIMES, metadata_path
from tests.levels.conftest import HAS_EXECUTORCH, load_in_a_fresh_process


@pytest.mark.breadth
def test_the_suite_saves_each_passing_export_checks_program(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    from tests.conftest import checks_by_id, read_report

    saved = tmp_path / "artifacts"
    result = toy_project.runpytest("--fullgraph-models=toy,toy_drift", "-k", "greedy-export", "-p", "no:cacheprovider",
                                   f"--fullgraph-artifacts={saved}", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1, failed=1)
    checks = checks_by_id(read_report(tmp_path))
    assert checks["toy-greedy-export"]["artifact"] == str(saved / "toy-greedy-export-float32.pt2")
    assert checks["toy_drift-greedy-export"]["artifact"] == ""  # a program with other tokens is not shipped
    assert sorted(path.name for path in saved.iterdir()) == ["toy-greedy-export-float32.pt2",
                                                             "toy-greedy-export-float32.pt2.json"]
    metadata = json.loads((saved / "toy-greedy-export-float32.pt2.json").read_text())
    shape = [low for low, _ in metadata["inputs"]["input_ids"]["shape"]]  # a fixed shape: low == high
    tokens = load_generate(saved / "toy-greedy-export-float32.pt2")(
        torch.full(shape, 5, dtype=torch.long), torch.ones(shape, dtype=torch.long))
    assert tokens.shape[0] == shape[0] and metadata["model"] == "toy"


@pytest.mark.breadth
def test_the_suite_checks_one_exported_program_over_three_shapes(toy_project: pytest.Pytester) -> None:
    result = toy_project.runpytest("--fullgraph-models=toy,toy_drift", "-k", "serves_three_shapes",
                                   "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)  # each loop form
    result.stdout.fnmatch_lines(["*test_one_exported_program_serves_three_shapes[[]toy_drift-unrolled[]]*",
                                 "shape (2, 8), 4 new tokens: the exported program differs from generate at row *",
                                 "*test_one_exported_program_serves_three_shapes[[]toy_drift-while[]]*",
                                 "shape (2, 8), 4 new tokens: the exported program differs from generate at row *"])


def test_the_suite_saves_for_the_runtime_chosen(toy_project: pytest.Pytester, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``--fullgraph-artifact-runtime`` picks the row of ``RUNTIMES``; a stand-in row keeps this test from paying
    for an AOTInductor build (the aoti row itself is tested in a fresh process above)."""
    import dataclasses

    from pytest_fullgraph.levels import artifacts

    stand_in = dataclasses.replace(RUNTIMES["pt2"], name="standin", suffix=".standin.pt2")
    monkeypatch.setitem(artifacts.RUNTIMES, "standin", stand_in)
    saved = tmp_path / "artifacts"
    result = toy_project.runpytest("--fullgraph-models=toy", "-k", "greedy-export", "-p", "no:cacheprovider",
                                   f"--fullgraph-artifacts={saved}", "--fullgraph-artifact-runtime=standin")
    result.assert_outcomes(passed=1)
    assert sorted(path.name for path in saved.iterdir()) == ["toy-greedy-export-float32.standin.pt2",
                                                             "toy-greedy-export-float32.standin.pt2.json"]
    metadata = json.loads((saved / "toy-greedy-export-float32.standin.pt2.json").read_text())
    assert metadata["runtime"] == "standin"
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-artifact-runtime=pte")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--fullgraph-artifact-runtime='pte' is not an artifact runtime (did you mean pt2?); use one of pt2, aoti*"])


@pytest.mark.breadth
@pytest.mark.skipif(not HAS_EXECUTORCH, reason="needs pytest_fullgraph[executorch]")
def test_the_suite_saves_executorch_programs_and_says_why_a_sampling_one_is_not(toy_project: pytest.Pytester,
                                                                                tmp_path: Path) -> None:
    from tests.conftest import checks_by_id, read_report

    saved = tmp_path / "artifacts"
    result = toy_project.runpytest("--fullgraph-models=toy", "-k", "greedy-export or sample-export or eos-export",
                                   "-p", "no:cacheprovider", f"--fullgraph-artifacts={saved}",
                                   "--fullgraph-artifact-runtime=executorch", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=3)
    checks = checks_by_id(read_report(tmp_path))
    assert checks["toy-greedy-export"]["artifact"] == str(saved / "toy-greedy-export-float32.pte")
    assert checks["toy-eos-export"]["artifact"] == str(saved / "toy-eos-export-float32.pte")  # EOS stops lower too
    assert checks["toy-sample-export"]["artifact"] == ""
    assert ("saving the artifact failed (ArtifactError: runtime 'executorch' takes a sampling program only with its "
            "noise as an input" in checks["toy-sample-export"]["message"])
    from transformers import GenerationConfig  # the toy's generate with the settings baked in is the reference

    from pytest_fullgraph.check.inputs import make_inputs
    from pytest_fullgraph.check.scenarios import SCENARIOS

    toy = cast(Any, build_tiny("llama"))
    for scenario in ("greedy", "eos"):
        program = saved / f"toy-{scenario}-export-float32.pte"
        config = GenerationConfig(**json.loads(metadata_path(program).read_text())["generation_config"])
        inputs = make_inputs(toy, SCENARIOS[scenario])  # the check's own prompts: eos's emit the EOS it stops at
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        expected = toy.generate(ids, attention_mask=mask, generation_config=config)
        torch.save([{"input_ids": ids, "attention_mask": mask, "expected": expected}], tmp_path / "cases.pt")
        # a fresh process: pytester's in-process runs drop modules, and ExecuTorch registers its operators once only
        assert load_in_a_fresh_process(program, tmp_path / "cases.pt") == "equal", scenario
