"""Option validation and precedence, run as a user runs pytest (no model is built here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_fullgraph.models import Registry

HEADER_TEST = "def test_nothing(fullgraph_settings):\n    pass\n"


def run_here(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run only the test files written here: an explicit path keeps the conformance suite out."""
    return pytester.runpytest(str(pytester.path), *args)


def header(result: pytest.RunResult) -> str:
    return next(line for line in result.outlines if line.startswith("fullgraph:"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--fullgraph-models=llama,nope"], ["--fullgraph-models: unknown model 'nope'",
                                             "python -m pytest_fullgraph models --no-build lists all"]),
        (["--fullgraph-models=,"], ["--fullgraph-models: ',' selects no model"]),
        (["--fullgraph-backend=cuda"], ["'cuda' is not a known backend", "eager, aot_eager, inductor"]),
        (["--fullgraph-backend=inductr"], ["--fullgraph-backend='inductr' is not a known backend (did you mean "
                                           "inductor?); use one of eager, aot_eager, inductor"]),
        (["--fullgraph-dtype=float32,bflaot16"], ["--fullgraph-dtype='float32,bflaot16': 'bflaot16' (did you mean "
                                                  "bfloat16"]),
        (["--fullgraph-breaks=frist"], ["'frist' is not a break mode (did you mean first?); use one of auto, all, "
                                          "first"]),
        (["--fullgraph-artifact-runtime=aot"], ["'aot' is not an artifact runtime (did you mean aoti?)"]),
        (["--fullgraph-max-new-tokens=0"], ["'0' is not a positive integer"]),
        (["--fullgraph-max-new-tokens=-3"], ["'-3' is not a positive integer"]),
        (["--fullgraph-max-new-tokens=four"], ["'four' is not a positive integer"]),
        (["--fullgraph-breaks=some"], ["'some' is not a break mode; use one of auto, all, first"]),
        (["--fullgraph-device=tpu"], ["--fullgraph-device='tpu' is not a device; use one of cpu, cuda"]),
        (["--fullgraph-device=cpu:x"], ["'cpu:x' is not a device"]),
    ],
)
def test_bad_option_values_are_usage_errors(pytester: pytest.Pytester, args: list[str],
                                            expected: list[str]) -> None:
    pytester.makepyfile(HEADER_TEST)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    for text in expected:
        assert text in result.stderr.str()
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and len(errors[0]) < 300, errors  # one line that says what to do


@pytest.mark.parametrize(("args", "line"), [
    (["--fullgraph-max-new-tokens=99999999999999"],
     "--fullgraph-max-new-tokens='99999999999999' is more new tokens than a check can generate; use a positive "
     "integer up to 1000000, and at most what the models' positions hold"),
    (["--fullgraph-models=llama,gpt2,mamba", "--fullgraph-max-new-tokens=5000"],
     "--fullgraph-max-new-tokens=5000: gpt2 holds at most 256 positions (max_position_embeddings), and its prompts "
     "take 8, so at most 248 new tokens (too many for llama too)"),
])
def test_max_new_tokens_past_what_the_models_hold_is_one_line_at_start_up(pytester: pytest.Pytester,
                                                                          args: list[str], line: str) -> None:
    """Not checks that each fail, or run to the time limit (the paths given keep the suite out of this test, so
    a run that accepted the value would end at once, not after hours)."""
    pytester.makepyfile(HEADER_TEST)
    result = run_here(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [error for error in result.errlines if error.startswith("ERROR:")] == [f"ERROR: {line}"]


def test_max_new_tokens_set_in_the_ini_past_a_models_positions_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfullgraph_max_new_tokens = 300\n")
    pytester.makepyfile(HEADER_TEST)
    result = run_here(pytester, "--fullgraph-models=llama")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: ini fullgraph_max_new_tokens=300: llama holds at most 256 positions (max_position_embeddings), "
            "and its prompts take 8, so at most 248 new tokens") in result.errlines


@pytest.mark.parametrize(("scenarios", "tokens"), [("basic", 248), ("forced_bos", 255)])
def test_max_new_tokens_up_to_the_positions_left_after_the_prompts_run(pytester: pytest.Pytester, scenarios: str,
                                                                         tokens: int) -> None:
    """The limit counts the selected scenarios' longest prompt: forced_bos's prompts are one token."""
    pytester.makepyfile(HEADER_TEST)
    result = run_here(pytester, "--fullgraph-models=llama,gpt2", f"--fullgraph-scenarios={scenarios}",
                      f"--fullgraph-max-new-tokens={tokens}")
    assert result.ret == 0, result.stderr.str()
    assert f"max_new_tokens={tokens} " in header(result)
    over = run_here(pytester, "--fullgraph-models=llama,gpt2", f"--fullgraph-scenarios={scenarios}",
                    f"--fullgraph-max-new-tokens={tokens + 1}")
    assert over.ret == pytest.ExitCode.USAGE_ERROR


def test_choices_are_taken_in_any_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER_TEST)
    result = run_here(pytester, "--fullgraph-backend=EAGER", "--fullgraph-dtype=Float32,BFLOAT16",
                      "--fullgraph-breaks=First")
    assert result.ret == 0, result.stderr.str()
    assert "backend=eager " in header(result) and "dtypes=float32,bfloat16" in header(result)


def test_bad_run_slow_value_names_variable_and_value(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(HEADER_TEST)
    monkeypatch.setenv("RUN_SLOW", "maybe")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "environment variable RUN_SLOW='maybe' is not a boolean" in result.stderr.str()


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfullgraph_backend = tpu\n")
    pytester.makepyfile(HEADER_TEST)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini fullgraph_backend='tpu'" in result.stderr.str()


def test_defaults(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUN_SLOW", raising=False)
    pytester.makepyfile(HEADER_TEST)
    result = pytester.runpytest()
    assert header(result) == ("fullgraph: models=gemma,llama backend=aot_eager max_new_tokens=4 tier=fast "
                              "strict=False dtypes=float32")


@pytest.mark.parametrize(("env", "ini", "cli", "slow"), [
    (None, "false", [], False),
    (None, "true", [], True),
    ("no", "true", [], False),        # env beats ini
    ("YES", "false", [], True),
    ("off", "false", ["--run-slow"], True),  # CLI beats env
    ("0", None, [], False),
    ("On", None, [], True),
])
def test_run_slow_precedence_cli_env_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                         env: str | None, ini: str | None, cli: list[str], slow: bool) -> None:
    if env is None:
        monkeypatch.delenv("RUN_SLOW", raising=False)
    else:
        monkeypatch.setenv("RUN_SLOW", env)
    if ini is not None:
        pytester.makeini(f"[pytest]\nfullgraph_run_slow = {ini}\n")
    pytester.makepyfile(HEADER_TEST)
    text = header(run_here(pytester, *cli))
    assert ("tier=slow" in text) is slow
    # the slow tier switches the defaults to inductor and longer generations
    assert ("backend=inductor max_new_tokens=16" in text) is slow


def test_cli_beats_ini_for_values(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUN_SLOW", raising=False)
    pytester.makeini("[pytest]\nfullgraph_models = qwen2,phi\nfullgraph_backend = eager\n"
                     "fullgraph_max_new_tokens = 7\nfullgraph_strict = true\n")
    pytester.makepyfile(HEADER_TEST)
    assert header(run_here(pytester)) == ("fullgraph: models=phi,qwen2 backend=eager max_new_tokens=7 "
                                            "tier=fast strict=True dtypes=float32")
    text = header(run_here(pytester, "--fullgraph-models=mamba", "--fullgraph-backend=inductor",
                           "--fullgraph-max-new-tokens=2"))
    assert text.startswith("fullgraph: models=mamba backend=inductor max_new_tokens=2 ")


def test_slow_marker_skips_with_reason_unless_slow_tier(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUN_SLOW", raising=False)
    pytester.makepyfile("import pytest\n\n@pytest.mark.slow\ndef test_long():\n    pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*slow tier is off: use --run-slow or RUN_SLOW=1*"])
    monkeypatch.setenv("RUN_SLOW", "true")
    pytester.runpytest().assert_outcomes(passed=1)


def test_parametrization_ids_are_model_scenario_level(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_case(fullgraph_model_name, fullgraph_scenario, fullgraph_level):\n"
                        "    pass\n")
    result = run_here(pytester, "--collect-only", "-q", "--fullgraph-models=gemma,llama")
    ids = [line.split("[")[1].rstrip("]") for line in result.outlines if "::test_case[" in line]
    assert ids[:6] == ["gemma-greedy-forward", "gemma-greedy-generate", "gemma-greedy-decode",
                       "gemma-greedy-export", "gemma-greedy-while", "gemma-sample-forward"]
    assert len(ids) == 2 * 4 * 5 and "llama-padded-while" in ids


def test_registry_rejects_duplicates_and_bad_names() -> None:
    registry = Registry()
    registry.register("mine", lambda: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="already registered"):
        registry.register("mine", lambda: None)  # type: ignore[arg-type,return-value]
    for bad in ("", "a,b", "all", " x"):
        with pytest.raises(ValueError, match="invalid model name"):
            registry.register(bad, lambda: None)  # type: ignore[arg-type,return-value]


@pytest.mark.breadth
def test_the_cache_dir_reaches_inductor_in_every_worker(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """``--fullgraph-cache-dir`` is where inductor keeps its caches, in xdist workers too, and only for the run."""
    pytester.makepyfile(
        "import os\n"
        "def test_where(fullgraph_settings):\n"
        "    from torch._inductor.runtime.cache_dir_utils import cache_dir\n"
        "    assert cache_dir() == str(fullgraph_settings.cache_dir) == os.environ['TORCHINDUCTOR_CACHE_DIR']\n")
    cache = tmp_path / "inductor-cache"
    result = pytester.runpytest_subprocess("-n", "1", f"--fullgraph-cache-dir={cache}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    pytester.runpytest(f"--fullgraph-cache-dir={cache}", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == before  # put back when the session ends


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_a_device_this_machine_lacks_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER_TEST)
    result = pytester.runpytest("--fullgraph-device=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--fullgraph-device='cuda': torch.cuda.is_available() is False on this machine" in result.stderr.str()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_the_device_is_in_the_header_and_a_missing_index_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER_TEST)
    assert header(run_here(pytester, "--fullgraph-device=cuda")).endswith(" device=cuda")
    result = pytester.runpytest("--fullgraph-device=cuda:99")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cuda device(s), indices 0.." in result.stderr.str()
