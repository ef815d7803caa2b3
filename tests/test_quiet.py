"""A failing check shows its diagnosis, not torch's structured trace: pytest (9+) attaches its log capture to
non-propagating loggers such as ``torch.__trace``, which used to print hundreds of empty records per failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import checks_by_id, read_report


# inductor's own trace output in the workflow's plugin job; the plugin's quieting is the same for both backends
@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.breadth)])
def test_failing_checks_print_no_structured_trace_records(toy_project: pytest.Pytester, tmp_path: Path,
                                                          backend: str) -> None:
    junit = tmp_path / "junit.xml"
    # in a subprocess: inductor modules first imported inside an in-process run would be dropped after it
    result = toy_project.runpytest_subprocess("--fullgraph-models=toy_drift,toy_break",
                                              f"--fullgraph-backend={backend}", "--fullgraph-max-new-tokens=2",
                                              "-k", "greedy and forward", "-rfx", "-p", "no:cacheprovider",
                                              f"--junitxml={junit}", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(failed=1, xfailed=1)
    output = result.stdout.str() + result.stderr.str()
    assert "torch.__trace" not in output
    assert "torch.__trace" not in junit.read_text()
    result.stdout.fnmatch_lines(["*mismatch: compiled tokens differ from eager at row 0*"])
    # the records still reached the report: the break was captured with its location
    report = read_report(tmp_path)
    assert checks_by_id(report)["toy_break-greedy-forward"]["breaks"]
    # the settings the checks ran under are recorded with the report
    expected = {"fallback_random": True} if backend == "inductor" else {}
    assert report["environment"]["exactness_settings"] == {"float32": expected}


def test_a_users_own_trace_request_is_left_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from pytest_fullgraph.compile_events import TRACE_LOGGER, silence_structured_trace

    logger = logging.getLogger(TRACE_LOGGER)
    level = logger.level
    monkeypatch.setenv("TORCH_TRACE", "/tmp/trace-dir")
    silence_structured_trace()()
    assert logger.level == level
    monkeypatch.delenv("TORCH_TRACE")
    restore = silence_structured_trace()
    assert logger.level > logging.CRITICAL
    restore()
    assert logger.level == level


def test_dynamos_warnings_about_transformers_code_stay_out_of_the_summary(toy_project: pytest.Pytester) -> None:
    """Compiling generate makes dynamo warn about transformers' lru_cache wrappers and side effects, which
    the user cannot act on (in a subprocess: dynamo warns once per process)."""
    result = toy_project.runpytest_subprocess("--fullgraph-models=toy", "--fullgraph-backend=eager", "-k",
                                              "greedy and generate", "-p", "no:cacheprovider")
    result.assert_outcomes(xfailed=1)
    assert "warnings summary" not in result.stdout.str()
