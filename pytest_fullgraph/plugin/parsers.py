"""Parsers for option values: ``parse(text, source) -> value``, where ``source`` says where the text was set
("--fullgraph-backend", "ini fullgraph_backend", "environment variable RUN_SLOW").

A bad text is a ``pytest.UsageError`` that names its source and value and says what is valid, so a user knows
which of the command line, the environment or the ini file to fix. ``options.OPTIONS`` gives each option one.
The values an option may take (``BACKENDS``, ``DTYPES``, ...) are here too: the parsers check them, and the
session and the help text list them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_fullgraph.check import scenarios
from pytest_fullgraph.core.suggest import did_you_mean, spelled
from pytest_fullgraph.levels.artifacts import RUNTIMES
from pytest_fullgraph.models import pretrained
from pytest_fullgraph.report import shard

BACKENDS = ("eager", "aot_eager", "inductor")
#: Dtypes a model can be checked in; float64 is the reference that judges rounding, not a dtype under test.
DTYPES = ("float32", "bfloat16", "float16")
#: More new tokens than a check can generate (eagerly and compiled, token by token) in any time limit: refused
#: while parsing, before any model's own limit (its positions) is read.
MAX_NEW_TOKENS = 1_000_000
#: "auto" (the default): "all" in the slow tier; in the fast tier "all" for every level but those whose
#: ``Level.every_break_in_fast_tier`` is false (``generate``), which record their first break.
BREAK_MODES = ("auto", "all", "first")
#: ``attn_implementation`` values ``--fullgraph-attn`` takes (None: each model's own default, sdpa for most).
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")
#: Device types ``--fullgraph-device`` takes; others (mps, xpu) are untested here and refused by name.
DEVICE_TYPES = ("cpu", "cuda")
#: When the shipped conformance suite (``pytest_fullgraph.suite``) is collected: "auto" when models are
#: selected (command line or ini) and no test paths are given; "on" always; "off" never.
SUITE_MODES = ("auto", "on", "off")
#: Whether a passing check calls its compiled object again with its level's variations (``--fullgraph-recompiles``).
RECOMPILE_MODES = ("on", "off")
#: When progress lines are written (``--fullgraph-progress``): "auto" in a terminal outside CI, in runs with checks
#: (``progress.wanted``); "on" always; "off" never.
PROGRESS_MODES = ("auto", "on", "off")

_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


def parse_bool(value: str, source: str) -> bool:
    """Parse like transformers' RUN_SLOW (strtobool): yes/no, true/false, on/off, 1/0, y/n, t/f, any case."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise pytest.UsageError(f"{source}={value!r} is not a boolean; use one of {', '.join(_TRUE + _FALSE)} "
                            "(any case)")


def parse_positive_int(value: str, source: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise pytest.UsageError(f"{source}={value!r} is not a positive integer")
    return number


def parse_new_tokens(value: str, source: str) -> int:
    """A positive number of new tokens up to ``MAX_NEW_TOKENS``; each selected model's positions bound it further,
    once the selection is known (``models.positions.selection_too_long``)."""
    number = parse_positive_int(value, source)
    if number > MAX_NEW_TOKENS:
        raise pytest.UsageError(f"{source}={value!r} is more new tokens than a check can generate; use a positive "
                                f"integer up to {MAX_NEW_TOKENS}, and at most what the models' positions hold")
    return number


def parse_seconds(value: str, source: str) -> float:
    """A non-negative number of seconds (0: no limit)."""
    try:
        seconds = float(str(value).strip())
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):  # also rejects nan
        raise pytest.UsageError(f"{source}={value!r} is not a number of seconds; use a number >= 0 (0: no limit)")
    return seconds


@dataclass(frozen=True)
class Choice:
    """One of ``choices`` or, with ``many``, a comma list of them (in the order given, duplicates dropped).

    A parser object rather than a closure, so the option table's tests can find every choice option and its
    choices. An error names every bad entry and lists every valid one, as pytest-benchmark's options do.
    """

    #: read at each call: a table (``artifacts.RUNTIMES``) may gain rows after the option table is made
    choices: Collection[str]
    what: str
    many: bool = False

    def __call__(self, value: str, source: str) -> str | tuple[str, ...]:
        if not self.many:
            text = value.strip()
            chosen = spelled(text, self.choices)  # INDUCTOR is inductor
            if chosen is None:
                raise pytest.UsageError(f"{source}={value!r} is not {self.what}{did_you_mean(text, self.choices)}; "
                                        f"use one of {', '.join(self.choices)}")
            return chosen
        given = [part.strip() for part in value.split(",") if part.strip()]
        bad = [part for part in given if spelled(part, self.choices) is None]
        if bad or not given:
            named = ", ".join(f"{part!r}{did_you_mean(part, self.choices)}" for part in bad) or "nothing"
            raise pytest.UsageError(f"{source}={value!r}: {named} is not {self.what}; use a comma list of "
                                    f"{', '.join(self.choices)}")
        return tuple(dict.fromkeys(spelled(part, self.choices) or part for part in given))


@dataclass(frozen=True)
class RuntimeChoice(Choice):
    """An artifact runtime whose packages are installed: one that is not is a usage error naming its extra, before
    any check runs, not a failed save after each passing one."""

    def __call__(self, value: str, source: str) -> str | tuple[str, ...]:
        chosen = super().__call__(value, source)
        missing = RUNTIMES[str(chosen)].unavailable()
        if missing is not None:
            raise pytest.UsageError(f"{source}={chosen}: the {chosen} runtime {missing}")
        return chosen


@dataclass(frozen=True)
class ProgressChoice(Choice):
    """A progress mode, or a boolean, which says "on" or "off": ``fullgraph_progress = true`` in an ini from when the
    option was a flag keeps working."""

    def __call__(self, value: str, source: str) -> str | tuple[str, ...]:
        lowered = value.strip().lower()
        if lowered not in self.choices and lowered in _TRUE + _FALSE:
            return "on" if lowered in _TRUE else "off"
        try:
            return super().__call__(value, source)
        except pytest.UsageError as error:  # the bare flag takes a test path after it as its value
            raise pytest.UsageError(f"{error}, or a boolean (a test path right after the bare flag is read as its "
                                    "value: write --fullgraph-progress=on before a path)") from None


def parse_device(value: str, source: str) -> str:
    """A torch device of a type in ``DEVICE_TYPES`` that this machine has, as torch spells it ("cuda:1")."""
    import torch  # only when a device is given: reading the options imports no torch otherwise

    text = value.strip()
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in DEVICE_TYPES:
        raise pytest.UsageError(f"{source}={value!r} is not a device; use one of {', '.join(DEVICE_TYPES)}, "
                                "optionally with an index (cuda:1)")
    if device.type != "cpu":
        backend = getattr(torch, device.type)
        if not backend.is_available():
            raise pytest.UsageError(f"{source}={value!r}: torch.{device.type}.is_available() is False on this "
                                    f"machine (torch {torch.__version__}); use cpu")
        if device.index is not None and device.index >= backend.device_count():
            raise pytest.UsageError(f"{source}={value!r}: this machine has {backend.device_count()} "
                                    f"{device.type} device(s), indices 0..{backend.device_count() - 1}")
    return str(device)


def parse_text(value: str, source: str) -> str:
    """Kept as given: model selections are checked against the registry, a costs report when it is read."""
    return value


def parse_directory(value: str, source: str) -> Path | None:
    """A directory as given; empty means none, so ``--fullgraph-report=`` turns an ini default off."""
    return Path(value) if value else None


def parse_absolute_directory(value: str, source: str) -> Path | None:
    """Made absolute now: xdist workers, inductor and a later ``load_generate`` may run elsewhere."""
    return Path(value).expanduser().resolve() if value else None


def parse_pretrained(value: str, source: str) -> dict[str, Path]:
    """NAME=DIR pairs; the directories are read later, when ``settings.register_checkpoints`` registers them."""
    try:
        return pretrained.parse_pretrained(value, source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def parse_scenarios(value: str, source: str) -> tuple[str, ...]:
    """Scenario names in the scenario table's order (``scenarios.select_scenarios``)."""
    try:
        return scenarios.select_scenarios(value)
    except ValueError as error:
        raise pytest.UsageError(f"{source}: {error}") from None


def parse_shard(value: str, source: str) -> shard.Shard:
    """``I/N``; the models it holds are decided once the selection is known."""
    try:
        return shard.parse_shard(value, source)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
