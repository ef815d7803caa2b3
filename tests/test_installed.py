"""The suite ships in the package: selecting models in any directory collects it, once, and a run that
selects models but collects no check says why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_fullgraph.plugin import shipped_suite
from tests import REPOSITORY, readme_summary
from tests.conftest import checks_by_id, read_report


def test_selecting_models_in_an_empty_project_runs_the_shipped_suite(toy_project: pytest.Pytester,
                                                                     tmp_path: Path) -> None:
    assert not list(toy_project.path.glob("test_*.py"))  # no test file of the user's
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-backend=eager", "-k", "greedy and forward",
                                   "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1)
    assert list(checks_by_id(read_report(tmp_path))) == ["toy-greedy-forward"]


@pytest.mark.parametrize(("args", "why"), [
    (["test_mine.py"], "test paths on the command line replace the built-in suite (add --pyargs "
                       "pytest_fullgraph.suite, or --fullgraph-suite=on)"),
    (["--fullgraph-suite=off"], "--fullgraph-suite=off, and no collected test uses the fullgraph fixtures"),
    (["-k", "nothing_matches"], "every conformance check was deselected (-k, -m or --deselect)"),
])
def test_models_selected_but_no_check_collected_says_why(pytester: pytest.Pytester, args: list[str],
                                                         why: str) -> None:
    pytester.makepyfile(test_mine="def test_mine():\n    pass\n")
    result = pytester.runpytest("--fullgraph-models=llama", "--collect-only", *args)
    result.stdout.fnmatch_lines([f"fullgraph: models llama selected but no conformance check collected: {why}"])


def test_suite_on_adds_the_checks_to_explicit_paths(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="def test_mine():\n    pass\n")
    result = pytester.runpytest("test_mine.py", "--fullgraph-models=llama", "--fullgraph-suite=on",
                                "--collect-only", "-q")
    collected = [line for line in result.outlines if "::" in line]
    assert "test_mine.py::test_mine" in collected
    assert sum("test_conformance.py::test_generation_compiles_exactly[llama-" in line for line in collected) == 20


@pytest.mark.parametrize(("ini", "args"), [
    ("testpaths = {suite}\n", []),  # this repository's pyproject.toml: testpaths = ["suites"]
    ("", ["{suite}"]),  # a directory that holds the suite's files
])
def test_suite_off_collects_none_of_the_suite_even_through_testpaths_or_its_directory(
        pytester: pytest.Pytester, ini: str, args: list[str]) -> None:
    suite = str(shipped_suite.suite_directory())
    pytester.makeini("[pytest]\n" + ini.format(suite=suite))
    arguments = [argument.format(suite=suite) for argument in args]

    def collected(*more: str) -> list[str]:
        result = pytester.runpytest(*arguments, "--fullgraph-models=llama", "--collect-only", "-q", *more)
        return [line for line in result.outlines if "::" in line]

    assert any("test_conformance.py::" in line for line in collected("--fullgraph-suite=on"))
    assert collected("--fullgraph-suite=off") == []


def test_an_installation_without_the_suite_is_a_usage_error_saying_what_to_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not an assertion inside pytest_configure (an INTERNALERROR): seen with a package path added by hand."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "pytest_fullgraph.suite" else real(name, *args))
    with pytest.raises(pytest.UsageError, match=r"^pytest_fullgraph.suite \(the conformance suite\) is not "
                                                r"importable .* --fullgraph-suite=off"):
        shipped_suite.suite_directory()


@pytest.fixture(scope="module")
def quick_start_collected() -> list[str]:
    """The test ids the quick start's command collects in this repository (one fresh collection for both tests
    that read it)."""
    completed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "--fullgraph-models=llama,gemma"], cwd=REPOSITORY, capture_output=True, text=True,
                               check=False)
    ids = [line for line in completed.stdout.splitlines() if "::" in line]
    assert ids, completed.stdout + completed.stderr
    return ids


def test_in_this_repository_the_suite_is_collected_once(quick_start_collected: list[str]) -> None:
    """Each test id once, all from the shipped suite (sharing the quick start's collection below)."""
    ids = quick_start_collected
    # per model: 4 scenarios x 5 levels, the property test's four parts, the CUDA and shapes tests for each loop form
    assert len(ids) == len(set(ids)) == 2 * (20 + 4 + 2 + 2), ids
    assert all(line.startswith("suites/") for line in ids)


@pytest.mark.breadth  # tests/levels/test_levels.py decides the same without a fresh collection
def test_the_slow_tier_adds_the_long_while_and_cudagraphs_levels() -> None:
    """while64, while256 and the cudagraphs levels are collected with RUN_SLOW only: a pull request's tier does
    not pay for them."""
    completed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "--fullgraph-models=llama", "suites/test_conformance.py"], cwd=REPOSITORY,
                               capture_output=True, text=True, check=False, env={**os.environ, "RUN_SLOW": "1"})
    levels = {line.rsplit("-", 2)[1] for line in completed.stdout.splitlines() if "::" in line}
    assert levels == {"forward", "generate", "decode", "export", "while", "while64", "while256", "cudagraphs",
                      "cudagraphs_while"}, completed.stdout


#: The README's "Your model, your repository" conftest, at a size that keeps this test quick.
USER_CONFTEST = """\
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from pytest_fullgraph import register_model

def build_mine():
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()

register_model("mine", build_mine)
"""


@pytest.mark.breadth
def test_a_non_editable_install_runs_the_suite_from_site_packages(tmp_path: Path) -> None:
    """The package as pip installs it (a built wheel, not this checkout), in a project outside the repository,
    on the user's own model in float32 and bfloat16 (README: "Your model, your repository")."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(REPOSITORY)], check=True, capture_output=True)
    assert (target / "pytest_fullgraph" / "suite" / "test_conformance.py").is_file()
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(USER_CONFTEST)
    environment = {**os.environ, "PYTHONPATH": str(target)}  # the installed copy shadows this checkout
    command = [sys.executable, "-m", "pytest", "--fullgraph-models=mine", "--fullgraph-dtype=float32,bfloat16",
               "-k", "greedy and forward", "--fullgraph-backend=eager", "-p", "no:cacheprovider", "-v"]
    tree = subprocess.run([*command, "--collect-only"], cwd=project, env=environment, capture_output=True,
                          text=True, check=False).stdout
    assert "<Dir site>" in tree and "<Package suite>" in tree, tree  # collected from the installed package
    completed = subprocess.run(command, cwd=project, env=environment, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    for dtype in ("float32", "bfloat16"):
        assert f"test_conformance.py::test_generation_compiles_exactly[mine-greedy-forward-{dtype}] PASSED" \
            in completed.stdout


def _shell_lines(markdown: str) -> list[str]:
    """The command lines of a Markdown page's ``bash`` blocks, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", markdown, flags=re.DOTALL)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_installs_torch_as_the_constraints_pin_it_and_ci_runs_its_commands() -> None:
    """The README's install cannot drift from the pins or from what CI runs (CI installs exactly as it says)."""
    readme = _shell_lines((REPOSITORY / "README.md").read_text())
    pins = dict(line.split("==") for line in (REPOSITORY / "constraints-cpu.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    cpu_index = [line for line in readme if "download.pytorch.org/whl/cpu" in line and "torch==" in line]
    assert cpu_index and all(f"torch=={pins['torch']} " in line for line in cpu_index), cpu_index
    ci = [line.removeprefix("python -m ") for line in (REPOSITORY / ".ci" / "run").read_text().splitlines()]
    assert 'pip install -c constraints-cpu.txt -e ".[test]"' in readme and \
        'pip install -c constraints-cpu.txt -e ".[test]"' in ci
    assert "pytest tests -n 2" in readme and any(line.startswith("pytest tests -n 2") for line in ci)
    # outside the checkout there is no constraints file to point at
    assert not [line for line in readme if "-c constraints-cpu.txt" in line and " -e " not in line]


def test_the_quick_starts_promised_xfails_and_skips_are_what_it_collects(quick_start_collected: list[str]) -> None:
    """README's promised summary: its xfails are the generate-level checks (expected breaks), its skips the CUDA-graph
    property tests (no GPU), and the three add up to what the command collects. The run's own summary line is
    compared with the promise by the workflow's fast job (``tests/readme_summary.py``)."""
    promise = readme_summary.promised((REPOSITORY / "README.md").read_text())
    ids = quick_start_collected
    assert set(promise) == {"passed", "skipped", "xfailed"}
    assert len(ids) == sum(promise.values()), ids
    assert sum("-generate-" in line for line in ids) == promise["xfailed"]
    assert sum("cudagraphs_matches_eager" in line for line in ids) == promise["skipped"]


def test_a_runs_summary_is_compared_with_the_promise_outcome_by_outcome(tmp_path: Path) -> None:
    readme = "## Quick start\nending in `44 passed, 4 skipped,\n8 xfailed`.\n"
    (tmp_path / "README.md").write_text(readme)
    same = "....\n= 44 passed, 4 skipped, 8 xfailed, 4 warnings in 176.83s (0:02:56) =\n"
    (tmp_path / "same.log").write_text(same)
    (tmp_path / "worse.log").write_text(same.replace("44 passed, 4 skipped, 8 xfailed", "43 passed, 1 failed, "
                                                                                          "4 skipped, 8 xfailed"))
    assert readme_summary.main([str(tmp_path / "same.log"), str(tmp_path / "README.md")]) == 0
    assert readme_summary.main([str(tmp_path / "worse.log"), str(tmp_path / "README.md")]) == 1


def test_ci_runs_only_commands_the_readme_gives() -> None:
    """`.ci/run` installs and tests exactly as the README says: each of its commands is one of the README's."""
    readme = {line.removeprefix("python -m ") for line in _shell_lines((REPOSITORY / "README.md").read_text())}
    ci = [line.strip() for line in (REPOSITORY / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("python -m ")]
    assert len(ci) == 3
    for line in ci:
        command = line.removeprefix("python -m ")
        assert any(command.startswith(given) or given.startswith(command) for given in readme), line


def test_the_readme_stays_a_page_a_newcomer_reads() -> None:
    """README is the front door: past 350 lines a topic belongs in docs/ with a link."""
    lines = (REPOSITORY / "README.md").read_text().splitlines()
    assert len(lines) <= 350, f"README.md has {len(lines)} lines: move a topic to docs/"
