"""Output a user cannot act on stays out. A failing check shows its diagnosis, not torch's structured trace: pytest
(9+) attaches its log capture to non-propagating loggers such as ``torch.__trace``, which used to print hundreds of
empty records per failure. Dynamo's and the property suite's warnings stay out of the warnings summary, and
transformers' warnings about our tiny configs out of ``python -m pytest_fullgraph models``."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from pytest_fullgraph.models.quiet import held_transformers_output
from tests import REPOSITORY
from tests.conftest import checks_by_id, read_report
from tests.factories import cli


# inductor's own trace output in the workflow's plugin job; the plugin's quieting is the same for both backends
@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.breadth)])
@pytest.mark.breadth
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

    from pytest_fullgraph.core.compile_events import TRACE_LOGGER, silence_structured_trace

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


#: The property suite's strategy replaced by one draw of the kind it makes, whose minimum lengths (``min_length``,
#: ``min_new_tokens``) are past its maximum: generate warns about such a draw.
CROSSED_LENGTHS = '''

def generation_cases(vocab, loops):
    config = GenerationConfig(max_new_tokens=2, min_length=10, min_new_tokens=3, eos_token_id=tiny.FIRST_PROMPT_ID + 1,
                              pad_token_id=tiny.PAD_TOKEN_ID)
    prompt = torch.tensor([[tiny.FIRST_PROMPT_ID] * 4])
    return st.just({"input_ids": prompt, "attention_mask": torch.ones_like(prompt), "seed": 0, "loop": loops[0],
                    "assistant": None, "mode": PLAIN, "config": config})
'''


@pytest.mark.breadth  # a run of the real property suite (about 30 s): the workflow's plugin job runs it
def test_the_property_suites_drawn_lengths_add_no_warning_to_the_summary(pytester: pytest.Pytester) -> None:
    """The suite crosses minimum and maximum lengths on purpose; generate's UserWarning about it is the suite's to
    hold, not a line in every run's warnings summary (in a subprocess: a warning shows once per process)."""
    suite = REPOSITORY / "suites" / "test_decode_properties.py"
    pytester.makepyfile(test_properties=suite.read_text() + CROSSED_LENGTHS)
    result = pytester.runpytest_subprocess("test_properties.py", "--fullgraph-models=llama", "-k", "part1of4",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "UserWarning" not in result.stdout.str() and "warnings summary" not in result.stdout.str()


def transformers_lines(stderr: str) -> list[str]:
    """transformers' own lines (its logger's ``[transformers]`` prefix, a kernel's install hint); torchao's import
    lines, which only the export extras bring, are not among them."""
    return [line for line in stderr.splitlines() if line.startswith("[transformers]") or "pip install" in line]


@pytest.mark.breadth
def test_listing_every_model_prints_no_transformers_warning() -> None:
    """The tiny configs' rope factors and token ids, xIELU's install hint: held back and counted in one line."""
    completed = cli("models", "--no-build")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert transformers_lines(completed.stderr) == []
    assert "transformers warning(s) about the tiny configs held back; --verbose shows them" in completed.stderr
    assert "models (not built)" in completed.stdout.splitlines()[-1]


@pytest.mark.breadth  # a fresh process; what is held and what is shown is unit-tested below
def test_verbose_shows_transformers_warnings_as_they_come() -> None:
    completed = cli("models", "apertus", "--no-build", "--verbose")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert any("xIELU" in line for line in transformers_lines(completed.stderr))
    assert "held back" not in completed.stderr


def test_only_transformers_and_the_libraries_it_runs_are_held(recwarn: pytest.WarningsRecorder) -> None:
    """A user's warning inside the block (a registered model's build) is shown; transformers' logger gets its
    handlers back."""
    logger = logging.getLogger("transformers.models.llama")
    import transformers.utils.logging  # its handler in place, as the block finds it

    before = logging.getLogger("transformers").handlers[:]
    with held_transformers_output() as held:
        logger.warning("a tiny config's field")
        warnings.warn_explicit("a kernel is missing", UserWarning, transformers.utils.logging.__file__, 1)
        warnings.warn("the user's own", UserWarning, stacklevel=1)
    assert held.lines == ["[transformers.models.llama] a tiny config's field", "UserWarning: a kernel is missing"]
    assert [str(warning.message) for warning in recwarn] == ["the user's own"]
    assert logging.getLogger("transformers").handlers == before
