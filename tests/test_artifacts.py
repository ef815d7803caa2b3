"""A whole generation exported, saved, and loaded in a fresh process: exactly ``model.generate``'s tokens, and
one-line errors for artifacts that cannot be used."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from pytest_fullgraph import ArtifactError, build_tiny, load_generate, save_generate
from pytest_fullgraph.levels.artifacts import RUNTIMES, metadata_path

LOAD_IN_A_FRESH_PROCESS = """
import sys, torch
from pytest_fullgraph import load_generate
generate = load_generate(sys.argv[1])
for case in torch.load(sys.argv[2]):
    if "seed" in case:  # a sampling program draws its noise input from torch's generator, as generate draws
        torch.manual_seed(case["seed"])
    lengths = {"max_new_tokens": case["max_new_tokens"]} if "max_new_tokens" in case else {}
    tokens = generate(case["input_ids"], case["attention_mask"], **lengths)
    same = torch.equal(tokens, case["expected"])
    print("equal" if same else f"differ: {tokens.tolist()} {case['expected'].tolist()}")
"""
#: Batch and prompt length of the shapes one dynamic program serves; the first is the export's example.
SHAPES = ((2, 8), (3, 5), (2, 16))


def left_padded(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(3, 100, (batch, length), generator=torch.Generator().manual_seed(batch * 100 + length))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0  # left padding: the mask is an input of the program, not baked in
    return input_ids, attention_mask


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny llama's greedy generation exported once with dynamic shapes and once for one shape, and
    generate's tokens for every shape of ``SHAPES``, saved to disk."""
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import export_generate

    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0)
    cases = []
    for batch, length in SHAPES:
        input_ids, attention_mask = left_padded(batch, length)
        expected = cast(Any, model).generate(input_ids, attention_mask=attention_mask, generation_config=config)
        cases.append({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected})
    directory = tmp_path_factory.mktemp("artifacts")
    inputs = directory / "cases.pt"
    torch.save(cases, inputs)
    example = (cases[0]["input_ids"], cases[0]["attention_mask"])
    return {"generate": export_generate(model, *example, config, dynamic=True, max_prompt_length=16),
            "bounded": export_generate(model, *example, config, dynamic=True, max_prompt_length=16,
                                       max_batch_size=max(batch for batch, _ in SHAPES)),
            "static": export_generate(model, *example, config), "inputs": inputs, "directory": directory}


#: The while form's bound, past the tiny gemma2's sliding window (16), and the lengths one program serves.
WHILE_BOUND, WHILE_LENGTHS = 20, (5, 20)


@pytest.fixture(scope="module")
def exported_while(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """gemma2's greedy generation in the ``while`` form, exported once for batch sizes from 2, prompts up to 16
    and any length up to ``WHILE_BOUND``, with generate's tokens for every shape and length."""
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import export_generate

    model = build_tiny("gemma2")
    cases = []
    for batch, length in SHAPES:
        input_ids, attention_mask = left_padded(batch, length)
        for new_tokens in WHILE_LENGTHS:
            config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
            expected = cast(Any, model).generate(input_ids, attention_mask=attention_mask, generation_config=config)
            cases.append({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected,
                          "max_new_tokens": new_tokens})
    directory = tmp_path_factory.mktemp("while_artifacts")
    inputs = directory / "cases.pt"
    torch.save(cases, inputs)
    config = GenerationConfig(max_new_tokens=WHILE_BOUND, do_sample=False, pad_token_id=0, eos_token_id=None)
    program = export_generate(model, cases[0]["input_ids"], cases[0]["attention_mask"], config, dynamic=True,
                              max_prompt_length=16, loop="while")
    return {"generate": program, "inputs": inputs, "directory": directory}


@pytest.fixture(scope="module")
def exported_sampling(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny llama sampling (top-k, a left-padded batch) exported with its noise as an input, and generate's
    tokens for three seeds."""
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import export_generate

    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=4, do_sample=True, top_k=20, pad_token_id=0)
    input_ids, attention_mask = left_padded(2, 8)
    cases = []
    for seed in range(3):
        torch.manual_seed(seed)
        expected = cast(Any, model).generate(input_ids, attention_mask=attention_mask, generation_config=config)
        cases.append({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected, "seed": seed})
    directory = tmp_path_factory.mktemp("sampling_artifacts")
    torch.save(cases, directory / "cases.pt")
    return {"generate": export_generate(model, input_ids, attention_mask, config, noise_input=True),
            "inputs": directory / "cases.pt", "directory": directory}


HAS_EXECUTORCH = importlib.util.find_spec("executorch") is not None


def runtime_params(loop: str) -> list[Any]:
    """Each runtime that takes ``loop``; AOTInductor's and ExecuTorch's builds of a whole generation take a minute
    or more on 2 cores (slow tests), and ExecuTorch's rows need the extra."""
    params = []
    for name, runtime in RUNTIMES.items():
        if loop not in runtime.loop_forms:
            continue
        marks = [] if name == "pt2" else [pytest.mark.breadth]
        if name.startswith("executorch"):
            marks.append(pytest.mark.skipif(not HAS_EXECUTORCH, reason="needs pytest_fullgraph[executorch]"))
        params.append(pytest.param(name, marks=marks))
    return params


def load_in_a_fresh_process(artifact: Path, inputs: Path) -> str:
    completed = subprocess.run([sys.executable, "-c", LOAD_IN_A_FRESH_PROCESS, str(artifact), str(inputs)],
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.strip()


@pytest.mark.parametrize("runtime", runtime_params("unrolled"))
def test_a_saved_generation_gives_generates_tokens_in_a_fresh_process(exported: dict[str, Any], runtime: str) -> None:
    """One dynamic program (its batch bounded, as ExecuTorch needs), saved, loaded in a new process, three shapes:
    exactly generate's tokens each."""
    artifact = save_generate(exported["bounded"], exported["directory"] / "llama", runtime=runtime, model="llama")
    assert artifact.name == "llama" + RUNTIMES[runtime].suffix
    assert load_in_a_fresh_process(artifact, exported["inputs"]).splitlines() == ["equal"] * len(SHAPES)


@pytest.mark.parametrize("runtime", runtime_params("unrolled"))
def test_a_saved_sampling_program_draws_generates_tokens_in_a_fresh_process(exported_sampling: dict[str, Any],
                                                                            runtime: str) -> None:
    """Its noise drawn by load_generate's callable from the seed, as generate draws: the same tokens, seed by
    seed, in every runtime, ExecuTorch's (which has no random number generator) included."""
    artifact = save_generate(exported_sampling["generate"], exported_sampling["directory"] / "sampling",
                             runtime=runtime, model="llama")
    assert load_in_a_fresh_process(artifact, exported_sampling["inputs"]).splitlines() == ["equal"] * 3


@pytest.mark.parametrize("runtime", runtime_params("while"))
def test_a_saved_while_program_serves_every_shape_and_length_in_a_fresh_process(exported_while: dict[str, Any],
                                                                                runtime: str) -> None:
    """One while_loop program, saved, loaded in a new process: three shapes, two lengths, generate's tokens."""
    artifact = save_generate(exported_while["generate"], exported_while["directory"] / "gemma2", runtime=runtime,
                             model="gemma2")
    lines = load_in_a_fresh_process(artifact, exported_while["inputs"]).splitlines()
    assert lines == ["equal"] * len(SHAPES) * len(WHILE_LENGTHS)


def test_a_while_program_takes_lengths_up_to_its_bound_and_an_unrolled_one_only_its_own(
        exported_while: dict[str, Any], exported: dict[str, Any]) -> None:
    artifact = save_generate(exported_while["generate"], exported_while["directory"] / "bound")
    metadata = json.loads(metadata_path(artifact).read_text())
    assert (metadata["loop"], metadata["max_new_tokens"]) == ("while", WHILE_BOUND)
    assert metadata["inputs"]["max_new_tokens"] == {"shape": [], "dtype": "torch.int64"}
    loaded = load_generate(artifact)
    ids, mask = left_padded(2, 8)
    for wrong in (0, WHILE_BOUND + 1):
        with pytest.raises(ArtifactError, match=rf"max_new_tokens={wrong} is outside what this program takes "
                                                rf"\(1 to {WHILE_BOUND}, "):
            loaded(ids, mask, max_new_tokens=wrong)
    unrolled = load_generate(save_generate(exported["static"], exported["directory"] / "fixed_length"))
    with pytest.raises(ArtifactError, match=r"an unrolled program generates its 4 tokens; max_new_tokens=3 needs a "
                                            r"program exported with loop='while'"):
        unrolled(ids, mask, max_new_tokens=3)


def test_the_metadata_says_what_is_baked_in_and_what_it_takes(exported: dict[str, Any]) -> None:
    artifact = save_generate(exported["generate"], exported["directory"] / "meta", model="llama")
    metadata = json.loads(metadata_path(artifact).read_text())
    assert (metadata["runtime"], metadata["model"], metadata["loop"], metadata["max_new_tokens"]) == (
        "pt2", "llama", "unrolled", 4)
    assert metadata["inputs"]["input_ids"] == {"shape": [[2, None], [2, 16]], "dtype": "torch.int64"}
    assert metadata["cache_len"] == 16 + 4
    assert metadata["generation_config"]["do_sample"] is False
    assert metadata["versions"]["torch"] == torch.__version__


def test_executorch_refuses_what_it_cannot_run_before_lowering(exported: dict[str, Any],
                                                               exported_while: dict[str, Any], tmp_path: Path) -> None:
    """An unbounded batch and the while form are refused in one line, and nothing is written."""
    for program, message in (
            (exported["generate"], r"runtime 'executorch' plans memory for the largest shape, and input_ids, "
                                   r"attention_mask has no upper bound: export with export_generate\(\.\.\., "
                                   r"dynamic=True, max_batch_size=N\), or dynamic=False"),
            (exported_while["generate"], r"runtime 'executorch_portable' takes the loop forms unrolled, not "
                                         r"'while'")):
        runtime = "executorch" if program is exported["generate"] else "executorch_portable"
        with pytest.raises(ArtifactError, match=message):
            save_generate(program, tmp_path / "refused", runtime=runtime)
    assert list(tmp_path.iterdir()) == []


def test_executorch_takes_sampling_only_with_noise_as_an_input() -> None:
    from pytest_fullgraph.levels import executorch_runtime

    bounded = {"input_ids": {"shape": [[2, 4], [2, 16]], "dtype": "torch.int64"}}
    sampling = executorch_runtime.refusal({"generation_config": {"do_sample": True}, "inputs": bounded})
    assert sampling is not None and "export with export_generate(..., noise_input=True)" in sampling
    noise = {"per_step": [128], "dtype": "torch.float32"}
    assert executorch_runtime.refusal({"generation_config": {"do_sample": True}, "inputs": bounded,
                                       "noise": noise}) is None


#: What ExecuTorch 1.5.1's runtime wrote when glm4_moe's decode program (transformers' exporter, XNNPACK) failed
#: with "method->execute() failed with error 0x10"
GLM4_MOE_LOG = """[cpuinfo_utils.cpp:87] Failed to open midr file /sys/devices/soc0/image_version
[tensor_impl.cpp:135] Attempted to resize a static tensor. Expected shape (0, 0, 0), but received (1, 22008, 240).
[XNNExecutor.cpp:279] Failed to resize output tensor for XNNExecutor
[method.cpp:1528] CALL_DELEGATE execute failed at instruction 99: 0x10
"""


def test_the_runtimes_log_says_why_a_method_failed_without_its_start_up_noise() -> None:
    from pytest_fullgraph.levels.executorch_runtime import runtime_reasons

    assert runtime_reasons(GLM4_MOE_LOG) == [
        "Attempted to resize a static tensor. Expected shape (0, 0, 0), but received (1, 22008, 240). "
        "(tensor_impl.cpp:135)", "Failed to resize output tensor for XNNExecutor (XNNExecutor.cpp:279)",
        "CALL_DELEGATE execute failed at instruction 99: 0x10 (method.cpp:1528)"]
    assert runtime_reasons("plain text\n") == []


#: what loading deepseek_v2's program through transformers' executorch back end logged (executorch 1.5.1), shortened
DEEPSEEK_V2_LOG = """[operator_registry.cpp:277] kernel 'aten::view_as_complex_copy.out' not found.
[operator_registry.cpp:278] dtype: 6 | dim order: [
[operator_registry.cpp:278] 0,
[operator_registry.cpp:278] ]
[method.cpp:822] Missing operator: [16] aten::view_as_complex_copy.out
[operator_registry.cpp:277] kernel 'aten::polar.out' not found.
[method.cpp:822] Missing operator: [18] aten::polar.out
[operator_registry.cpp:277] kernel 'aten::view_as_complex_copy.out' not found.
[method.cpp:822] Missing operator: [16] aten::view_as_complex_copy.out
[method.cpp:1128] There are 5 instructions don't have corresponding operator registered. See logs for details
"""


def test_a_missing_operator_is_said_once_without_the_registrys_dump() -> None:
    from pytest_fullgraph.levels.executorch_runtime import runtime_reasons

    assert runtime_reasons(DEEPSEEK_V2_LOG) == [
        "Missing operator: [18] aten::polar.out (method.cpp:822)",
        "Missing operator: [16] aten::view_as_complex_copy.out (method.cpp:822)",
        "There are 5 instructions don't have corresponding operator registered. See logs for details (method.cpp:1128)"]


def test_a_failing_calls_stderr_becomes_a_note_and_still_reaches_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """The runtime writes its reason to file descriptor 2 from C++, not to sys.stderr."""
    from pytest_fullgraph.core.results import summary
    from pytest_fullgraph.levels.executorch_runtime import runtime_log

    with pytest.raises(RuntimeError) as failed, runtime_log():
        os.write(2, GLM4_MOE_LOG.encode())
        raise RuntimeError("method->execute() failed with error 0x10")
    assert summary(failed.value) == ("method->execute() failed with error 0x10; ExecuTorch's runtime logged: "
                                     "Attempted to resize a static tensor. Expected shape (0, 0, 0), but received "
                                     "(1, 22008, 240). (tensor_impl.cpp:135); Failed to resize output tensor for "
                                     "XNNExecutor (XNNExecutor.cpp:279); CALL_DELEGATE execute failed at instruction "
                                     "99: 0x10 (method.cpp:1528)")
    with runtime_log():
        os.write(2, b"[method.cpp:1] fine\n")
    assert capfd.readouterr().err == GLM4_MOE_LOG + "[method.cpp:1] fine\n"


def test_a_named_log_file_holds_a_block_while_it_runs_and_is_emptied_after(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On an xdist worker the log goes to a file ``crash_sites`` reads if the runtime kills the process; a block
    inside another gets a file of its own, so the outer one's lines are not lost."""
    from pytest_fullgraph.core.results import summary
    from pytest_fullgraph.levels import executorch_runtime

    named = tmp_path / "gw0.runtime.log"
    monkeypatch.setattr(executorch_runtime, "LOG_FILE", named)
    with pytest.raises(RuntimeError) as failed, executorch_runtime.runtime_log():
        os.write(2, b"[method.cpp:1] outer\n")
        with executorch_runtime.runtime_log():
            os.write(2, b"[method.cpp:2] inner\n")
        assert named.read_bytes() == b"[method.cpp:1] outer\n[method.cpp:2] inner\n"  # the inner block's, passed on
        raise RuntimeError("0x10")
    assert summary(failed.value) == "0x10; ExecuTorch's runtime logged: outer (method.cpp:1); inner (method.cpp:2)"
    assert named.read_bytes() == b""


def test_what_the_bindings_write_to_sys_stderr_is_kept_too(capsys: pytest.CaptureFixture[str]) -> None:
    """ExecuTorch's Python bindings hand the runtime's log to ``sys.stderr``, which pytest's capture (here capsys)
    points away from descriptor 2; the note has it, and ``sys.stderr`` is put back."""
    from pytest_fullgraph.core.results import summary
    from pytest_fullgraph.levels.executorch_runtime import runtime_log

    before = sys.stderr
    with pytest.raises(RuntimeError) as failed, runtime_log():
        print(DEEPSEEK_V2_LOG, file=sys.stderr, end="")
        raise RuntimeError("Failed to load method forward, error: 0x:14")
    assert summary(failed.value).startswith("Failed to load method forward, error: 0x:14; ExecuTorch's runtime "
                                            "logged: Missing operator: [18] aten::polar.out (method.cpp:822); ")
    assert sys.stderr is before


def test_a_runtime_without_its_package_is_named_with_its_extra(toy_project: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               exported: dict[str, Any], tmp_path: Path) -> None:
    """Before anything runs: at the option (a usage error), at save_generate and at load_generate."""
    from pytest_fullgraph.levels import artifacts

    saved = save_generate(exported["static"], tmp_path / "fixed")
    metadata = json.loads(metadata_path(saved).read_text())
    metadata_path(saved).write_text(json.dumps({**metadata, "runtime": "executorch"}))
    monkeypatch.setattr(artifacts, "find_spec", lambda name: None)
    needs = "needs executorch: pip install 'pytest_fullgraph[executorch]'"
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-artifact-runtime=executorch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: --fullgraph-artifact-runtime=executorch: the executorch runtime {needs}" in result.stderr.str()
    with pytest.raises(ArtifactError, match=re.escape(f"runtime 'executorch' {needs}")):
        save_generate(exported["static"], tmp_path / "refused", runtime="executorch")
    with pytest.raises(ArtifactError, match=re.escape(f"fixed.pt2: a executorch artifact {needs}")):
        load_generate(saved)


def test_max_batch_size_bounds_a_dynamic_export_only() -> None:
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate

    model, config = build_tiny("llama"), GenerationConfig(max_new_tokens=2, do_sample=False, pad_token_id=0)
    ids, mask = left_padded(3, 8)
    with pytest.raises(UnsupportedGeneration, match="max_batch_size bounds a dynamic export: give dynamic=True"):
        export_generate(model, ids, mask, config, max_batch_size=4)
    with pytest.raises(UnsupportedGeneration, match=r"max_batch_size=2 is smaller than the example batch \(3\)"):
        export_generate(model, ids, mask, config, dynamic=True, max_batch_size=2)


def test_a_bounded_program_says_its_bound_and_refuses_a_larger_batch(exported: dict[str, Any]) -> None:
    bounded = load_generate(save_generate(exported["bounded"], exported["directory"] / "bounded"))
    assert bounded.artifact_metadata["inputs"]["input_ids"]["shape"] == [[2, 3], [2, 16]]  # type: ignore[attr-defined]
    with pytest.raises(ArtifactError, match=r"\(4, 8\) torch.int64, but the program takes \(2..3, 2..16\)"):
        bounded(torch.ones(4, 8, dtype=torch.long), torch.ones(4, 8, dtype=torch.long))


def test_other_shapes_are_refused_before_the_program_runs(exported: dict[str, Any]) -> None:
    fixed = load_generate(save_generate(exported["static"], exported["directory"] / "shapes"))
    with pytest.raises(ArtifactError, match=r"input_ids is \(3, 8\) torch.int64, but the program takes \(2, 8\) "
                                            r"torch.int64"):
        fixed(torch.ones(3, 8, dtype=torch.long), torch.ones(3, 8, dtype=torch.long))
    ranged = load_generate(save_generate(exported["generate"], exported["directory"] / "ranged"))
    with pytest.raises(ArtifactError, match=r"\(2, 17\) torch.int64, but the program takes \(2.., 2..16\)"):
        ranged(torch.ones(2, 17, dtype=torch.long), torch.ones(2, 17, dtype=torch.long))


def test_dynamic_export_refuses_settings_built_for_one_prompt_length() -> None:
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate

    input_ids, attention_mask = left_padded(2, 8)
    config = GenerationConfig(max_new_tokens=4, min_new_tokens=2, do_sample=False, pad_token_id=0)
    with pytest.raises(UnsupportedGeneration, match=r"dynamic=True\) does not support min_new_tokens=2"):
        export_generate(build_tiny("llama"), input_ids, attention_mask, config, dynamic=True)


def test_a_corrupted_artifact_is_a_one_line_error(exported: dict[str, Any]) -> None:
    artifact = save_generate(exported["generate"], exported["directory"] / "broken")
    artifact.write_bytes(artifact.read_bytes()[:200])
    with pytest.raises(ArtifactError, match=r"broken.pt2: cannot load the pt2 artifact \("):
        load_generate(artifact)


def test_an_artifact_of_another_torch_release_is_refused(exported: dict[str, Any]) -> None:
    artifact = save_generate(exported["generate"], exported["directory"] / "old")
    metadata = json.loads(metadata_path(artifact).read_text())
    metadata["versions"]["torch"] = "1.13.1+cpu"  # a release no environment of the suite has
    metadata_path(artifact).write_text(json.dumps(metadata))
    with pytest.raises(ArtifactError, match=rf"old.pt2: saved with torch 1.13.1\+cpu, this is torch "
                                            rf"{re.escape(torch.__version__)}; export and save it again"):
        load_generate(artifact)


@pytest.mark.parametrize(("metadata", "message"), [
    (None, "cannot read the artifact's metadata"),
    ("{not json", "the artifact's metadata is not valid JSON"),
    ('{"schema": "something else"}', "not a pytest_fullgraph artifact's metadata"),
])
def test_missing_or_foreign_metadata_is_refused(tmp_path: Path, metadata: str | None, message: str) -> None:
    artifact = tmp_path / "x.pt2"
    artifact.write_bytes(b"")
    if metadata is not None:
        metadata_path(artifact).write_text(metadata)
    with pytest.raises(ArtifactError, match=message):
        load_generate(artifact)


def test_a_missing_program_is_named_before_its_metadata(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"nothere.pt2: no such artifact; load_generate takes the path "
                                            r"save_generate returned, or a file --fullgraph-artifacts wrote$"):
        load_generate(tmp_path / "nothere.pt2")
    (tmp_path / "llama-greedy-export.pt2").write_bytes(b"")
    with pytest.raises(ArtifactError, match=r"no such artifact \(did you mean llama-greedy-export.pt2\?\)"):
        load_generate(tmp_path / "llama-greedy-export")


def test_only_what_export_generate_returned_can_be_saved(exported: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="save_generate takes what export_generate returned"):
        save_generate(lambda ids, mask: ids, tmp_path / "x")
    with pytest.raises(ArtifactError, match="runtime 'pte' is not known; use one of pt2, aoti"):
        save_generate(exported["generate"], tmp_path / "x", runtime="pte")


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
