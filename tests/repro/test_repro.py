"""``python -m pytest_fullgraph repro`` as users run it: selecting checks, bad input in one line, the script run
isolated where pytest_fullgraph cannot be imported and verified with the interpreter given, and, end to end on
two real tiny models, a written script failing the recorded way in a fresh process (one that does not is not
written)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_fullgraph import __main__ as command_line
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.repro.command import INDEX_NAME, MAX_LINES, reproduce, select
from pytest_fullgraph.repro.verify import run_isolated
from tests.repro.failures import check


def test_selectors_name_checks_or_models_and_an_unknown_one_is_named_with_close_matches() -> None:
    checks = [check(), check(outcome="pass", scenario="sample"), check(model="dory")]
    assert [r.check_id for r in select(checks, [])] == ["cpmant-greedy-forward-float32", "dory-greedy-forward-float32"]
    assert [r.check_id for r in select(checks, ["cpmant"])] == ["cpmant-greedy-forward-float32"]
    with pytest.raises(ValueError, match=r"'cpmnt' \(did you mean cpmant"):
        select(checks, ["cpmnt"])


def test_the_command_says_bad_input_in_one_line_and_exits_2(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fullgraph-report.json"
    path.write_text(json.dumps({"schema": "pytest_fullgraph/report", "version": 7, "environment": {},
                                "checks": [check().to_dict()]}))
    assert command_line.main(["repro", str(path), "cpmant-greedy-forwrd-float32", "-o", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "'cpmant-greedy-forwrd-float32' (did you mean cpmant-greedy-forward" in error
    assert command_line.main(["repro", str(tmp_path / "missing.json"), "-o", str(tmp_path / "out")]) == 2
    assert "missing.json: cannot read" in capsys.readouterr().err
    assert command_line.main(["repro", "cpmant", "-o", str(tmp_path / "out")]) == 2
    assert "no report given" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command_line.main(["repro", "--help"])
    assert "python -m pytest_fullgraph repro " in capsys.readouterr().out


def test_a_script_runs_where_pytest_fullgraph_cannot_be_imported(tmp_path: Path) -> None:
    leaning = tmp_path / "leaning.py"
    leaning.write_text("import pytest_fullgraph\n")
    run = run_isolated(leaning, timeout_s=60)
    assert run.status != 0 and "pytest_fullgraph is not importable" in run.output
    standalone = tmp_path / "standalone.py"
    standalone.write_text('import sys\nprint(\'REPRO-RESULT {"status": "bug"}\')\nsys.exit(1)\n')
    assert run_isolated(standalone, timeout_s=60).found == {"status": "bug"}


def fake_python(directory: Path, status: int, result: str) -> Path:
    """An interpreter that only says what it was given: its working directory, first and last argument to
    ``calls``, then ``result`` as a script's result line, and exits ``status``."""
    path = directory / "python"
    path.write_text(f"""#!/bin/sh
for last; do :; done
echo "$PWD $1 $last" >> {directory / 'calls'}
echo 'REPRO-RESULT {result}'
exit {status}
""")
    path.chmod(0o755)
    return path


def test_a_named_interpreter_runs_the_script_isolated_from_an_empty_directory(tmp_path: Path) -> None:
    script = tmp_path / "standalone.py"
    script.write_text("raise SystemExit(3)\n")  # what this interpreter would do; the named one is asked instead
    run = run_isolated(script, timeout_s=60, python=str(fake_python(tmp_path, 1, '{"status": "bug"}')))
    assert (run.status, run.found) == (1, {"status": "bug"})
    directory, flag, last = (tmp_path / "calls").read_text().split()
    assert (flag, last) == ("-I", str(script)) and Path(directory).name.startswith("repro-")


def test_the_command_verifies_with_the_interpreter_it_is_given(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fullgraph-report.json"
    path.write_text(json.dumps({"schema": "pytest_fullgraph/report", "version": 7, "environment": {},
                                "checks": [check().to_dict()]}))
    missing = tmp_path / "no-venv" / "bin" / "python"
    assert command_line.main(["repro", str(path), "-o", str(tmp_path / "out"), "--python", str(missing)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"--python '{missing}' is not an executable file" in error
    # an interpreter where the bug is fixed: the script is not written, though it fails here (no compile: cpmant's
    # static cache fails in eager generate)
    fixed = fake_python(tmp_path, 0, '{"status": "fixed"}')
    assert command_line.main(["repro", str(path), "-o", str(tmp_path / "out"), "--python", str(fixed),
                              "--reduce-budget", "0"]) == 0
    assert "not written" in capsys.readouterr().out and (tmp_path / "calls").is_file()
    index = json.loads((tmp_path / "out" / INDEX_NAME).read_text())
    assert index["verified_with"] == str(fixed) and "ran without failing" in index["reproducers"][0]["reason"]
    assert not list((tmp_path / "out").glob("*.py"))


def _real_check(model: str, level: str, tokens: int = 2) -> CheckResult:
    """The check as the suite records it, run here: its sites are those of the installed transformers."""
    from pytest_fullgraph.check.run import run_check
    from pytest_fullgraph.models import session_registry

    return run_check(session_registry()[model].build(), model, "greedy", level, "eager", tokens, diagnose=False)


@pytest.mark.parametrize(("model", "level", "expected"), [
    # a static cache written past its end (run in a fresh process by test_repro_option's run too)
    pytest.param("cpmant", "forward", "IndexError at transformers/cache_utils.py", marks=pytest.mark.breadth),
    ("ctrl", "forward", "transformers/models/ctrl/modeling_ctrl.py"),  # a break of the model's forward, backend eager
    # transformers' ExecuTorch helper feeding the first new token one position late (issue #28's finding)
    ("gemma", "hf_et_helper", "the helper's loop is at fault"),
    # zamba2's default cache: its logits leave float64 from the first decode step (issue #46's finding)
    ("zamba2", "cache", "the default cache is off at step 1"),
])
@pytest.mark.breadth
def test_a_written_reproducer_fails_the_recorded_way_in_a_fresh_process(model: str, level: str, expected: str,
                                                                         tmp_path: Path) -> None:
    tokens = {"hf_et_helper": 4, "cache": 16}.get(level, 2)  # the helper errs from token 2
    result = _real_check(model, level, tokens)
    assert result.outcome in ("error", "break", "mismatch"), result.message
    entries = reproduce([result], {}, tmp_path, reduce_s=0, say=lambda line: None)
    assert len(entries) == 1 and entries[0].written, entries[0].reason
    text = (tmp_path / entries[0].written).read_text()
    assert "pytest_fullgraph" not in text.replace("python -m pytest_fullgraph repro", "")
    assert len(text.splitlines()) <= MAX_LINES
    # verified as a maintainer runs it: a fresh `python -I` in an empty directory, pytest_fullgraph unimportable
    assert entries[0].exit_status == 1 and entries[0].printed.startswith("BUG: ")
    assert expected in entries[0].printed
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert index["reproducers"][0]["checks"] == [result.check_id]


PROJECT_MODEL = """\
from transformers import LlamaForCausalLM


class Branchy(LlamaForCausalLM):
    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        if out.logits.sum() > 0:  # a data-dependent branch: a graph break
            out.logits = out.logits * 1
        return out
"""


def _project_module(path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``text`` imported from ``path`` as a project's module, in ``sys.modules`` for this test (where Python finds
    a class's file)."""
    import importlib.util

    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.breadth
def test_a_projects_class_is_rebuilt_from_its_file_in_a_fresh_process(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that does not import pytest_fullgraph is imported as it is; the script needs it, torch and
    transformers."""
    from pytest_fullgraph.check.run import run_check
    from pytest_fullgraph.models import Registry, build_tiny

    module = _project_module(tmp_path / "fullgraph_project_model.py", PROJECT_MODEL, monkeypatch)
    registry = Registry()
    registry.register("branchy", lambda: build_tiny("llama", model_class=module.Branchy))
    result = run_check(registry["branchy"].build(), "branchy", "greedy", "forward", "eager", 2, diagnose=False)
    assert result.outcome == "break", result.message
    entries = reproduce([result], {}, tmp_path / "out", reduce_s=0, say=lambda line: None, registry=registry)
    assert entries[0].written and entries[0].exit_status == 1, entries[0].reason
    text = (tmp_path / "out" / entries[0].written).read_text()
    assert f"project = project_module({str(tmp_path / 'fullgraph_project_model.py')!r})" in text
    assert "stand-in" not in text and "import importlib.util\n" in text


def test_a_class_a_script_cannot_import_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from pytest_fullgraph.models import Registry
    from pytest_fullgraph.models.oracle import OracleForCausalLM
    from pytest_fullgraph.repro.case import build_case, project_classes

    module = _project_module(tmp_path / "fullgraph_nested_model.py",
                             "def make():\n    class Inner: pass\n    return Inner\n", monkeypatch)
    assert project_classes([LlamaForCausalLM, LlamaConfig]) == {}
    assert "defined inside make in" in str(project_classes([module.make()]))
    assert "pytest_fullgraph's own" in str(project_classes([OracleForCausalLM]))
    hidden = type("HiddenForCausalLM", (), {"__module__": "transformers.models.hidden.modeling_hidden"})
    assert "cannot be imported from transformers' top level" in str(project_classes([hidden]))
    unregistered = check(model="branchy", outcome="break")
    unregistered.model_class, unregistered.model_file = "Branchy", "/home/me/project/conftest.py"
    assert build_case(unregistered, Registry()) == (
        "model 'branchy' is not registered here: its class Branchy is in /home/me/project/conftest.py; run pytest "
        "with --fullgraph-repro=DIR where that file registers it")


def test_a_script_that_does_not_fail_the_recorded_way_is_not_written(tmp_path: Path) -> None:
    result = _real_check("cpmant", "forward")
    result.message = result.message.replace("IndexError", "KeyError")  # a report that says otherwise
    lines: list[str] = []
    entries = reproduce([result], {}, tmp_path, reduce_s=0, say=lines.append)
    assert not entries[0].written and "KeyError" in entries[0].reason and "IndexError" in entries[0].reason
    assert lines[0].startswith("not written") and not list(tmp_path.glob("*.py"))


def test_the_subcommand_runs_as_a_module(tmp_path: Path) -> None:
    completed = subprocess.run([sys.executable, "-m", "pytest_fullgraph", "repro", "--help"], capture_output=True,
                               text=True, check=False, timeout=120)
    assert completed.returncode == 0 and "--reduce-budget" in completed.stdout
