"""The CI workflow is valid GitHub Actions, and every command it runs names options and entry points that exist:
each pytest command line is dry-run with ``--collect-only``, each ``python -m pytest_fullgraph`` one run."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests import REPOSITORY

WORKFLOW = REPOSITORY / ".github" / "workflows" / "fullgraph.yml"
#: What a dry run puts for the workflow's expressions and variables.
SAMPLE_VALUES = {"matrix.shard": "1", "matrix.torch": "2.13.0", "github.run_number": "7",
                 "inputs.models || 'all'": "llama,gemma", "inputs.models || 'popular'": "llama,gemma"}


def workflow() -> dict[Any, Any]:
    return dict(yaml.safe_load(WORKFLOW.read_text()))


def commands() -> list[tuple[str, str, dict[str, str]]]:
    """(job, command line, environment) of every ``python -m pytest...`` line of every ``run:`` step."""
    found = []
    for job_name, job in workflow()["jobs"].items():
        for step in job["steps"]:
            environment = {**job.get("env", {}), **step.get("env", {})}
            for line in str(step.get("run", "")).splitlines():
                line = line.strip()
                if line.startswith("python -m pytest"):
                    found.append((job_name, line, {key: str(value) for key, value in environment.items()}))
    return found


def substituted(line: str, environment: dict[str, str]) -> list[str]:
    def expression(match: re.Match[str]) -> str:
        return SAMPLE_VALUES.get(match.group(1).strip(), "x")

    # the shell's handling of the status, redirections and pipes
    line = line.split(" || status=")[0].split(" >> ")[0].split(" | ")[0]
    line = re.sub(r"\$\{\{(.*?)\}\}", expression, line)
    line = line.replace('"$MODELS"', SAMPLE_VALUES["inputs.models || 'all'"])
    line = line.replace('"$GITHUB_STEP_SUMMARY"', "summary.md").replace("$EXPECT", "fast-torch2.13.0")
    return shlex.split(line)


def test_the_workflow_is_valid_github_actions() -> None:
    # the interpreter's own scripts first: a venv's python run without activating it has them off PATH
    validator = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which(
        "check-jsonschema")
    assert validator, "check-jsonschema is a test dependency: pip install -e '.[test]'"
    completed = subprocess.run([validator, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_pull_requests_run_the_fast_tier_and_the_schedule_the_slow_one_over_every_model() -> None:
    data = workflow()
    triggers: dict[str, Any] = data["on"] if "on" in data else data[True]  # YAML 1.1 reads the key `on` as true
    assert {"pull_request", "schedule", "workflow_dispatch"} <= set(triggers)
    assert triggers["workflow_dispatch"]["inputs"]["models"]["default"] == "all"
    jobs = data["jobs"]
    assert jobs["fast"]["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    assert len(jobs["slow"]["strategy"]["matrix"]["torch"]) >= 2  # the torch-version axis
    assert jobs["slow"]["env"]["RUN_SLOW"] == "1"
    assert jobs["collate"]["needs"] == ["fast", "slow"]
    # the plugin's own tests, the slow ones included, on every pull request
    assert jobs["plugin"]["if"] == "github.event_name == 'pull_request'"
    assert any(job == "plugin" and "--slow-tests" in line for job, line, _ in commands())
    shards = {job: len(jobs[job]["strategy"]["matrix"]["shard"]) for job in ("fast", "slow")}
    for job, count in shards.items():
        assert any(f"--fullgraph-shard=${{{{ matrix.shard }}}}/{count}" in line for name, line, _ in commands()
                   if name == job), f"{job} must divide its models into its {count} matrix shards"
    uploads = [step for job in ("fast", "slow") for step in jobs[job]["steps"]
               if str(step.get("uses", "")).startswith("actions/upload-artifact")]
    assert all(step["if"] == "always()" for step in uploads)  # a failing shard still uploads its report


@pytest.mark.parametrize(("job", "line", "environment"), commands(),
                         ids=[f"{job}-{' '.join(line.split()[2:4])}" for job, line, _ in commands()])
@pytest.mark.breadth
def test_every_command_names_options_and_entry_points_that_exist(job: str, line: str, environment: dict[str, str],
                                                                 tmp_path: Path) -> None:
    argv = substituted(line, environment)
    env = {**os.environ, **{key: value for key, value in environment.items() if "${{" not in value}}
    if argv[:3] == ["python", "-m", "pytest"]:
        # the dry run's (empty) report goes to a temporary directory, never into the repository
        argv = [f"--fullgraph-report={tmp_path}" if arg.startswith("--fullgraph-report=") else arg for arg in argv]
        completed = subprocess.run([sys.executable, *argv[1:], "--collect-only", "-q"], cwd=REPOSITORY, env=env,
                                   capture_output=True, text=True, check=False, timeout=300)
        if "--fullgraph-device=cuda" in argv and not torch.cuda.is_available():
            # the GPU job's line is known to pytest and refused here only for the missing GPU
            assert completed.returncode == pytest.ExitCode.USAGE_ERROR, completed.stdout[-2000:]
            assert "--fullgraph-device='cuda': torch.cuda.is_available() is False" in completed.stderr
            return
        assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
        if "tests" in argv:  # the plugin's own tests, not the suite
            assert "tests/levels/test_artifacts.py::" in completed.stdout
            return
        assert "test_generation_compiles_exactly" in completed.stdout
    elif "recheck" in argv:  # rerunning 20 checks is the weekly job's; its options and reports must exist
        from pytest_fullgraph.cli import parser

        expanded = [str(path) for arg in argv[3:] for path in (sorted(REPOSITORY.glob(arg)) if "*" in arg else [arg])]
        arguments = parser().parse_args(expanded)
        assert arguments.report_command == "recheck" and arguments.sample == 20
        assert len(arguments.reports) > 50 and all(Path(path).is_file() for path in arguments.reports)
    else:
        completed = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True,
                                   text=True, check=False, timeout=300)
        assert completed.returncode != 2, completed.stderr  # 2: an option or command that does not exist
        assert "usage:" not in completed.stderr


def test_the_torch_axes_name_only_releases_measured_to_install_and_collate_expects_each() -> None:
    """A release on an axis must have its row in the torch-release table (bench/reports/releases), which is
    measured by installing it; the collate job expects one merged group per release of the slow axis."""
    jobs = workflow()["jobs"]
    measured = {path.name.removeprefix("torch") for path in (REPOSITORY / "bench" / "reports" / "releases").iterdir()
                if (path / "fullgraph-report.json.gz").is_file()}
    for job in ("fast", "slow"):
        axis = set(jobs[job]["strategy"]["matrix"]["torch"])
        assert axis <= measured, f"{job}: {sorted(axis - measured)} not in the release table"
    expect = next(step["env"]["EXPECT"] for step in jobs["collate"]["steps"] if "EXPECT" in step.get("env", {}))
    slow_groups = expect.split("||")[-1].strip(" '}").split()
    assert slow_groups == [f"slow-torch{release}" for release in jobs["slow"]["strategy"]["matrix"]["torch"]]


def test_the_pull_request_tier_is_gated_inside_the_run_against_a_committed_baseline() -> None:
    """Each release of the fast axis has its baseline committed, and the fast job's pytest reads it: a check worse
    than its baseline fails the job itself, not only the collate job at the end."""
    jobs = workflow()["jobs"]
    lines = [line for job, line, _ in commands() if job == "fast" and "--fullgraph-models=popular" in line]
    assert len(lines) == 1 and "--fullgraph-baseline=baselines/fast-torch${{ matrix.torch }}.json" in lines[0]
    for release in jobs["fast"]["strategy"]["matrix"]["torch"]:
        assert (REPOSITORY / "baselines" / f"fast-torch{release}.json").is_file()
