"""``report diff``, the gate: regressions and improvements between a baseline and a run, missing checks, other
settings, the ratchet, first-break-only runs, interrupted runs, and the diff page."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.results import CheckResult
from tests.factories import GENERATION_UTILS, REPORT_ENVIRONMENT, a_break, a_check, cli, saved_report


def test_diff_identical_passes_and_regression_fails(tmp_path: Path) -> None:
    baseline = saved_report(tmp_path / "base", [a_check("llama", "break", level="generate",
                                                        breaks=[a_break(GENERATION_UTILS, 10)]),
                                                a_check("gemma", "pass", level="generate")])
    same = cli("report", "diff", str(baseline), str(baseline))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "0 regression(s)" in same.stdout

    current = saved_report(tmp_path / "cur", [a_check("llama", "break", level="generate",
                                                      breaks=[a_break(GENERATION_UTILS, line) for line in (10, 30)]),
                                              a_check("gemma", "mismatch", level="generate")])
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


def test_diff_html_given_a_directory_writes_the_page_inside_it_after_the_verdict(tmp_path: Path) -> None:
    baseline = saved_report(tmp_path / "base", [a_check("gemma", "pass")])
    current = saved_report(tmp_path / "cur", [a_check("gemma", "mismatch")])
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
    baseline = saved_report(tmp_path / "base", [a_check("gemma", "pass")])
    blocker = tmp_path / "file"
    blocker.write_text("")
    completed = cli("report", "diff", str(baseline), str(baseline), "--html", str(blocker / "page.html"))
    assert completed.returncode == 2
    assert completed.stdout.splitlines()[-1] == "0 regression(s), 0 improvement(s), 0 note(s): gate passed"
    assert completed.stderr.startswith(f"pytest_fullgraph: error: --html {blocker / 'page.html'}: cannot write (")
    assert "a file to write or a directory" in completed.stderr and len(completed.stderr.splitlines()) == 1


def test_missing_check_is_a_regression_unless_allowed(tmp_path: Path) -> None:
    baseline = saved_report(tmp_path / "base", [a_check("llama", "pass", level="generate"),
                                                a_check("gemma", "pass", level="generate")])
    current = saved_report(tmp_path / "cur", [a_check("llama", "pass", level="generate")])
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
    baseline = saved_report(tmp_path / "base", [a_check("llama", "pass")])
    current = saved_report(tmp_path / "cur", [a_check("llama", "break", breaks=[a_break(GENERATION_UTILS, 10)])])
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
    baseline = saved_report(tmp_path / "base", [a_check("llama", "pass")], **{setting: before})
    current = saved_report(tmp_path / "cur", [a_check("llama", "pass")], **{setting: after})
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
    baseline = saved_report(tmp_path / "base", [a_check("llama", "pass")], torch="2.13.0+cpu")
    current = saved_report(tmp_path / "cur", [a_check("llama", "pass")], torch="2.13.1")
    assert cli("report", "diff", str(baseline), str(current)).returncode == 0


def test_ratchet_fails_on_improvements_and_prints_the_refresh_command(tmp_path: Path) -> None:
    baseline = saved_report(tmp_path / "base", [a_check("llama", "break", level="generate",
                                                        breaks=[a_break(GENERATION_UTILS, 10)])])
    current = saved_report(tmp_path / "cur", [a_check("llama", "pass", level="generate")])
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

    every = [a_check("llama", "break", level="generate",
                     breaks=[a_break(GENERATION_UTILS, line) for line in (10, 20, 30)])]
    first_only = a_check("llama", "break", level="generate")
    first_only.first_break = a_break(GENERATION_UTILS, 10)
    same = diff(report.Report(dict(REPORT_ENVIRONMENT), every), report.Report(dict(REPORT_ENVIRONMENT), [first_only]))
    assert not same.changed, same.regressions + same.improvements  # fewer recorded breaks is not an improvement
    moved = a_check("llama", "break", level="generate")
    moved.first_break = a_break(GENERATION_UTILS, 15)
    gate = diff(report.Report(dict(REPORT_ENVIRONMENT), every), report.Report(dict(REPORT_ENVIRONMENT), [moved]))
    where = "transformers/generation/utils.py:15"
    assert gate.regressions == [f"REGRESSION llama-greedy-generate-float32: new first break {where} "
                                "(Data-dependent branching)"]
    assert gate.improvements == ["IMPROVED llama-greedy-generate-float32: first break gone "
                                 "transformers/generation/utils.py:10 (Data-dependent branching)"]
    fewer = [a_check("llama", "break", level="generate", breaks=[a_break(GENERATION_UTILS, 10)])]
    both_every = diff(report.Report(dict(REPORT_ENVIRONMENT), every), report.Report(dict(REPORT_ENVIRONMENT), fewer))
    assert "IMPROVED llama-greedy-generate-float32: graph breaks 3 -> 1" in both_every.improvements


def test_interrupted_current_run_fails_the_gate(tmp_path: Path) -> None:
    baseline = saved_report(tmp_path / "base", [a_check("llama", "pass")])
    interrupted = report.Report(dict(REPORT_ENVIRONMENT), [a_check("llama", "pass")],
                                run={"exitstatus": 2, "interrupted": True})
    report.write(interrupted, tmp_path / "cur")
    completed = cli("report", "diff", str(baseline), str(tmp_path / "cur" / report.JSON_NAME))
    assert completed.returncode == 1 and "INCOMPLETE: the current run was interrupted" in completed.stdout
    assert "**Incomplete:** the run was interrupted (exit status 2)" in report.markdown(interrupted)


def test_empty_messages_render_and_diff_without_error(tmp_path: Path) -> None:
    silent = CheckResult("llama", "greedy", "generate", "aot_eager", 4, "mismatch", "")
    baseline = saved_report(tmp_path / "base", [a_check("llama", "pass", level="generate")])
    current = saved_report(tmp_path / "cur", [silent])
    completed = cli("report", "diff", str(baseline), str(current))
    assert completed.returncode == 1, completed.stderr
    assert "REGRESSION llama-greedy-generate-float32: pass -> mismatch: mismatch" in completed.stdout
    page = (tmp_path / "cur" / report.MARKDOWN_NAME).read_text()
    assert "## Mismatches\n\n- `llama-greedy-generate-float32`: mismatch\n" in page
    assert cli("report", "merge", str(current), "-o", str(tmp_path / "m")).returncode == 0
