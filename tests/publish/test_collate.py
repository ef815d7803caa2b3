"""``report collate``: CI's last job merges every shard per tier and torch release, gates each group against its
baseline, fails on anything missing, and says which torch release changed which verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.publish.collate import collate, group_name
from tests import REPOSITORY


def shard(tmp_path: Path, name: str, *, torch: str = "2.13.0+cpu", slow: bool = False, label: str | None = None,
          outcomes: dict[str, str]) -> Path:
    backend = "inductor" if slow else "aot_eager"
    environment: dict[str, object] = {"torch": torch, "transformers": "5.24.0", "backend": backend,
                   "max_new_tokens": 16 if slow else 4, "run_slow": slow, "strict": False, "breaks": "all",
                   "models": sorted(outcomes), "shard": label}
    checks = [CheckResult(model, "greedy", "decode", backend, 4, outcome)
              for model, outcome in outcomes.items()]
    report.write(report.Report(environment, checks), tmp_path / name)
    return tmp_path / name / report.JSON_NAME


def test_groups_are_tier_and_torch_release() -> None:
    fast = report.Report({"run_slow": False, "torch": "2.13.0+cpu"})
    assert group_name(fast) == "fast-torch2.13.0"
    assert group_name(report.Report({"run_slow": True, "torch": "2.15.0"})) == "slow-torch2.15.0"


def test_shards_merge_per_group_and_the_gate_passes_against_the_baseline(tmp_path: Path) -> None:
    paths = [shard(tmp_path, "a", label="1/2", outcomes={"llama": "pass"}),
             shard(tmp_path, "b", label="2/2", outcomes={"mpt": "break"})]
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    report.write(report.merge((str(p), report.load(p)) for p in paths), tmp_path / "base")
    (tmp_path / "base" / report.JSON_NAME).rename(baselines / "fast-torch2.13.0.json")
    collated = collate(paths, tmp_path / "merged", baselines, expect=["fast-torch2.13.0"])
    assert not collated.failed, collated.summary
    merged = report.load(collated.merged["fast-torch2.13.0"])
    assert sorted(check.model for check in merged.checks) == ["llama", "mpt"]
    text = "\n".join(collated.summary)
    assert "## fast-torch2.13.0 (2 report(s))" in text and "gate passed" in text


def test_a_regression_a_missing_shard_and_a_missing_group_each_fail(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    report.write(report.load(shard(tmp_path, "old", label="1/2", outcomes={"llama": "pass"})), tmp_path / "b")
    baselines.mkdir()
    (tmp_path / "b" / report.JSON_NAME).rename(baselines / "fast-torch2.13.0.json")
    regressed = shard(tmp_path, "new", label="1/2", outcomes={"llama": "mismatch"})
    collated = collate([regressed], tmp_path / "merged", baselines)
    text = "\n".join(collated.summary)
    assert collated.failed
    assert "REGRESSION llama-greedy-decode-float32: pass -> mismatch" in text
    assert "**fast-torch2.13.0: shard(s) 2/2 missing**" in text
    assert "To accept this run as the baseline: `cp " in text
    missing_group = collate([shard(tmp_path, "whole", outcomes={"llama": "pass"})], tmp_path / "m2",
                            expect=["fast-torch2.13.0", "slow-torch2.15.0"])
    assert missing_group.failed
    assert "**Missing:** no report of slow-torch2.15.0 arrived" in "\n".join(missing_group.summary)


def test_without_a_baseline_it_says_how_to_start_gating(tmp_path: Path) -> None:
    collated = collate([shard(tmp_path, "a", outcomes={"llama": "pass"})], tmp_path / "merged", tmp_path / "none")
    assert not collated.failed
    assert any(line.startswith("No baseline for fast-torch2.13.0: to start gating it, commit this run's merged "
                               "report: `cp ") for line in collated.summary)


def test_it_says_which_torch_release_changed_which_verdict(tmp_path: Path) -> None:
    paths = [shard(tmp_path, "old", torch="2.13.0", slow=True, outcomes={"llama": "pass", "gemma": "break"}),
             shard(tmp_path, "new", torch="2.15.0", slow=True, outcomes={"llama": "break", "gemma": "pass"}),
             shard(tmp_path, "mid", torch="2.14.1", slow=True, outcomes={"llama": "pass", "gemma": "break"})]
    text = "\n".join(collate(paths, tmp_path / "merged").summary)
    assert "## What changed from slow-torch2.13.0 to slow-torch2.14.1\n\n- no verdict changed" in text
    section = text.split("## What changed from slow-torch2.14.1 to slow-torch2.15.0")[1]
    assert "REGRESSION llama-greedy-decode-float32: pass -> break" in section
    assert "IMPROVED gemma-greedy-decode-float32: break -> pass" in section


def test_an_unreadable_report_fails_the_run_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    collated = collate([bad, shard(tmp_path, "a", outcomes={"llama": "pass"})], tmp_path / "merged")
    assert collated.failed
    assert f"**Unreadable report:** {bad}: not valid JSON" in "\n".join(collated.summary)


def test_the_command_appends_the_summary_and_exits_1_when_the_gate_fails(tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier steps\n")
    good = shard(tmp_path, "a", label="1/1", outcomes={"llama": "pass"})
    command = [sys.executable, "-m", "pytest_fullgraph", "report", "collate", str(good), "-o", str(tmp_path / "out"),
               "--summary", str(summary)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert summary.read_text().startswith("earlier steps\n## fast-torch2.13.0 (1 report(s))")
    assert "collate: gate passed" in completed.stdout
    failing = subprocess.run([*command, "--expect", "slow-torch2.13.0"], capture_output=True, text=True, check=False)
    assert failing.returncode == 1 and "collate: gate FAILED" in failing.stdout
    assert json.loads((tmp_path / "out" / "fast-torch2.13.0" / report.JSON_NAME).read_text())["environment"][
        "shard"] == ["1/1"]


@pytest.mark.parametrize("arguments", [["-o", "x"], []])
def test_no_reports_at_all_fail(tmp_path: Path, arguments: list[str]) -> None:
    completed = subprocess.run([sys.executable, "-m", "pytest_fullgraph", "report", "collate", *arguments],
                               capture_output=True, text=True, check=False, cwd=tmp_path)
    assert completed.returncode in (1, 2)  # 2: argparse's usage error when -o is missing
    assert ("No reports" in completed.stdout) if arguments else ("-o/--output" in completed.stderr)


def test_the_committed_baseline_gates_every_check_the_pull_request_tier_runs() -> None:
    """The workflow gates the fast tier over ``popular`` against ``baselines/fast-torch2.13.0.json``: a check the
    tier runs that the baseline lacks would go ungated, and one the baseline has that the tier dropped would fail
    every pull request as MISSING. The tier's checks are what pytest collects for it."""
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "--fullgraph-models=popular", "suites/test_conformance.py"],
                               capture_output=True, text=True, check=False, cwd=REPOSITORY)
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    tier = {line.split("[", 1)[1].rstrip("]") for line in collected.stdout.splitlines()
            if line.startswith("suites/test_conformance.py::test_generation_compiles_exactly[")}
    baseline = report.load(REPOSITORY / "baselines" / "fast-torch2.13.0.json")
    assert group_name(baseline) == "fast-torch2.13.0"
    assert tier and {check.check_id for check in baseline.checks} == tier
    assert not baseline.environment.get("shards_missing")


#: Run with torch unimportable, as CI's collate job runs (``pip install --no-deps``): load the committed baseline,
#: render it, round-trip its JSON form, split it into two shards, merge them, gate the merge against the baseline,
#: and collate the shards (gated against the baselines directory).
NO_TORCH_SCRIPT = """
import sys
sys.modules["torch"] = None  # every import of torch now fails
from pathlib import Path
from pytest_fullgraph.report import Report, diff, load, markdown, merge, terminal_lines, write
from pytest_fullgraph.publish.collate import collate

baseline_path = Path(sys.argv[1])
baseline = load(baseline_path)
page = markdown(baseline)
assert "What PyTorch says about these breaks" in page and "[GB0170](" in page, page[:400]
assert any(line.startswith("    hint: ") for line in terminal_lines(baseline))
data = baseline.to_dict()
assert data["break_help"] and Report.from_dict(data, "round trip").to_dict() == data
out = Path(sys.argv[2])
half = len(baseline.checks) // 2
shards = [Report(baseline.environment, checks, [], baseline.run, baseline.stored_help)
          for checks in (baseline.checks[:half], baseline.checks[half:])]
for name, shard in zip("ab", shards):
    write(shard, out / name)
merged = merge([("a", shards[0]), ("b", shards[1])])
assert merged.to_dict()["checks"] == data["checks"] and merged.break_help() == baseline.break_help()
gate = diff(baseline, merged)
assert not gate.failed and not gate.changed, gate.summary()
result = collate([out / "a" / "fullgraph-report.json", out / "b" / "fullgraph-report.json"], out / "merged",
                 baselines=baseline_path.parent)
assert not result.failed, result.summary[:3]
assert any("Gate against" in line and "gate passed" in line for line in result.summary), result.summary
collated = load(result.merged["fast-torch2.13.0"])
assert len(collated.checks) == len(baseline.checks) and collated.stored_help == baseline.stored_help
assert not [name for name, module in sys.modules.items()
            if module is not None and name.split(".")[0] in ("torch", "transformers")]
print("rendered and collated without torch")
"""


def test_the_report_layer_needs_no_torch(tmp_path: Path) -> None:
    """PyTorch's help is stored with the report by the run's torch and read back, so merge, collate and render
    run where torch is absent (and show the help of the release that ran)."""
    baseline = REPOSITORY / "baselines" / "fast-torch2.13.0.json"
    completed = subprocess.run([sys.executable, "-c", NO_TORCH_SCRIPT, str(baseline), str(tmp_path)],
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "rendered and collated without torch" in completed.stdout


def test_only_unreadable_reports_say_so_once_and_exit_2(tmp_path: Path) -> None:
    """An unreadable report is not also "no shard uploaded", and a broken file is bad input (2), not a failed gate
    (1): the summary names it, stderr says it in one line."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    collated = collate([bad], tmp_path / "merged")
    assert collated.failed and collated.unreadable == [f"{bad}: not valid JSON (Expecting property name enclosed in "
                                                       "double quotes: line 1 column 2 (char 1))"]
    assert not any("No reports" in line for line in collated.summary)
    completed = subprocess.run([sys.executable, "-m", "pytest_fullgraph", "report", "collate", str(bad), "-o",
                                str(tmp_path / "out"), "--expect", "fast-torch2.13.0"],
                               capture_output=True, text=True, check=False)
    assert completed.returncode == 2
    assert "No reports" not in completed.stdout and "gate FAILED" not in completed.stdout
    assert "collate: FAILED: 1 file(s) cannot be read" in completed.stdout
    assert "or its reports are among the 1 unreadable" in completed.stdout
    assert completed.stderr == f"pytest_fullgraph: error: {collated.unreadable[0]}\n"


def test_an_unreadable_baseline_is_named_and_the_rest_still_collates(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    (baselines / "fast-torch2.13.0.json").write_text('{"schema": "pytest_fullgraph/report", "version": 99}')
    collated = collate([shard(tmp_path, "a", outcomes={"llama": "pass"})], tmp_path / "merged", baselines)
    assert collated.failed and list(collated.merged) == ["fast-torch2.13.0"]
    assert collated.unreadable == [f"{baselines / 'fast-torch2.13.0.json'}: written by a newer pytest_fullgraph "
                                   "(report schema version 99; this one reads 1 to 9): upgrade pytest_fullgraph to "
                                   "read it"]
    assert "fast-torch2.13.0 is not gated: its baseline cannot be read" in collated.summary


def test_a_glob_that_matched_nothing_is_no_reports_and_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    """CI's `reports/*/fullgraph-report.json` stays as typed when no shard uploaded: that is "no reports" (the gate
    fails, 1); a file named outright that is not there is bad input (2)."""
    unmatched = collate([tmp_path / "reports" / "*" / report.JSON_NAME], tmp_path / "merged")
    assert unmatched.failed and not unmatched.unreadable
    assert unmatched.summary == ["**No reports:** no shard uploaded a fullgraph-report.json"]
    missing = collate([tmp_path / "nope.json"], tmp_path / "merged")
    assert missing.unreadable == [f"{tmp_path / 'nope.json'}: cannot read (No such file or directory)"]
    assert not any("No reports" in line for line in missing.summary)


def test_a_baseline_of_other_settings_gates_nothing_and_fails_naming_the_setting(tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    slow = shard(tmp_path, "base", slow=True, outcomes={"llama": "pass"})
    slow.rename(baselines / "fast-torch2.13.0.json")
    collated = collate([shard(tmp_path, "a", outcomes={"llama": "pass"})], tmp_path / "merged", baselines)
    assert collated.failed
    reason = ("the reports were made with different settings (backend: 'inductor' in the baseline, 'aot_eager' in "
              "this run): compare runs of one configuration, or pass --allow-settings to compare them anyway")
    assert collated.unreadable == [f"{baselines / 'fast-torch2.13.0.json'}: {reason}"]
    assert f"fast-torch2.13.0 is not gated: {reason}" in collated.summary
