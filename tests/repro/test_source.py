"""What a reproducer script's text holds (``repro.source``): Python that imports torch and transformers only, a
project's classes imported from their files, literals broken between items, the result line printed last."""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any

import pytest

from pytest_fullgraph.repro.command import MAX_LINES
from pytest_fullgraph.repro.plan import TEMPLATES, Expected
from pytest_fullgraph.repro.source import Script, assignment, parse_result, render
from pytest_fullgraph.repro.verify import imports_package


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
            "cache_divergence": "mismatch", "static_error": "error", "eager_error": "error"}.get(template, "crash")
    text = render(script(template, kind))
    tree = ast.parse(text)
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names} | {node.module.split(".")[0] for node in ast.walk(tree)
                                         if isinstance(node, ast.ImportFrom) and node.module}
    standard = {"copy", "json", "math", "re", "sys", "traceback"}  # the standard library, no more
    assert roots <= standard | {"torch", "transformers"} and not imports_package(text)
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    helpers = {"where", "found_in", "finish", "positions_loop", "recompute"}
    assert called & helpers <= defined  # each helper it calls it defines
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


def test_a_cache_script_without_float64_bounds_rounding_by_rounding_steps_alone() -> None:
    text = render(script("cache_divergence", "mismatch", float64=False))
    assert "noise = None  # float64 cannot run this model" in text and ".double()  # float64" not in text
    assert "reference" not in text.split("def main", 1)[1].split("with torch.no_grad", 1)[0]
    ast.parse(text)
