"""Is parsed JSON the shape a dataclass reads? The first field that is not, as its JSON path and what is wrong
(``checks[3].outcome: missing``), so a malformed report names the field instead of raising ``TypeError:
CheckResult.__init__() missing ...``. The shape is read from the dataclasses' own annotations, so it cannot drift
from them. No torch import."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any

#: How a message names the JSON type each Python type is written as.
_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
          tuple: "a list", dict: "an object", type(None): "null"}
#: How much of a wrong value a message quotes.
_QUOTED = 40


@functools.cache
def _fields(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """The annotation of each field of ``cls``, and the fields without a default (which JSON must give)."""
    hints = typing.get_type_hints(cls)
    required = frozenset(each.name for each in dataclasses.fields(cls)
                         if each.default is dataclasses.MISSING and each.default_factory is dataclasses.MISSING)
    return {each.name: hints[each.name] for each in dataclasses.fields(cls)}, required


def _got(value: Any) -> str:
    text = repr(value) if isinstance(value, str | int | float | bool) else _NAMES.get(type(value), type(value).__name__)
    return text if len(text) <= _QUOTED else text[:_QUOTED - 3] + "..."


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def problem(value: Any, hint: Any, path: str) -> str | None:
    """``path: what is wrong`` for the first part of ``value`` that ``hint`` (an annotation) does not admit, or
    None when it all does. ``float`` admits integers (JSON does not tell ``1`` from ``1.0``); numbers do not admit
    ``true``/``false``."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in arguments:
            return None
        others = [each for each in arguments if each is not type(None)]
        if len(others) == 1:
            return problem(value, others[0], path)
        tried = [problem(value, each, path) for each in others]
        return None if None in tried else tried[0]
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return record_problem(value, hint, path)
    if origin in (list, tuple):
        if not isinstance(value, list):
            return f"{path}: expected a list, got {_got(value)}"
        element = arguments[0] if arguments else Any
        found = (problem(item, element, _join(path, index)) for index, item in enumerate(value))
        return next((each for each in found if each), None)
    if origin is dict:
        if not isinstance(value, dict):
            return f"{path}: expected an object, got {_got(value)}"
        element = arguments[1] if len(arguments) == 2 else Any
        found = (problem(item, element, _join(path, str(key))) for key, item in value.items())
        return next((each for each in found if each), None)
    expected = (int, float) if hint is float else (hint,)
    if isinstance(hint, type) and (not isinstance(value, expected) or (isinstance(value, bool) and hint is not bool)):
        return f"{path}: expected {_NAMES.get(hint, hint.__name__)}, got {_got(value)}"
    return None


def record_problem(value: Any, cls: type, path: str) -> str | None:
    """``problem`` for a JSON object read as the dataclass ``cls``: a missing required field, a field ``cls`` does
    not have, or a field of the wrong type."""
    if not isinstance(value, dict):
        return f"{path}: expected an object, got {_got(value)}"
    hints, required = _fields(cls)
    missing = [name for name in hints if name in required and name not in value]  # in the class's order
    if missing:
        return f"{_join(path, missing[0])}: missing"
    unknown = sorted(set(value) - set(hints))
    if unknown:
        return f"{_join(path, unknown[0])}: not a field of {cls.__name__}"
    found = (problem(item, hints[key], _join(path, key)) for key, item in value.items())
    return next((each for each in found if each), None)
