"""Report files read and written: a round trip keeps every field; every committed report, gzipped or not and of
every schema version, reads; a bad or missing file is one line and exit 2; writes are atomic and honour the umask."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.results import CheckResult
from tests import REPOSITORY
from tests.factories import GENERATION_UTILS, REPORT_ENVIRONMENT, a_break, a_check, cli, saved_report


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    checks = [a_check("llama", "break", breaks=[a_break(GENERATION_UTILS, 10, "generation"),
                                                a_break(GENERATION_UTILS, 20, "generation")]),
              a_check("gemma", "pass", level="forward")]
    loaded = report.load(saved_report(tmp_path, checks))
    assert loaded.sorted_checks() == sorted(checks, key=lambda result: result.key)


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
    (a_report(version=99), "written by a newer pytest_fullgraph (report schema version 99; this one reads 1 to 9): "
                           "upgrade pytest_fullgraph to read it"),
    (a_report(version="x"), "report schema version 'x' is not supported; this pytest_fullgraph reads versions 1 to 9"),
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
    good = saved_report(tmp_path / "good", [a_check("llama", "pass")])
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
    stored = sorted([*REPOSITORY.glob("bench/reports/**/*.json.gz"), *REPOSITORY.glob("baselines/*.json")])
    assert len(stored) >= 6
    for path in stored:
        assert report.load(path).checks, path
    part = str(REPOSITORY / "bench" / "reports" / "matrix-a-f.json.gz")
    completed = cli("report", "diff", part, part)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1] == "0 regression(s), 0 improvement(s), 0 note(s): gate passed"


def test_an_unknown_outcome_is_a_malformed_report_not_a_regression(tmp_path: Path) -> None:
    baseline = saved_report(tmp_path / "base", [a_check("llama", "pass", level="generate")])
    current = saved_report(tmp_path / "cur", [a_check("llama", "pass", level="generate")])
    data = json.loads(current.read_text())
    data["checks"][0]["outcome"] = "weird"
    current.write_text(json.dumps(data))
    completed = cli("report", "diff", str(baseline), str(current))
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.strip() == (f"pytest_fullgraph: error: {current}: malformed report: checks[0].outcome: "
                                        "'weird' is not an outcome (one of pass, skip, nondeterministic, break, "
                                        "mismatch, error) (check llama-greedy-generate)")


def test_a_gzipped_report_loads_and_a_binary_file_is_one_line_error(tmp_path: Path) -> None:
    """The committed measurements are gzipped; a file that is neither JSON nor gzip is "not valid JSON", not a
    UnicodeDecodeError traceback."""
    import gzip

    from pytest_fullgraph.report import ReportError, load

    plain = tmp_path / "fullgraph-report.json"
    saved_report(tmp_path, [CheckResult("llama", "greedy", "decode", "eager", 4, "pass")])
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


def test_version_1_reports_still_load(tmp_path: Path) -> None:
    data = report.Report(dict(REPORT_ENVIRONMENT), [a_check("llama", "pass")]).to_dict()
    data["version"] = 1
    del data["run"]
    for check in data["checks"]:
        del check["device"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    loaded = report.load(tmp_path / "old.json")
    assert loaded.checks[0].device == "" and not loaded.interrupted


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


def test_report_files_honour_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    previous = os.umask(0o022)
    try:
        written = report.write(report.Report(dict(REPORT_ENVIRONMENT), [a_check("llama", "pass")]), tmp_path)
    finally:
        os.umask(previous)
    assert [stat.S_IMODE(path.stat().st_mode) for path in written] == [0o644, 0o644, 0o644]
