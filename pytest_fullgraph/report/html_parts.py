"""What the HTML page is drawn with: text escaped to ASCII, data for its script, its inlined assets, and bar charts
as SVG drawn here, so the page needs no chart library and loads nothing. No torch import."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from html import escape
from importlib import resources
from typing import Any


def text(value: object) -> str:
    """HTML-escaped and ASCII (other characters as references), so the page reads the same in any encoding."""
    return escape(str(value)).encode("ascii", "xmlcharrefreplace").decode("ascii")


def json_script(element_id: str, value: object) -> str:
    """Data the script reads; every ``<`` is written ``\\u003c`` (the same string to JSON), so no text in a
    message (``</script>``, ``<!--``) can end the element early."""
    try:
        data = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or infinity, which Python writes and JSON.parse refuses: as strings
        data = json.dumps(_finite(value), separators=(",", ":"))
    data = data.replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{data}</script>'


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return [_finite(item) for item in value] if isinstance(value, list) else value


def asset(name: str) -> str:
    """A file of ``html_assets`` (the page's style and script), to inline: the page fetches nothing."""
    return resources.files("pytest_fullgraph.report").joinpath("html_assets").joinpath(name).read_text("utf-8")


def bars(rows: Sequence[tuple[str, Counter[str]]], keys: Sequence[str], prefix: str, title: str) -> str:
    """One stacked bar per row, a segment per key (coloured by the class ``<prefix>-<key>``), to the scale of the
    longest: drawn here, so the page needs no chart library."""
    label_width, bar_width, height = 160, 600, 22
    longest = max((sum(counts[key] for key in keys) for _, counts in rows), default=0) or 1
    parts = []
    for index, (label, counts) in enumerate(rows):
        y, x = index * height, float(label_width)
        parts.append(f'<text x="{label_width - 6}" y="{y + 15}" text-anchor="end">{text(label)}</text>')
        for key in (key for key in keys if counts[key]):
            width = counts[key] / longest * bar_width
            parts.append(f'<rect class="{prefix}-{text(key)}" fill="#57606a" x="{x:.1f}" y="{y + 3}" '
                         f'width="{width:.1f}" height="{height - 6}"><title>{text(label)}: {counts[key]} '
                         f"{text(key)}</title></rect>")
            if width > 8 * len(str(counts[key])) + 4:
                parts.append(f'<text class="count" x="{x + width / 2:.1f}" y="{y + 15}" '
                             f'text-anchor="middle">{counts[key]}</text>')
            x += width
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{sum(counts[key] for key in keys)}</text>')
    size = f'width="{label_width + bar_width + 60}" height="{max(len(rows), 1) * height}"'
    return (f'<svg class="bars" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{text(title)}" {size}>'
            f"<title>{text(title)}</title>{''.join(parts)}</svg>")


def legend(keys: Sequence[str], prefix: str) -> str:
    """The colour of each key, as the bars of ``prefix`` use it."""
    return '<p class="legend">' + "".join(f'<span class="badge {prefix}-{text(k)}">{text(k)}</span>'
                                          for k in keys) + "</p>"

