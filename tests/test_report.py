"""Report merge, diff and their command line, including bad input; atomic writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.break_help import help_for_ids
from pytest_fullgraph.core.results import BreakRecord, CheckResult

ENVIRONMENT = {"torch": "2.13.0", "transformers": "5.24.0", "backend": "aot_eager", "max_new_tokens": 4}


def a_break(line: int, gb_type: str = "Data-dependent branching") -> BreakRecord:
    return BreakRecord("torch._dynamo.exc.Unsupported", gb_type, "GB0170", "msg", "transformers/generation/utils.py",
                       line, "generate", "if x:", "generation")


def a_result(model: str, outcome: str, breaks: list[BreakRecord] | None = None, level: str = "generate") -> CheckResult:
    records = breaks or []
    return CheckResult(model, "greedy", level, "aot_eager", 4, outcome, "why",
                       first_break=records[0] if records else None, breaks=records)


def save(path: Path, checks: list[CheckResult]) -> Path:
    written = report.Report(dict(ENVIRONMENT), checks)
    written.stored_help = help_for_ids(written.gb_ids())  # PyTorch's help, stored by the run as the session does
    report.write(written, path)
    return path / report.JSON_NAME


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_fullgraph", *args], capture_output=True, text=True,
                          check=False)


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    checks = [a_result("llama", "break", [a_break(10), a_break(20)]), a_result("gemma", "pass", level="forward")]
    loaded = report.load(save(tmp_path, checks))
    assert loaded.sorted_checks() == sorted(checks, key=lambda result: result.key)


def test_diff_identical_passes_and_regression_fails(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("llama", "break", [a_break(10)]), a_result("gemma", "pass")])
    same = cli("report", "diff", str(baseline), str(baseline))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "0 regression(s)" in same.stdout

    current = save(tmp_path / "cur", [a_result("llama", "break", [a_break(10), a_break(30)]),
                                      a_result("gemma", "mismatch")])
    worse = cli("report", "diff", str(baseline), str(current))
    assert worse.returncode == 1
    assert "REGRESSION gemma-greedy-generate-float32: pass -> mismatch" in worse.stdout
    assert ("REGRESSION llama-greedy-generate-float32: new break site transformers/generation/utils.py:30"
            in worse.stdout)
    assert "REGRESSION llama-greedy-generate-float32: graph breaks 1 -> 2" in worse.stdout

    better = cli("report", "diff", str(current), str(baseline))
    assert better.returncode == 0
    assert ("IMPROVED llama-greedy-generate-float32: break site gone transformers/generation/utils.py:30"
            in better.stdout)
    assert "IMPROVED gemma-greedy-generate-float32: mismatch -> pass" in better.stdout


def test_merge_of_shards_writes_json_and_markdown(tmp_path: Path) -> None:
    shard_a = save(tmp_path / "a", [a_result("llama", "break", [a_break(10)])])
    shard_b = save(tmp_path / "b", [a_result("gemma", "break", [a_break(10)]),
                                    a_result("gemma", "pass", level="forward")])
    merged_dir = tmp_path / "merged"
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(merged_dir))
    assert completed.returncode == 0, completed.stderr
    merged = report.load(merged_dir / report.JSON_NAME)
    assert sorted(r.check_id for r in merged.checks) == [
        "gemma-greedy-forward-float32", "gemma-greedy-generate-float32", "llama-greedy-generate-float32"]
    text = (merged_dir / report.MARKDOWN_NAME).read_text()
    assert ("| `transformers/generation/utils.py:10` (generate)<br>`if x:` | "
            "[GB0170](https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html) "
            "Data-dependent branching | generation | gemma, llama | 2 |") in text


def test_merge_rejects_conflicting_shards(tmp_path: Path) -> None:
    shard_a = save(tmp_path / "a", [a_result("llama", "pass")])
    shard_b = save(tmp_path / "b", [a_result("llama", "mismatch")])
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(tmp_path / "m"))
    assert completed.returncode == 2
    assert "check llama-greedy-generate-float32 is 'mismatch' there but 'pass'" in completed.stderr


GOOD_CHECK = {"model": "llama", "scenario": "greedy", "level": "decode", "backend": "eager", "max_new_tokens": 4,
              "outcome": "pass"}


def a_report(**fields: object) -> str:
    """A report's JSON text, valid unless ``fields`` (top-level keys, or ``check`` for the one check) spoil it."""
    check = fields.pop("check", GOOD_CHECK)
    data = {"schema": "pytest_fullgraph/report", "version": 6, "environment": {}, "checks": [GOOD_CHECK, check],
            **fields}
    return json.dumps({key: value for key, value in data.items() if value is not None})


#: Each bad report and the one line the command line says of it (after ``pytest_fullgraph: error: FILE: ``).
BAD_REPORTS = [
    ("{not json", "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    (b"\xff\xfe\x00garbage\x9c", "not valid JSON"),
    (b"\x1f\x8b\x08\x00truncated", "cannot read as gzip"),
    ('{"schema": "something-else"}', 'not a pytest_fullgraph report (expected "schema": "pytest_fullgraph/report")'),
    ("[1, 2]", "not a pytest_fullgraph report"),
    (a_report(version=99), "written by a newer pytest_fullgraph (report schema version 99; this one reads 1 to 8): "
                           "upgrade pytest_fullgraph to read it"),
    (a_report(version="x"), "report schema version 'x' is not supported; this pytest_fullgraph reads versions 1 to 8"),
    (a_report(environment=None), "malformed report: environment: missing"),
    (a_report(checks={}), "malformed report: checks: expected a list, got an object"),
    (a_report(check={**GOOD_CHECK, "outcome": None}), "malformed report: checks[1].outcome: expected a string, got "
                                                      "null (check llama-greedy-decode)"),
    (a_report(check={key: value for key, value in GOOD_CHECK.items() if key != "outcome"}),
     "malformed report: checks[1].outcome: missing (check llama-greedy-decode)"),
    (a_report(check={**GOOD_CHECK, "max_new_tokens": "4"}),
     "malformed report: checks[1].max_new_tokens: expected an integer, got '4' (check llama-greedy-decode)"),
    (a_report(check={**GOOD_CHECK, "colour": "red"}),
     "malformed report: checks[1].colour: not a field of CheckResult (check llama-greedy-decode)"),
    (a_report(check={**GOOD_CHECK, "breaks": [{"exception": "x"}]}),
     "malformed report: checks[1].breaks[0].gb_type: missing (check llama-greedy-decode)"),
    (a_report(check={**GOOD_CHECK, "timings": {"eager": "slow"}}),
     "malformed report: checks[1].timings.eager: expected a number, got 'slow' (check llama-greedy-decode)"),
    (a_report(check=[1]), "malformed report: checks[1]: expected an object, got a list"),
]


@pytest.mark.parametrize(("content", "expected"), BAD_REPORTS)
def test_bad_report_files_are_one_line_and_exit_2(tmp_path: Path, content: str | bytes, expected: str) -> None:
    """Every command that reads reports says what is wrong with a bad one in one line naming the file (and the
    JSON path of a bad field) and exits 2, the status of bad input: never 1, which CI reads as a regression."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    good = save(tmp_path / "good", [a_result("llama", "pass")])
    for args in (["diff", str(good), str(bad)], ["diff", str(bad), str(good)], ["merge", str(good), str(bad), "-o",
                 str(tmp_path / "out")], ["findings", str(bad)], ["collate", str(bad), "-o", str(tmp_path / "c")]):
        completed = cli("report", *args)
        assert completed.returncode == 2, (args, completed.stdout, completed.stderr)
        assert completed.stderr.startswith(f"pytest_fullgraph: error: {bad}: {expected}"), completed.stderr
        assert len(completed.stderr.splitlines()) == 1 and len(completed.stderr) < 300


def test_a_report_that_is_not_there_is_exit_2_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    for args in (["diff", str(missing), str(missing)], ["merge", str(missing), "-o", str(tmp_path / "m")],
                 ["findings", str(missing)]):
        completed = cli("report", *args)
        assert completed.returncode == 2
        assert completed.stderr.startswith(f"pytest_fullgraph: error: {missing}: ")
        assert ("cannot read (No such file or directory)" in completed.stderr
                or "no such report or directory" in completed.stderr)
        assert len(completed.stderr.splitlines()) == 1


def test_every_committed_report_reads_and_a_gzipped_one_diffs_with_itself() -> None:
    """The validation of a report's fields accepts every report the repository keeps, of every schema version."""
    root = Path(__file__).parent.parent
    stored = sorted([*root.glob("bench/reports/**/*.json.gz"), *root.glob("baselines/*.json")])
    assert len(stored) >= 6
    for path in stored:
        assert report.load(path).checks, path
    part = str(root / "bench" / "reports" / "matrix-a-f.json.gz")
    completed = cli("report", "diff", part, part)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1] == "0 regression(s), 0 improvement(s), 0 note(s): gate passed"


def test_merge_refuses_the_same_file_twice(tmp_path: Path) -> None:
    shard = save(tmp_path / "a", [a_result("llama", "pass")])
    for second in (str(shard), str(tmp_path / "a" / ".." / "a" / report.JSON_NAME)):
        completed = cli("report", "merge", str(shard), second, "-o", str(tmp_path / "m"))
        assert completed.returncode == 2
        assert completed.stderr.startswith(f"pytest_fullgraph: error: {second}: the same report given twice")
        assert len(completed.stderr.splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    shard = save(tmp_path / "a", [a_result("llama", "pass")])
    blocker = tmp_path / "file"
    blocker.write_text("")
    completed = cli("report", "merge", str(shard), "-o", str(blocker / "out"))
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"pytest_fullgraph: error: {blocker / 'out'}: cannot write")
    assert len(completed.stderr.splitlines()) == 1


def test_diff_html_given_a_directory_writes_the_page_inside_it_after_the_verdict(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("gemma", "pass")])
    current = save(tmp_path / "cur", [a_result("gemma", "mismatch")])
    pages = tmp_path / "pages"
    pages.mkdir()
    completed = cli("report", "diff", str(baseline), str(current), "--html", str(pages))
    assert completed.returncode == 1, completed.stderr  # the gate's verdict, not an output error
    lines = completed.stdout.splitlines()
    assert lines[-1] == f"diff page: {pages / report.DIFF_HTML_NAME}"
    assert any(line.startswith("1 regression(s), 0 improvement(s)") for line in lines[:-1])
    assert "Compared with" in (pages / report.DIFF_HTML_NAME).read_text()
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


def test_diff_html_that_cannot_be_written_says_so_in_one_line_after_the_verdict(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("gemma", "pass")])
    blocker = tmp_path / "file"
    blocker.write_text("")
    completed = cli("report", "diff", str(baseline), str(baseline), "--html", str(blocker / "page.html"))
    assert completed.returncode == 2
    assert completed.stdout.splitlines()[-1] == "0 regression(s), 0 improvement(s), 0 note(s): gate passed"
    assert completed.stderr.startswith(f"pytest_fullgraph: error: --html {blocker / 'page.html'}: cannot write (")
    assert "a file to write or a directory" in completed.stderr and len(completed.stderr.splitlines()) == 1


def test_an_atomic_write_onto_a_directory_names_it_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(IsADirectoryError) as raised:
        report.write_atomic(tmp_path / "out", "text")
    assert raised.value.filename == str(tmp_path / "out")
    assert [path.name for path in tmp_path.iterdir()] == ["out"] and not list((tmp_path / "out").iterdir())


def test_interrupted_write_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "fullgraph-report.json"
    report.write_atomic(target, json.dumps({"complete": True}))

    def crash(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(report.files.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        report.write_atomic(target, "{ truncated")
    assert json.loads(target.read_text()) == {"complete": True}
    assert [p.name for p in tmp_path.iterdir()] == ["fullgraph-report.json"]


def save_env(path: Path, checks: list[CheckResult], **environment: object) -> Path:
    report.write(report.Report({**ENVIRONMENT, **environment}, checks), path)
    return path / report.JSON_NAME


def test_merged_environment_describes_every_shard(tmp_path: Path) -> None:
    shard_a = save_env(tmp_path / "a", [a_result("llama", "pass")], models=["llama"], git_revision="abc",
                       levels={"forward": "F"})
    shard_b = save_env(tmp_path / "b", [a_result("gemma", "pass")], models=["gemma", "llama"], git_revision="def",
                       levels={"mine": "M"})
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(tmp_path / "m"))
    assert completed.returncode == 0, completed.stderr
    environment = report.load(tmp_path / "m" / report.JSON_NAME).environment
    assert environment["models"] == ["gemma", "llama"]
    assert environment["git_revision"] == ["abc", "def"]
    assert environment["levels"] == {"forward": "F", "mine": "M"}
    assert environment["merged_from"] == [str(shard_a), str(shard_b)]
    assert environment["torch"] == "2.13.0"


@pytest.mark.parametrize(("setting", "first", "second", "named"), [
    ("max_new_tokens", 4, 16, "max_new_tokens is 16 but an earlier report has 4"),
    ("run_slow", False, True, "tier (run_slow) is True but an earlier report has False"),
    ("strict", False, True, "strictness is True but an earlier report has False"),
    ("backend", "aot_eager", "inductor", "backend is 'inductor' but an earlier report has 'aot_eager'"),
])
def test_merge_refuses_shards_of_another_configuration(tmp_path: Path, setting: str, first: object,
                                                       second: object, named: str) -> None:
    shard_a = save_env(tmp_path / "a", [a_result("llama", "pass")], **{setting: first})
    shard_b = save_env(tmp_path / "b", [a_result("gemma", "pass")], **{setting: second})
    completed = cli("report", "merge", str(shard_a), str(shard_b), "-o", str(tmp_path / "m"))
    assert completed.returncode == 2
    assert completed.stderr.strip() == (f"pytest_fullgraph: error: {shard_b}: {named}; merge reports of one "
                                        "configuration")


def test_missing_check_is_a_regression_unless_allowed(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("llama", "pass"), a_result("gemma", "pass")])
    current = save(tmp_path / "cur", [a_result("llama", "pass")])
    strict = cli("report", "diff", str(baseline), str(current))
    assert strict.returncode == 1
    assert "MISSING gemma-greedy-generate-float32: in the baseline (pass) but not in this report" in strict.stdout
    allowed = cli("report", "diff", str(baseline), str(current), "--allow-missing")
    assert allowed.returncode == 0, allowed.stdout
    assert "MISSING gemma-greedy-generate-float32" in allowed.stdout
    for run in (strict, allowed):  # copying a report that lacks checks over the baseline would shrink it
        assert "cp " not in run.stdout
        assert run.stdout.rstrip().endswith("not suggesting this report as the baseline: it lacks 1 of the "
                                            "baseline's checks, which copying it would drop; run them (or every "
                                            "shard) and diff again")


def test_a_report_with_every_check_of_the_baseline_is_suggested_as_the_new_one(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("llama", "pass")])
    current = save(tmp_path / "cur", [a_result("llama", "break", [a_break(10)])])
    completed = cli("report", "diff", str(baseline), str(current))
    assert completed.returncode == 1
    assert f"to accept the current report as the baseline: cp {current} {baseline}" in completed.stdout


@pytest.mark.parametrize(("setting", "before", "after", "named"), [
    ("backend", "aot_eager", "inductor", "backend: 'aot_eager' in the baseline, 'inductor' in this run"),
    ("max_new_tokens", 4, 16, "max_new_tokens: 4 in the baseline, 16 in this run"),
    ("torch", "2.13.0", "2.15.0", "torch release: '2.13.0' in the baseline, '2.15.0' in this run"),
    ("device", "cpu", "cuda:0", "device: 'cpu' in the baseline, 'cuda:0' in this run"),
])
def test_diff_refuses_reports_of_other_settings_unless_allowed(tmp_path: Path, setting: str, before: object,
                                                               after: object, named: str) -> None:
    baseline = save_env(tmp_path / "base", [a_result("llama", "pass")], **{setting: before})
    current = save_env(tmp_path / "cur", [a_result("llama", "pass")], **{setting: after})
    refused = cli("report", "diff", str(baseline), str(current))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == (f"pytest_fullgraph: error: the reports were made with different settings "
                                      f"({named}): compare runs of one configuration, or pass --allow-settings to "
                                      "compare them anyway")
    allowed = cli("report", "diff", str(baseline), str(current), "--allow-settings")
    assert allowed.returncode == 0
    assert allowed.stdout.splitlines()[0] == f"COMPARED ANYWAY (--allow-settings), settings differ: {named}"
    assert "cp " not in allowed.stdout


def test_the_same_release_with_another_build_or_patch_is_the_same_setting(tmp_path: Path) -> None:
    baseline = save_env(tmp_path / "base", [a_result("llama", "pass")], torch="2.13.0+cpu")
    current = save_env(tmp_path / "cur", [a_result("llama", "pass")], torch="2.13.1")
    assert cli("report", "diff", str(baseline), str(current)).returncode == 0


def test_an_unknown_outcome_is_a_malformed_report_not_a_regression(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("llama", "pass")])
    current = save(tmp_path / "cur", [a_result("llama", "pass")])
    data = json.loads(current.read_text())
    data["checks"][0]["outcome"] = "weird"
    current.write_text(json.dumps(data))
    completed = cli("report", "diff", str(baseline), str(current))
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.strip() == (f"pytest_fullgraph: error: {current}: malformed report: checks[0].outcome: "
                                        "'weird' is not an outcome (one of pass, skip, nondeterministic, break, "
                                        "mismatch, error) (check llama-greedy-generate)")


def test_ratchet_fails_on_improvements_and_prints_the_refresh_command(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("llama", "break", [a_break(10)])])
    current = save(tmp_path / "cur", [a_result("llama", "pass")])
    plain = cli("report", "diff", str(baseline), str(current))
    assert plain.returncode == 0 and "IMPROVED llama-greedy-generate-float32: break -> pass" in plain.stdout
    ratchet = cli("report", "diff", str(baseline), str(current), "--ratchet")
    assert ratchet.returncode == 1
    assert "gate FAILED (ratchet: improvements fail too)" in ratchet.stdout
    assert f"cp {current} {baseline}" in ratchet.stdout
    unchanged = cli("report", "diff", str(baseline), str(baseline), "--ratchet")
    assert unchanged.returncode == 0 and "cp " not in unchanged.stdout


def test_a_run_that_kept_only_first_breaks_is_gated_on_its_first_break_alone() -> None:
    from pytest_fullgraph.report.gate import diff

    every = [a_result("llama", "break", [a_break(10), a_break(20), a_break(30)])]
    first_only = a_result("llama", "break")
    first_only.first_break = a_break(10)
    same = diff(report.Report(dict(ENVIRONMENT), every), report.Report(dict(ENVIRONMENT), [first_only]))
    assert not same.changed, same.regressions + same.improvements  # fewer recorded breaks is not an improvement
    moved = a_result("llama", "break")
    moved.first_break = a_break(15)
    gate = diff(report.Report(dict(ENVIRONMENT), every), report.Report(dict(ENVIRONMENT), [moved]))
    where = "transformers/generation/utils.py:15"
    assert gate.regressions == [f"REGRESSION llama-greedy-generate-float32: new first break {where} "
                                "(Data-dependent branching)"]
    assert gate.improvements == ["IMPROVED llama-greedy-generate-float32: first break gone "
                                 "transformers/generation/utils.py:10 (Data-dependent branching)"]
    fewer = [a_result("llama", "break", [a_break(10)])]
    both_every = diff(report.Report(dict(ENVIRONMENT), every), report.Report(dict(ENVIRONMENT), fewer))
    assert "IMPROVED llama-greedy-generate-float32: graph breaks 3 -> 1" in both_every.improvements


def test_interrupted_current_run_fails_the_gate(tmp_path: Path) -> None:
    baseline = save(tmp_path / "base", [a_result("llama", "pass")])
    interrupted = report.Report(dict(ENVIRONMENT), [a_result("llama", "pass")],
                                run={"exitstatus": 2, "interrupted": True})
    report.write(interrupted, tmp_path / "cur")
    completed = cli("report", "diff", str(baseline), str(tmp_path / "cur" / report.JSON_NAME))
    assert completed.returncode == 1 and "INCOMPLETE: the current run was interrupted" in completed.stdout
    assert "**Incomplete:** the run was interrupted (exit status 2)" in report.markdown(interrupted)


def test_a_merge_keeps_the_signal_that_stopped_a_shard() -> None:
    stopped = report.Report(dict(ENVIRONMENT), [a_result("llama", "pass")],
                            run={"exitstatus": 2, "interrupted": True, "signal": "SIGTERM"})
    finished = report.Report(dict(ENVIRONMENT), [a_result("gemma", "pass")], run={"exitstatus": 0,
                                                                                 "interrupted": False})
    merged = report.merge([("a.json", stopped), ("b.json", finished)])
    assert merged.run == {"exitstatus": 2, "interrupted": True, "signal": "SIGTERM"}
    assert "the run was interrupted (SIGTERM, exit status 2)" in report.markdown(merged)
    assert report.merge([("b.json", finished)]).run == {"exitstatus": 0, "interrupted": False}


def test_empty_messages_render_and_diff_without_error(tmp_path: Path) -> None:
    silent = CheckResult("llama", "greedy", "generate", "aot_eager", 4, "mismatch", "")
    baseline = save(tmp_path / "base", [a_result("llama", "pass")])
    current = save(tmp_path / "cur", [silent])
    completed = cli("report", "diff", str(baseline), str(current))
    assert completed.returncode == 1, completed.stderr
    assert "REGRESSION llama-greedy-generate-float32: pass -> mismatch: mismatch" in completed.stdout
    page = (tmp_path / "cur" / report.MARKDOWN_NAME).read_text()
    assert "## Mismatches\n\n- `llama-greedy-generate-float32`: mismatch\n" in page
    assert cli("report", "merge", str(current), "-o", str(tmp_path / "m")).returncode == 0


def test_break_cell_says_what_happened() -> None:
    from pytest_fullgraph.report.render import cell

    three_graphs = CheckResult("m", "greedy", "decode", "eager", 4, "break", "expected one graph, got 3",
                               graph_count=3)
    assert cell(three_graphs) == "⛔ 3 graphs"
    assert cell(a_result("m", "break", [a_break(1), a_break(2)])) == "⛔ 2 breaks"
    assert cell(a_result("m", "break", [a_break(1)])) == "⛔ 1 break"


def test_report_files_honour_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    previous = os.umask(0o022)
    try:
        written = report.write(report.Report(dict(ENVIRONMENT), [a_result("llama", "pass")]), tmp_path)
    finally:
        os.umask(previous)
    assert [stat.S_IMODE(path.stat().st_mode) for path in written] == [0o644, 0o644, 0o644]


def test_version_1_reports_still_load(tmp_path: Path) -> None:
    data = report.Report(dict(ENVIRONMENT), [a_result("llama", "pass")]).to_dict()
    data["version"] = 1
    del data["run"]
    for check in data["checks"]:
        del check["device"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    loaded = report.load(tmp_path / "old.json")
    assert loaded.checks[0].device == "" and not loaded.interrupted


def a_higher_order_break() -> BreakRecord:
    """What a user's data-dependent branch in ``forward`` gives at the while level: the op, and the break in it."""
    inside = BreakRecord("torch._dynamo.exc.Unsupported", "Data-dependent branching", "GB0170",
                         "Detected data-dependent branching", "conftest.py", 8, "forward", "if x.sum() > 0:", "user")
    return BreakRecord("torch._dynamo.exc.UncapturedHigherOrderOpError", "UncapturedHigherOrderOpError", None,
                       "This higher order operator doesn't work unless it is captured completely with torch.compile",
                       "pytest_fullgraph/loop/decode.py", 374, "decode_while_loop", "state = while_loop(...)", "user",
                       cause=inside)


def test_a_higher_order_break_shows_the_break_inside_it_everywhere(tmp_path: Path) -> None:
    """The op's own message ends in "Got graph break/error:"; the cause is kept in JSON, Markdown and terminal."""
    from pytest_fullgraph.report.terminal import terminal_lines

    record = a_higher_order_break()
    result = CheckResult("toy", "greedy", "while", "eager", 4, "break", record.summary(), first_break=record)
    assert result.message.endswith("; inside it: Data-dependent branching [GB0170] at conftest.py:8 in forward "
                                   "(user): Detected data-dependent branching")
    loaded = report.load(save(tmp_path, [result]))
    assert loaded.checks[0].first_break == record
    page = (tmp_path / report.MARKDOWN_NAME).read_text()
    assert ("| UncapturedHigherOrderOpError (inside it: Data-dependent branching [GB0170] at conftest.py:8 in "
            "forward) | user |") in page
    assert "[GB0170](" in page  # PyTorch's help for the inner break, which the op itself has no id for
    assert any("inside it: Data-dependent branching [GB0170] at conftest.py:8" in line
               for line in terminal_lines(loaded))


def test_peak_cuda_memory_is_summed_per_level(tmp_path: Path) -> None:
    mib = 1024 * 1024
    checks = [CheckResult("llama", "greedy", "cudagraphs", "inductor", 8, "pass", peak_memory=30 * mib),
              CheckResult("gemma", "greedy", "cudagraphs", "inductor", 8, "pass", peak_memory=50 * mib),
              CheckResult("gemma", "greedy", "while", "inductor", 8, "pass", peak_memory=12 * mib),
              CheckResult("gemma", "greedy", "forward", "inductor", 8, "pass")]  # a CPU check: not measured
    save(tmp_path, checks)
    page = (tmp_path / report.MARKDOWN_NAME).read_text()
    assert "| cudagraphs | 2 | 80.0 | 50.0 | `gemma-greedy-cudagraphs-float32` |" in page
    assert "| while | 1 | 12.0 | 12.0 | `gemma-greedy-while-float32` |" in page
    assert "| forward |" not in page.split("## Peak CUDA memory")[1]
    assert report.load(tmp_path / report.JSON_NAME).checks[0].peak_memory in (30 * mib, 50 * mib, 12 * mib, None)


def test_no_cuda_check_means_no_memory_section(tmp_path: Path) -> None:
    save(tmp_path, [a_result("llama", "pass")])
    assert "Peak CUDA memory" not in (tmp_path / report.MARKDOWN_NAME).read_text()


def test_peak_memory_is_read_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement itself (the GPU run in bench/gpu.sh shows real numbers): reset before, read after."""
    import torch

    from pytest_fullgraph.core.compute import peak_cuda_memory

    calls: list[str] = []

    def read(device: str) -> int:
        calls.append(f"read {device}")
        return 1234

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append(f"reset {device}"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", read)
    on_gpu = CheckResult("m", "greedy", "while", "inductor", 4, "pass", device="cuda:0")
    with peak_cuda_memory(on_gpu):
        calls.append("run")
    assert (calls, on_gpu.peak_memory) == (["reset cuda:0", "run", "read cuda:0"], 1234)
    on_cpu = CheckResult("m", "greedy", "while", "inductor", 4, "pass", device="cpu")
    with peak_cuda_memory(on_cpu):
        pass
    assert on_cpu.peak_memory is None and len(calls) == 3


def test_a_gzipped_report_loads_and_a_binary_file_is_one_line_error(tmp_path: Path) -> None:
    """The committed measurements are gzipped; a file that is neither JSON nor gzip is "not valid JSON", not a
    UnicodeDecodeError traceback."""
    import gzip

    from pytest_fullgraph.report import ReportError, load

    plain = tmp_path / "fullgraph-report.json"
    save(tmp_path, [CheckResult("llama", "greedy", "decode", "eager", 4, "pass")])
    packed = tmp_path / "packed.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    unnamed = tmp_path / "packed-without-suffix"
    unnamed.write_bytes(packed.read_bytes())
    assert [result.key for result in load(packed).checks] == [result.key for result in load(plain).checks]
    assert [result.key for result in load(unnamed).checks] == [result.key for result in load(plain).checks]
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage\x9c")
    with pytest.raises(ReportError, match=r"binary\.json: not valid JSON"):
        load(binary)


def test_the_terminal_summary_says_why_checks_were_skipped() -> None:
    """A skip cell in the matrix is only "skip"; the reasons follow it, most frequent first."""
    from pytest_fullgraph.report.terminal import terminal_lines

    checks = [CheckResult("llama", scenario, "decode", "eager", 4, "skip", "float16 cannot run here")
              for scenario in ("greedy", "sample")]
    checks.append(CheckResult("gemma", "greedy", "decode", "eager", 4, "skip", "skipped: no cache argument"))
    checks.append(CheckResult("gemma", "sample", "decode", "eager", 4, "pass", "1 graph(s), tokens equal to eager"))
    lines = terminal_lines(report.Report(dict(ENVIRONMENT), checks), top_sites=1)
    assert "skipped 2 check(s): float16 cannot run here" in lines
    assert "skipped for 1 more reason(s): see the report" in lines
    assert not any("no cache argument" in line for line in lines)


def test_break_sites_of_one_file_are_in_line_order() -> None:
    """Sites sort by file and then by line as a number, not as text (":396" before ":2899")."""
    from pytest_fullgraph.report.tables import grouped_sites, location_key

    def broken_at(line: int) -> BreakRecord:
        return BreakRecord("Unsupported", "Data-dependent branching", "GB0170", "m", "transformers/utils.py", line,
                           "f", "", "generation")

    checks = [CheckResult("llama", "greedy", "generate", "eager", 4, "break", breaks=[broken_at(line)])
              for line in (2899, 396, 1452)]
    assert [site["where"] for site in grouped_sites(checks)] == [
        "transformers/utils.py:396", "transformers/utils.py:1452", "transformers/utils.py:2899"]
    assert location_key("<unknown location>") == ("<unknown location>", 0)


def test_a_merged_report_shows_levels_and_scenarios_in_the_order_a_run_does(tmp_path: Path) -> None:
    """Report JSON stores its legend's keys sorted; merged, or read back, the matrix still reads forward, generate,
    decode / greedy, sample, eos (not decode, export, forward / eos, greedy), as a single run's does."""
    from pytest_fullgraph.report.tables import columns

    checks = [CheckResult(model, scenario, level, "eager", 4, "pass")
              for model in ("llama", "gemma") for level in ("forward", "generate", "decode")
              for scenario in ("greedy", "sample", "eos")]
    legend = {"levels": {name: name for name in ("decode", "forward", "generate")},
              "scenarios": {name: name for name in ("eos", "greedy", "sample")}}
    first = save(tmp_path / "a", [c for c in checks if c.model == "llama"])
    second = save(tmp_path / "b", [c for c in checks if c.model == "gemma"])
    for path in (first, second):  # the legend as the JSON stores it: keys sorted
        data = json.loads(path.read_text())
        data["environment"].update(legend)
        path.write_text(json.dumps(data, sort_keys=True))
    merged = report.merge([(str(first), report.load(first)), (str(second), report.load(second))])
    expected = [(level, scenario) for level in ("forward", "generate", "decode")
                for scenario in ("greedy", "sample", "eos")]
    assert columns(merged) == expected
    assert columns(report.load(first)) == expected
