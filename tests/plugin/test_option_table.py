"""The option table (``plugin.options``): one row per option, its flag, ini key, variable, default and choices
in the help from that row alone; every ``Settings`` field from one row or the selection; values read with the
command line before the environment before the ini, a bad one led by where it was set, reading touching no file."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_fullgraph.models import Registry
from pytest_fullgraph.plugin.options import OPTION, OPTIONS, Chosen, Option, add_options, read_options
from pytest_fullgraph.plugin.parsers import Choice, parse_device, parse_positive_int, parse_seconds
from pytest_fullgraph.plugin.settings import DERIVED_FIELDS, Settings, read_shard_costs, resolve_settings
from pytest_fullgraph.report.shard import Shard
from tests.plugin.test_options import HEADER_TEST

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
    assert len(set(dests)) == len(dests) == 26
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
