"""``python -m pytest_fullgraph repro``: which script a failing check gets (from the ``CheckResult`` alone), what the
script's text holds, how it is shrunk, and, end to end on two real tiny models, that a written script fails the
recorded way in a fresh process where pytest_fullgraph cannot be imported, and that one that does not is not
written."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_fullgraph import __main__ as command_line
from pytest_fullgraph.core.results import BreakRecord, CheckResult
from pytest_fullgraph.repro.case import Case
from pytest_fullgraph.repro.command import INDEX_NAME, MAX_LINES, reproduce, select
from pytest_fullgraph.repro.plan import TEMPLATES, Expected, Plan, grouped, plan_for
from pytest_fullgraph.repro.reduce import EDITS, fewer_keys, reduce
from pytest_fullgraph.repro.source import Script, assignment, parse_result, render
from pytest_fullgraph.repro.verify import imports_package, run_isolated

CACHE_ERROR = ("eager generation failed at transformers/cache_utils.py:487: IndexError: index_copy_(): index 11 is "
               "out of bounds for dimension 2 with size 11; model.generate with the default cache works: the model's "
               "static-cache path fails (a bug of the model or transformers, not of the compiler)")
LOOP_CACHE_ERROR = ("eager generation by fullgraph_generate failed at transformers/cache_utils.py:487: IndexError: "
                    "index_copy_(): index 11 is out of bounds for dimension 2 with size 11; model.generate with a "
                    "static cache fails too (IndexError: index_copy_(): index 11 is out of bounds for dimension 2 with "
                    "size 11): the model's static-cache path, not the loop")


def check(model: str = "cpmant", scenario: str = "greedy", level: str = "forward", outcome: str = "error",
          message: str = CACHE_ERROR, stage: str = "eager generation",
          record: BreakRecord | None = None) -> CheckResult:
    return CheckResult(model, scenario, level, "aot_eager", 4, outcome, message, first_break=record, stage=stage)


def record(gb_type: str = "UserError", file: str = "transformers/models/qwen4_exp/modeling_qwen4_exp.py",
           line: int = 752, origin: str = "model", cause: BreakRecord | None = None) -> BreakRecord:
    return BreakRecord("torch._dynamo.exc.UserError", gb_type, None, "Could not guard", file, line, "forward", "",
                       origin, cause=cause)


def test_a_static_cache_error_is_shown_by_generate_with_a_static_cache() -> None:
    plan = plan_for(check())
    assert isinstance(plan, Plan) and plan.templates == ("static_error",)
    assert plan.expected == Expected("error", "IndexError", "transformers/cache_utils.py:487", plan.expected.message)


def test_our_loop_failing_where_generate_fails_alike_is_the_same_cause_and_a_loop_fault_is_not_written() -> None:
    loop = plan_for(check(level="decode", stage="eager generation by fullgraph_generate", message=LOOP_CACHE_ERROR))
    assert isinstance(loop, Plan) and loop.expected.type == "IndexError"
    assert loop.expected.where == "transformers/cache_utils.py:487"  # the loop's error is generate's, so its site
    other = LOOP_CACHE_ERROR.replace("(IndexError: index_copy_(): index 11", "(IndexError: another text")
    assert plan_for(check(level="decode", stage="eager generation by fullgraph_generate", message=other)
                    ).expected.where == ""  # type: ignore[union-attr]
    groups, skipped = grouped([check(), check(level="decode", stage="eager generation by fullgraph_generate",
                                             message=LOOP_CACHE_ERROR), check(scenario="sample")])
    assert len(groups) == 1 and not skipped and groups[0].representative.check_id == "cpmant-greedy-forward-float32"
    fault = (LOOP_CACHE_ERROR.split("; model.generate")[0]
             + "; model.generate with a static cache works, so the loop is at fault")
    reason = plan_for(check(level="decode", stage="eager generation by fullgraph_generate", message=fault))
    assert isinstance(reason, str) and "pytest_fullgraph's loop" in reason


@pytest.mark.parametrize(("result", "templates", "expected"), [
    (check(level="generate", outcome="break", stage="compiled generation",
           record=record("Data-dependent branching", "transformers/generation/utils.py", 2413, "eos")),
     ("generate_break",), Expected("break", "Data-dependent branching", "transformers/generation/utils.py:2413")),
    (check(model="llama4", outcome="error", stage="compiled generation",
           message="nothing was compiled: transformers ran level 'forward' eagerly (model type 'llama4_text' ...)"),
     ("not_compiled",), Expected("not_compiled")),
    (check(model="qwen4_exp", outcome="break", stage="compiled generation", record=record()),
     ("forward_compile", "compiled_generate"),
     Expected("break", "UserError", "transformers/models/qwen4_exp/modeling_qwen4_exp.py:752")),
    (check(model="mpt", level="decode", outcome="break", stage="compiled generation",
           record=record("Unsupported Tensor.item() call", "transformers/models/mpt/modeling_mpt.py", 121),
           message="Unsupported Tensor.item() call [GB0124] at ... (with fullgraph=True the compiler crashed instead: "
                   "InternalTorchDynamoError at pytest_fullgraph/loop/decode.py:319 in fullgraph_generate (loop): "
                   "PendingUnbackedSymbolNotFound: Pending unbacked symbols {u2} not in returned outputs)"),
     ("forward_compile",),
     Expected("crash", "InternalTorchDynamoError: PendingUnbackedSymbolNotFound",
              "transformers/models/mpt/modeling_mpt.py:121")),
    (check(model="git", level="while", outcome="break", stage="compiled generation",
           record=record("UncapturedHigherOrderOpError", "transformers/models/git/modeling_git.py", 840,
                         cause=record("Data-dependent branching", "transformers/models/git/modeling_git.py", 838))),
     ("forward_compile",),
     Expected("break", "Data-dependent branching", "transformers/models/git/modeling_git.py:838")),
    (check(model="git", level="while", outcome="break", stage="compiled generation",
           record=record("UncapturedHigherOrderOpError", "transformers/models/git/modeling_git.py", 840)),
     ("forward_compile",), Expected("break", "", "transformers/models/git/modeling_git.py:840")),
    (check(level="forward", outcome="mismatch", stage="compiled generation"), ("forward_mismatch",),
     Expected("mismatch")),
    (check(model="llama", level="hf_et_helper", outcome="mismatch", stage="compiled generation"), ("helper_mismatch",),
     Expected("mismatch")),
])
def test_each_failure_gets_the_script_that_shows_it(result: CheckResult, templates: tuple[str, ...],
                                                    expected: Expected) -> None:
    plan = plan_for(result)
    assert isinstance(plan, Plan) and plan.templates == templates
    assert (plan.expected.kind, plan.expected.type, plan.expected.where) == (expected.kind, expected.type,
                                                                             expected.where)


@pytest.mark.parametrize(("result", "words"), [
    (check(outcome="pass"), "not a failure"),
    (check(level="decode", outcome="mismatch", stage="compiled generation"), "loop"),
    (check(level="decode", outcome="break", stage="compiled generation",
           record=record("UserError", "transformers/generation/logits_process.py", 1099, "sampling")), "only"),
    (check(stage="build", message="model 'x' failed to build: ValueError: no"), "build"),
    (check(level="mine"), "not built in"),
    (check(level="hf_et_helper", stage="compiled generation"),
     "--fullgraph-levels=hf_et_helper --fullgraph-models=cpmant"),
    (check(level="hf_onnx", outcome="mismatch", stage="compiled generation"),
     "hf_onnx: the check shows it (`pytest --fullgraph-levels=hf_onnx --fullgraph-models=cpmant -k greedy`)"),
])
def test_failures_a_script_cannot_show_say_why(result: CheckResult, words: str) -> None:
    reason = plan_for(result)
    assert isinstance(reason, str) and words in reason


def test_a_found_failure_matches_by_kind_type_and_site() -> None:
    expected = Expected("error", "IndexError", "transformers/cache_utils.py:487")
    assert expected.differs({"status": "bug", **expected.as_found()}) == ""
    assert "KeyError" in expected.differs({"status": "other", "kind": "error", "type": "KeyError", "where": "x.py:1"})
    assert "ran without failing" in expected.differs({"status": "fixed"})
    assert expected.differs({"status": "bug", "kind": "error", "type": "IndexError", "where": "elsewhere.py:1"})
    site_only = Expected("break", "", "transformers/x.py:3")  # a higher-order op given up: its site says it
    assert site_only.differs({"kind": "break", "type": "GB", "where": "transformers/x.py:3"}) == ""


def test_a_project_file_is_matched_by_its_end_on_the_recorded_line() -> None:
    """A conftest's file is relative to the run's directory in the report, absolute in a script's output."""
    expected = Expected("break", "Data-dependent branching", "conftest.py:9")
    found = {"kind": "break", "type": "Data-dependent branching", "where": "/home/me/project/conftest.py:9"}
    assert expected.differs(found) == ""
    assert expected.differs({**found, "where": "/home/me/project/conftest.py:12"})
    assert expected.differs({**found, "where": "/home/me/project/myconftest.py:9"})


def script(template: str, kind: str = "error", **changes: Any) -> Script:
    expected = Expected(kind, "IndexError" if kind == "error" else "UserError", "transformers/x.py:1")
    base = Script(template, expected, ("m-greedy-forward-float32", "m-sample-forward-float32"), "LlamaForCausalLM",
                  "LlamaConfig", {"hidden_size": 16, "layer_types": ["full_attention"] * 30, "rope_theta": 10.0},
                  [[5, 6, 7]], [[1, 1, 1]], {"max_new_tokens": 1}, cache_len=3, versions="Recorded with x",
                  reduced=("layers 2→1",))
    return replace(base, **changes)


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_every_script_is_python_that_imports_torch_and_transformers_only(template: str) -> None:
    kind = {"not_compiled": "not_compiled", "forward_mismatch": "mismatch", "helper_mismatch": "mismatch",
            "static_error": "error", "eager_error": "error"}.get(template, "crash")
    text = render(script(template, kind))
    tree = ast.parse(text)
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names} | {node.module.split(".")[0] for node in ast.walk(tree)
                                         if isinstance(node, ast.ImportFrom) and node.module}
    assert roots <= {"json", "re", "sys", "traceback", "torch", "transformers"} and not imports_package(text)
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert called & {"where", "found_in", "finish", "positions_loop"} <= defined  # each helper it calls it defines
    assert text.startswith("# Reproducer of m-greedy-forward-float32 (+1 check failing alike)")
    assert "layers 2→1" in text and len(text.splitlines()) <= MAX_LINES


@pytest.mark.parametrize("stand_in", [False, True])
def test_a_project_class_is_imported_from_its_file_and_the_header_names_it(stand_in: bool) -> None:
    text = render(script("forward_compile", "break", model_class="BranchyLlama", stand_in=stand_in,
                         project={"BranchyLlama": "/home/me/project/conftest.py"}))
    header = " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("#"))
    assert "needs torch, transformers and the class BranchyLlama from /home/me/project/conftest.py" in header
    assert ("a stand-in takes its imports of pytest_fullgraph" in header) is stand_in
    tree = ast.parse(text)
    assert "from transformers import LlamaConfig, StaticCache" in text and not imports_package(text)
    assert "    project = project_module('/home/me/project/conftest.py')" in text
    assert "model = project.BranchyLlama(LlamaConfig(**CONFIG)).eval()" in text
    assert ("no_op" in {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}) is stand_in


def test_project_classes_of_two_files_get_a_module_each() -> None:
    text = render(script("eager_error", model_class="MyForCausalLM", config_class="MyConfig",
                         project={"MyForCausalLM": "/p/modeling.py", "MyConfig": "/p/configuration.py"}))
    assert "model = project1.MyForCausalLM(project2.MyConfig(**CONFIG)).eval()" in text
    assert "the class MyConfig from /p/configuration.py and the class MyForCausalLM from /p/modeling.py" in " ".join(
        line.removeprefix("# ") for line in text.splitlines() if line.startswith("#"))


def test_a_literal_is_broken_between_items_and_reads_back_the_same() -> None:
    value = {"a": list(range(40)), "nested": {"name": "x, y: z", "n": 1.5e-06}, "flag": None}
    lines = assignment("CONFIG", value, width=50)
    assert len(lines) > 3 and all(len(line) <= 50 for line in lines[1:-1])
    assert ast.literal_eval("\n".join(lines).removeprefix("CONFIG = ")) == value


def test_the_result_line_is_the_last_one_printed() -> None:
    assert parse_result('BUG: x\nREPRO-RESULT {"status": "bug", "kind": "error"}\n') == {"status": "bug",
                                                                                         "kind": "error"}
    assert parse_result("Traceback ...\n") is None


@dataclass
class TinyConfig:
    """A config class as transformers' behave for the reduction: defaults, ``to_dict`` and derived lists."""

    num_hidden_layers: int = 4
    hidden_size: int = 64
    rope_theta: float = 10000.0
    layer_types: list[str] | None = None

    def __post_init__(self) -> None:
        self.layer_types = self.layer_types or ["full"] * self.num_hidden_layers

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class TinyModel(torch.nn.Module):
    """Its size grows with the layers and the width, as a model's does: a reduction may never grow it."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(config.hidden_size, config.hidden_size)
                                          for _ in range(config.num_hidden_layers))


def test_reduction_keeps_the_edits_that_still_fail_and_puts_unneeded_values_back_at_their_defaults() -> None:
    config = TinyConfig(2, 32, 5.0).to_dict()
    case = Case(TinyModel, TinyConfig, config, 128, (8, 8), 1234, {"max_new_tokens": 4}, None, 4, "float32", True, True)
    # the failure needs two layers, and nothing else
    smaller = reduce(case, "static_error", lambda c: c.config["num_hidden_layers"] == 2, budget_s=60)
    assert smaller.config["num_hidden_layers"] == 2 and smaller.config["hidden_size"] == 16
    assert smaller.config["rope_theta"] == 10000.0 and smaller.prompt_lengths == (4,)
    assert smaller.max_new_tokens == 1 and smaller.generation["max_new_tokens"] == 1
    assert "hidden 32→16" in smaller.reduced and not any("layers" in text for text in smaller.reduced)
    assert fewer_keys(case, lambda c: True, deadline=0).config == case.config  # no time: nothing tried
    assert len(EDITS) >= 8


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
])
def test_a_written_reproducer_fails_the_recorded_way_in_a_fresh_process(model: str, level: str, expected: str,
                                                                         tmp_path: Path) -> None:
    result = _real_check(model, level, tokens=4 if level == "hf_et_helper" else 2)  # the helper errs from token 2
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
