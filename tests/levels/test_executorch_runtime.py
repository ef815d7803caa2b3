"""The ExecuTorch runtime: what it refuses before lowering, sampling only with its noise as an input, the
reasons its log gives for a failed method (without its start-up noise), kept as a note, and a missing package
named with its extra."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_fullgraph import ArtifactError, load_generate, save_generate
from pytest_fullgraph.levels.artifacts import metadata_path
from tests.levels.conftest import Exports


def test_executorch_refuses_what_it_cannot_run_before_lowering(exported: Exports, tmp_path: Path) -> None:
    """An unbounded batch and the while form are refused in one line, and nothing is written. The refusal reads the
    program's metadata only: the while form's is the unrolled program's with its loop form (a while program's own
    is the breadth tests' in test_artifacts.py, whose export takes about 20 s), an unbounded batch's the bounded
    program's without its bound (test_artifacts.py's metadata test shows both forms)."""
    bounded = exported["bounded"]
    inputs = {name: {**spec, "shape": [[spec["shape"][0][0], None], spec["shape"][1]]}
              for name, spec in bounded.artifact_metadata["inputs"].items() if name in ("input_ids", "attention_mask")}
    unbounded = SimpleNamespace(artifact_metadata={**bounded.artifact_metadata,
                                                   "inputs": {**bounded.artifact_metadata["inputs"], **inputs}},
                                exported_program=bounded.exported_program)
    while_form = SimpleNamespace(artifact_metadata={**bounded.artifact_metadata, "loop": "while"},
                                 exported_program=bounded.exported_program)
    for program, runtime, message in (
            (unbounded, "executorch", r"runtime 'executorch' plans memory for the largest shape, and input_ids, "
                                      r"attention_mask has no upper bound: export with export_generate\(\.\.\., "
                                      r"dynamic=True, max_batch_size=N\), or dynamic=False"),
            (while_form, "executorch_portable", r"runtime 'executorch_portable' takes the loop forms unrolled, not "
                                                r"'while'")):
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
                                                               exported: Exports, tmp_path: Path) -> None:
    """Before anything runs: at the option (a usage error), at save_generate and at load_generate."""
    from pytest_fullgraph.levels import artifacts

    saved = save_generate(exported["bounded"], tmp_path / "fixed")
    metadata = json.loads(metadata_path(saved).read_text())
    metadata_path(saved).write_text(json.dumps({**metadata, "runtime": "executorch"}))
    monkeypatch.setattr(artifacts, "find_spec", lambda name: None)
    needs = "needs executorch: pip install 'pytest_fullgraph[executorch]'"
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-artifact-runtime=executorch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: --fullgraph-artifact-runtime=executorch: the executorch runtime {needs}" in result.stderr.str()
    with pytest.raises(ArtifactError, match=re.escape(f"runtime 'executorch' {needs}")):
        save_generate(exported["bounded"], tmp_path / "refused", runtime="executorch")
    with pytest.raises(ArtifactError, match=re.escape(f"fixed.pt2: a executorch artifact {needs}")):
        load_generate(saved)
