"""Option validation and precedence, run as a user runs pytest (no model is built here)."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_fullgraph.models import Registry
from pytest_fullgraph.plugin.options import OPTION, OPTIONS, Chosen, Option, add_options, read_options
from pytest_fullgraph.plugin.parsers import Choice, parse_device, parse_positive_int, parse_seconds
from pytest_fullgraph.plugin.settings import (
    DERIVED_FIELDS,
    Settings,
    read_shard_costs,
    resolve_settings,
)
from pytest_fullgraph.report.shard import Shard

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


# --- the option table ---------------------------------------------------------------------------------------------

#: Options whose text is kept as given: checked later against the registry, or a path.
FREE_TEXT = {"fullgraph_models", "fullgraph_exclude", "fullgraph_shard_costs", "fullgraph_report",
             "fullgraph_repro", "fullgraph_artifacts", "fullgraph_cache_dir", "fullgraph_levels", "fullgraph_baseline"}
#: The options a bad value of which pytest itself reports, from the command line and from the ini alike.
CHECKED = [option for option in OPTIONS
           if isinstance(option.parse, Choice) or option.parse in (parse_positive_int, parse_seconds, parse_device)]


class _Recorder:
    """Stands in for pytest's parser and its option group, keeping what each declaration was given."""

    def __init__(self) -> None:
        self.options: list[tuple[str, dict[str, Any]]] = []
        self.inis: list[tuple[str, str, dict[str, Any]]] = []

    def getgroup(self, name: str, description: str = "") -> _Recorder:
        return self

    def addoption(self, flag: str, **attributes: Any) -> None:
        self.options.append((flag, attributes))

    def addini(self, name: str, help: str, **attributes: Any) -> None:
        self.inis.append((name, help, attributes))


def test_every_option_has_one_flag_and_one_ini_key_equal_to_its_dest() -> None:
    recorder = _Recorder()
    add_options(cast(pytest.Parser, recorder))
    dests = [attributes["dest"] for _, attributes in recorder.options]
    assert dests == [name for name, _, _ in recorder.inis] == [option.dest for option in OPTIONS]
    assert len(set(dests)) == len(dests) == 25
    assert len({flag for flag, _ in recorder.options}) == len(dests)
    for (flag, attributes), (name, ini_help, ini) in zip(recorder.options, recorder.inis, strict=True):
        option = OPTION[name]
        assert attributes["default"] is None  # "not given", so the environment and the ini can supply it
        assert f"ini: {name}" in attributes["help"] and ini_help.startswith(f"Default for {flag}")
        if option.action:
            assert (attributes["action"], ini["type"], ini["default"]) == ("store_true", "bool", False)
        else:
            assert attributes["metavar"] and ini["type"] is None and ini["default"] is None
        assert flag == ("--run-slow" if name == "fullgraph_run_slow" else "--" + name.replace("_", "-"))


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return ", ".join(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.dest)
def test_defaults_and_choices_are_in_the_help(option: Option) -> None:
    for default in (option.default, option.slow_default):
        if default not in (None, False, {}):
            assert f"{_shown(default)}" in option.help_text
    if isinstance(option.parse, Choice):
        assert all(choice in option.help_text for choice in option.parse.choices)


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.dest)
def test_the_help_names_the_ini_key_and_variable_once_from_the_row(option: Option) -> None:
    """"(ini: KEY)" is added from the row, so no row's own text may spell a key (or the variable) again."""
    assert "ini:" not in option.help + option.note + option.ini_note
    assert option.help_text.count(f"ini: {option.dest}") == 1 and option.help_text.endswith(")")
    if option.env:
        assert f"else env {option.env}, else ini: {option.dest}" in option.help_text


def test_every_settings_field_comes_from_one_option_or_the_selection() -> None:
    fields = [option.field for option in OPTIONS if option.field]
    assert len(fields) == len(set(fields))
    assert {field.name for field in dataclasses.fields(Settings)} == set(fields) | set(DERIVED_FIELDS)
    assert not set(fields) & set(DERIVED_FIELDS)


def _fits(value: object, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` names, for the few shapes a settings field takes."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return any(_fits(value, part) for part in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(_fits(part, item) for part in value)
    if hint is type(None):
        return value is None
    return isinstance(value, hint) and not (hint in (int, float) and isinstance(value, bool))


@pytest.mark.parametrize("option", [option for option in OPTIONS if option.field], ids=lambda option: option.dest)
def test_a_settings_default_is_its_rows_and_of_the_fields_type(option: Option) -> None:
    """The row is the one place a default is written; mypy sees ``OPTION_DEFAULT``'s Any: the type is checked here."""
    field = {field.name: field for field in dataclasses.fields(Settings)}[option.field]
    hint = typing.get_type_hints(Settings)[option.field]
    assert field.default == option.default
    for default in (option.default, option.slow_default if option.slow_default is not None else option.default):
        assert _fits(default, hint), f"{option.dest}: default {default!r} is not a {hint}"


def test_settings_with_only_models_are_the_options_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUN_SLOW", raising=False)
    chosen = read()
    registry = Registry()
    for name in ("gemma", "llama"):
        registry.register(name, lambda: None)  # type: ignore[arg-type,return-value]
    resolved = resolve_settings(chosen, registry)
    assert dataclasses.replace(resolved, levels=()) == Settings(models=("gemma", "llama"))


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.dest)
def test_a_bad_value_is_a_usage_error_led_by_its_source(option: Option) -> None:
    if option.dest in FREE_TEXT:
        option.parse("nope", f"ini {option.dest}")  # checked when used, with the same source
        return
    with pytest.raises(pytest.UsageError) as raised:
        option.parse("nope", f"ini {option.dest}")
    assert str(raised.value).startswith(f"ini {option.dest}") and "nope" in str(raised.value)
    if isinstance(option.parse, Choice):
        assert all(choice in str(raised.value) for choice in option.parse.choices)


@pytest.mark.parametrize("where", ["cli", "ini"])
@pytest.mark.parametrize("option", CHECKED, ids=lambda option: option.dest)
def test_a_bad_choice_or_number_names_where_it_was_set(pytester: pytest.Pytester, option: Option,
                                                       where: str) -> None:
    pytester.makepyfile(HEADER_TEST)
    if where == "ini":
        pytester.makeini(f"[pytest]\n{option.dest} = nope\n")
    result = pytester.runpytest(*([f"{option.flag}=nope"] if where == "cli" else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"{option.flag}='nope'" if where == "cli" else f"ini {option.dest}='nope'") in result.stderr.str()


class _Config:
    """The two things reading the options asks of a ``pytest.Config``."""

    def __init__(self, cli: dict[str, str] | None = None, ini: dict[str, Any] | None = None) -> None:
        self.cli, self.ini = cli or {}, ini or {}

    def getoption(self, dest: str) -> object:
        return self.cli.get(dest)

    def getini(self, name: str) -> object:
        return self.ini.get(name, False if OPTION[name].action else None)


def read(cli: dict[str, str] | None = None, ini: dict[str, Any] | None = None) -> dict[str, Chosen]:
    return read_options(cast(pytest.Config, _Config(cli, ini)))


@pytest.mark.parametrize(("cli", "env", "ini", "expected"), [
    ({}, None, {}, Chosen(False)),
    ({}, None, {"fullgraph_run_slow": True}, Chosen(True, "ini fullgraph_run_slow")),
    ({}, "off", {"fullgraph_run_slow": True}, Chosen(False, "environment variable RUN_SLOW")),
    ({}, " ", {"fullgraph_run_slow": True}, Chosen(True, "ini fullgraph_run_slow")),  # blank: unset
    ({"fullgraph_run_slow": True}, "off", {}, Chosen(True, "--run-slow")),
])
def test_command_line_beats_environment_beats_ini(monkeypatch: pytest.MonkeyPatch, cli: dict[str, Any],
                                                  env: str | None, ini: dict[str, Any], expected: Chosen) -> None:
    if env is None:
        monkeypatch.delenv("RUN_SLOW", raising=False)
    else:
        monkeypatch.setenv("RUN_SLOW", env)
    chosen = read(cli, ini)
    assert chosen["fullgraph_run_slow"] == expected
    tier = ("inductor", 16) if expected.value else ("aot_eager", 4)  # the slow tier's defaults follow it
    assert (chosen["fullgraph_backend"], chosen["fullgraph_max_new_tokens"]) == tuple(map(Chosen, tier))


def test_reading_and_resolving_touch_no_file_and_register_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """Checkpoint directories and the costs report are read by the configure hook's own steps, not here."""
    monkeypatch.delenv("RUN_SLOW", raising=False)
    chosen = read({"fullgraph_pretrained": f"mine={tmp_path / 'nowhere'}", "fullgraph_shard": "2/2",
                   "fullgraph_shard_costs": str(tmp_path / "missing.json"), "fullgraph_models": "b,a,c"})
    assert chosen["fullgraph_pretrained"] == Chosen({"mine": tmp_path / "nowhere"}, "--fullgraph-pretrained")
    assert chosen["fullgraph_shard"] == Chosen(Shard(2, 2), "--fullgraph-shard")
    registry = Registry()
    for name in ("a", "b", "c", "mine"):  # as pytest_configure registers the checkpoint before resolving
        registry.register(name, lambda: None)  # type: ignore[arg-type,return-value]
    settings = resolve_settings(chosen, registry, {"mine": 10.0, "a": 1.0, "b": 1.0, "c": 1.0})
    assert (settings.models, settings.shard, settings.models_selected) == (("a", "b", "c"), "2/2", True)
    assert len(registry) == 4
    with pytest.raises(pytest.UsageError, match=r"^--fullgraph-shard-costs: .*missing\.json: cannot read"):
        read_shard_costs(chosen)
