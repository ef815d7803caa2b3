"""Names a user meant: one rule for model names, scenarios and option choices, so every message suggests alike.

A name typed in another case (``LLAMA``) is the name it spells when exactly one name does; anything else gets at
most ``MAX_SUGGESTIONS`` close names (difflib), never the whole list, which is what the listing commands are for.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Mapping, Sequence

MAX_SUGGESTIONS = 5
#: How alike (difflib's ratio) a name must be to count as the one a typo meant: lama/llama 0.89, late/plbart 0.6.
TYPO_CUTOFF = 0.8
#: The commands that list every name, for messages that do not (``python -m pytest_fullgraph ...``).
LIST_MODELS = "python -m pytest_fullgraph models --no-build"
LIST_SCENARIOS = "python -m pytest_fullgraph scenarios"
LIST_LEVELS = "python -m pytest_fullgraph levels"


def spelled(entry: str, names: Iterable[str]) -> str | None:
    """``entry`` itself when it is one of ``names``, else the one name it spells in another case; None when no
    name (or more than one) matches."""
    names = list(names)
    if entry in names:
        return entry
    found = [name for name in names if name.lower() == entry.lower()]
    return found[0] if len(found) == 1 else None


def close_names(entry: str, names: Iterable[str], limit: int = MAX_SUGGESTIONS, cutoff: float = 0.6) -> list[str]:
    """Up to ``limit`` of ``names`` close to ``entry`` (compared in lower case), closest first."""
    by_lower: dict[str, str] = {}
    for name in names:
        by_lower.setdefault(name.lower(), name)
    return [by_lower[match] for match in difflib.get_close_matches(entry.lower(), list(by_lower), limit, cutoff)]


def is_typo(entry: str, names: Iterable[str]) -> bool:
    """Whether ``entry`` is one slip from a name (``lama``: llama), rather than a name of something else that is
    only vaguely like one (``late``: plbart), which may be a name the user meant to register."""
    return bool(close_names(entry, names, limit=1, cutoff=TYPO_CUTOFF))


def did_you_mean(entry: str, names: Iterable[str]) -> str:
    """`` (did you mean llama, mllama?)``, or "" when no name is close."""
    close = close_names(entry, names)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def select_names(expression: str, names: Sequence[str], groups: Mapping[str, Iterable[str]], kind: str,
                 valid: str) -> tuple[str, ...]:
    """The ``names`` a comma list of names (any case), group keywords (``groups``: ``all``, ``basic``, ...) and
    glob patterns selects, in ``names``' order; ``ValueError`` naming every entry that selects nothing (a
    ``kind``), with close names, then ``valid``."""
    entries = [entry.strip() for entry in expression.split(",") if entry.strip()]
    chosen: set[str] = set()
    problems: list[str] = []
    for entry in entries:
        key, glob = entry.lower(), any(character in entry for character in "*?[")
        if key in groups:
            matched = set(groups[key])
        elif glob:
            matched = {name for name in names if fnmatch.fnmatchcase(name, key)}
        else:
            name = spelled(entry, names)
            matched = {name} if name else set()
        if not matched:
            problems.append(f"{entry!r} matches no {kind}" if glob
                            else f"unknown {kind} {entry!r}{did_you_mean(entry, names)}")
        chosen |= matched
    if problems or not entries:
        raise ValueError(f"{', '.join(problems) or f'no {kind} given'}; valid: {valid}")
    return tuple(name for name in names if name in chosen)
