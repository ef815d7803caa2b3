"""What PyTorch itself says about a graph break, by GB id: its explanation, the hints that are specific to it, what
kind of break it is, and its page on the graph-break site.

The source is the registry torch ships (``torch/_dynamo/graph_break_registry.json``): each GB id has one or more
variants ``{Gb_type, Context, Explanation, Hints}``. Most hints are boilerplate that hundreds of entries share
("It may be possible to write Dynamo tracing rules...", "This is likely to be a Dynamo bug..."); dynamo keeps
those in ``torch._dynamo.graph_break_hints``. Here they become a short kind ("supportable", "dynamo bug") and only
the hints written for the break itself are shown. Kept apart from ``breaks`` (which locates breaks): this reads
documentation, and the report renders it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The graph-break site's page for a GB id: ``GB0170`` -> ``.../gb/gb0170.html`` (the pattern of
#: ``torch._dynamo.exc.get_gbid_documentation_link``).
DOCS_URL = "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb{number}.html"
#: The boilerplate lists of ``torch._dynamo.graph_break_hints``, by the kind each one says a break is.
BOILERPLATE_KINDS = {
    "FUNDAMENTAL": "fundamental",
    "SUPPORTABLE": "supportable",
    "DYNAMO_BUG": "dynamo bug",
    "USER_ERROR": "user error",
    "DIFFICULT": "difficult",
    "CAUSED_BY_EARLIER_GRAPH_BREAK": "caused by an earlier break",
}
#: Explanations that are the name of a variable in dynamo's source, not text (older registry entries).
_PLACEHOLDER_TEXT = re.compile(r'^(_?explanation|_?gb_type|".*)$', re.DOTALL)
_FIELD = re.compile(r"\{[^{}]*\}")


@dataclass(frozen=True)
class BreakHelp:
    """PyTorch's documentation of one GB id, with the boilerplate hints reduced to ``kinds``."""

    gb_id: str
    gb_type: str
    explanation: str
    hints: tuple[str, ...]
    #: what the boilerplate hints say about the break: "fundamental", "supportable", "dynamo bug", ...
    kinds: tuple[str, ...]
    url: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BreakHelp:
        """The help a report stored (``to_dict``), read back."""
        return cls(str(data["gb_id"]), str(data.get("gb_type", "")), str(data.get("explanation", "")),
                   tuple(data.get("hints") or ()), tuple(data.get("kinds") or ()), str(data.get("url", "")))


def docs_url(gb_id: str) -> str:
    return DOCS_URL.format(number=gb_id.removeprefix("GB"))


def help_for(gb_id: str | None) -> BreakHelp | None:
    """The help for ``gb_id`` from the installed torch's registry; None for an id it does not know."""
    if not gb_id:
        return None
    variants = _registry().get(gb_id)
    if not variants:
        return None
    boilerplate = _boilerplate()
    hints: list[str] = []
    kinds: list[str] = []
    for hint in _joined(hint for variant in variants for hint in variant.get("Hints") or []):
        kind = boilerplate.get(hint)
        if kind is not None:
            kinds.append(kind)
        else:
            hints.append(_without_fields(hint))
    return BreakHelp(gb_id, _gb_type(variants), _explanation(variants), tuple(dict.fromkeys(hints)),
                     tuple(dict.fromkeys(kinds)), docs_url(gb_id))


def hint_text(found: BreakHelp) -> str:
    """The specific hints, then what kind of break the boilerplate says it is: one line."""
    kinds = f"({', '.join(found.kinds)})" if found.kinds else ""
    return " ".join(part for part in (*found.hints, kinds) if part)


def help_for_ids(gb_ids: Iterable[str | None]) -> dict[str, BreakHelp]:
    """Help for each id the registry knows, by id, in sorted order."""
    found = {gb_id: help_for(gb_id) for gb_id in sorted({gb_id for gb_id in gb_ids if gb_id})}
    return {gb_id: found_help for gb_id, found_help in found.items() if found_help is not None}


def preload() -> None:
    """Read the registry and the boilerplate hints now (the xdist controller does, while its workers run checks)."""
    _registry()
    _boilerplate()


@functools.cache
def _registry() -> dict[str, list[dict[str, Any]]]:
    import torch._dynamo

    path = Path(torch._dynamo.__file__).parent / "graph_break_registry.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):  # help is a courtesy: a torch without the registry shows none
        return {}


@functools.cache
def _boilerplate() -> dict[str, str]:
    """Each boilerplate hint's text -> its kind."""
    try:
        from torch._dynamo import graph_break_hints
    except ImportError:
        return {}
    return {hint.strip(): kind for name, kind in BOILERPLATE_KINDS.items()
            for hint in getattr(graph_break_hints, name, [])}


def _joined(hints: Any) -> list[str]:
    """Hints as sentences: the registry splits some where dynamo's source concatenates strings (a fragment
    ending in a space continues in the next one)."""
    joined: list[str] = []
    pending = ""
    for hint in hints:
        pending += str(hint)
        if not pending.endswith(" "):
            joined.append(pending.strip())
            pending = ""
    if pending.strip():
        joined.append(pending.strip())
    return joined


def _gb_type(variants: list[dict[str, Any]]) -> str:
    return next((str(v["Gb_type"]) for v in variants if v.get("Gb_type") and not v["Gb_type"].startswith("_")), "")


def _explanation(variants: list[dict[str, Any]]) -> str:
    """The first explanation written as text, preferring one without template fields (``{fn}``), which are shown
    as an ellipsis."""
    texts = [str(v.get("Explanation") or "").strip() for v in variants]
    texts = [text for text in texts if text and not _PLACEHOLDER_TEXT.match(text)]
    plain = [text for text in texts if not _FIELD.search(text)]
    chosen = (plain or texts or [""])[0]
    return _without_fields(chosen)


def _without_fields(text: str) -> str:
    """Template fields (``{fn}``, nested ones too) shown as an ellipsis: their values are not known here."""
    while _FIELD.search(text):
        text = _FIELD.sub("…", text)
    return text
