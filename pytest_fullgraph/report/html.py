"""A report as one self-contained HTML page (``fullgraph-report.html``): every check in a table the browser filters
by level, scenario, dtype, outcome, origin and model, outcome counts per level as a table and a chart, break sites
linked to the transformers / torch source of the release that ran, and, given a baseline, what changed.

One file that loads nothing: the checks are JSON inside the page, the script and style are inlined, the charts are
SVG drawn here, and a Content-Security-Policy forbids any fetch, so a CI artifact opens offline and cannot leak
what it shows. No torch import (merge and collate write the page where torch is absent)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from html import escape
from importlib import resources
from typing import Any

from pytest_fullgraph.core.break_advice import REGISTRY, SOURCES, Advice
from pytest_fullgraph.core.results import DEFAULT_DTYPE, OUTCOMES, CheckResult
from pytest_fullgraph.report.gate import GateResult, diff
from pytest_fullgraph.report.known_issues import by_issue
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import canonical, columns, crash_line, grouped_sites, plural, site_advice

HTML_NAME = "fullgraph-report.html"
#: The page `report diff --html DIR` writes into a directory: beside a merged report, not over its own page
DIFF_HTML_NAME = "fullgraph-diff.html"
#: Where a break's file lies on GitHub, by the first folder of its path: the package whose version picks the tag,
#: and the address of the tag's tree (transformers keeps its package under ``src/``).
SOURCE_TREES = {"transformers/": ("transformers", "https://github.com/huggingface/transformers/blob/v{version}/src/"),
                "torch/": ("torch", "https://github.com/pytorch/pytorch/blob/v{version}/")}
#: A release (``2.13.0``, after the local ``+cpu`` part is cut) is tagged ``v<version>``; a dev build is not.
_RELEASE = re.compile(r"\d+(\.\d+)+")
#: The kinds of change the gate's lines start with, as the page names them (the change filter, the chart).
CHANGES = {"REGRESSION": "regression", "IMPROVED": "improvement", "NEW": "new", "MISSING": "missing"}
#: The value of the origin filter for checks with no break record.
NO_ORIGIN = "(none)"
#: The checks table's columns: the key a heading's click sorts by ("" for none), the heading, and the name of the
#: column's width in the style (the widths keep a wide report within the window).
CHECK_COLUMNS = (("model", "model", "model"), ("dtype", "dtype", "dtype"), ("level", "level", "level"),
                 ("scenario", "scenario", "scenario"), ("outcome", "outcome", "outcome"), ("", "message", "message"),
                 ("", "first break site", "site"), ("", "origin", "origin"), ("duration", "duration", "duration"))
#: Nothing may be fetched: inline style and script only; links still navigate.
_POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def source_roots(environment: dict[str, Any]) -> dict[str, str]:
    """The GitHub tree of each package's installed release, by path prefix (``torch/`` -> ``.../blob/v2.13.0/``);
    a package with no release version in the report (absent, a dev build) is left out: a guessed tag would show
    other lines than the ones that broke."""
    roots = {}
    for prefix, (package, tree) in SOURCE_TREES.items():
        version = str(environment.get(package) or "").split("+")[0]
        if _RELEASE.fullmatch(version):
            roots[prefix] = tree.format(version=version)
    return roots


def source_url(file: str, line: int, roots: dict[str, str]) -> str:
    """The line's address at the release that ran, or "" for a file of no linked package (the standard library,
    the user's code). The page's script applies the same ``roots``."""
    prefix = next((prefix for prefix in roots if file.startswith(prefix)), None)
    return f"{roots[prefix]}{file}#L{line}" if prefix else ""


def html(report: Report, baseline: Report | None = None, *, baseline_name: str = "the baseline",
         gate: GateResult | None = None) -> str:
    """The page. With ``baseline``, a section says what changed against it, as the gate (``report diff``) sees it
    (``gate``, when the caller already diffed), and the checks can be filtered by change."""
    checks = _ordered(report)
    changed: dict[str, list[str]] | None = None
    sections = [*_header(report, checks), *_counts_section(report, checks)]
    if baseline is not None:
        gate = gate if gate is not None else diff(baseline, report, allow_settings=True)
        changed = changes_by_check(gate)
        sections += _changes_section(baseline, report, gate, baseline_name)
    facets = _facets(report, checks, changed)
    sections += [*_known_section(checks), *_checks_section(facets), *_sites_section(report, checks)]
    meta = {"roots": source_roots(report.environment), "outcomes": list(OUTCOMES), "facets": facets,
            "help": {gb_id: found.url for gb_id, found in report.break_help().items()}, "changes": changed}
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">', '<link rel="icon" href="data:,">',
        "<title>pytest_fullgraph report</title>", f"<style>\n{_asset('report.css')}</style>", "</head><body>",
        *sections, _json_script("fullgraph-checks", [result.to_dict() for result in checks]),
        _json_script("fullgraph-meta", meta), f"<script>\n{_asset('report.js')}</script>", "</body></html>", ""])


def _ordered(report: Report) -> list[CheckResult]:
    """The checks as the table first lists them: by model and dtype, then level and scenario in the report's order
    (forward before generate, greedy before sample), as the Markdown matrix reads."""
    levels = {name: index for index, name in enumerate(_levels(report))}
    scenarios = {name: index for index, name in enumerate(_scenarios(report))}
    return sorted(report.checks, key=lambda result: (result.model, result.dtype, levels.get(result.level, 0),
                                                     scenarios.get(result.scenario, 0)))


def _text(value: object) -> str:
    """HTML-escaped and ASCII (other characters as references), so the page reads the same in any encoding."""
    return escape(str(value)).encode("ascii", "xmlcharrefreplace").decode("ascii")


def _json_script(element_id: str, value: object) -> str:
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


def _asset(name: str) -> str:
    return resources.files("pytest_fullgraph.report").joinpath("html_assets").joinpath(name).read_text("utf-8")


def _header(report: Report, checks: list[CheckResult]) -> list[str]:
    env = report.environment
    shard = env.get("shard")
    shards = f"shard {shard}" if isinstance(shard, str) else f"shards {', '.join(shard)}" if shard else ""
    facts = [f"torch {env.get('torch')}", f"transformers {env.get('transformers')}", f"backend {env.get('backend')}",
             f"max_new_tokens {env.get('max_new_tokens')}", f"dtypes {','.join(env.get('dtypes') or [DEFAULT_DTYPE])}",
             f"device {env.get('device')}", plural(len(checks), "check"), shards]
    lines = ["<h1>pytest_fullgraph report</h1>",
             '<p class="env">' + " &middot; ".join(_text(fact) for fact in facts if fact) + "</p>"]
    if env.get("shards_missing"):
        lines.append(f'<p class="warn">Incomplete: shard(s) {_text(", ".join(env["shards_missing"]))} of this run '
                     "are missing from the merged report.</p>")
    if report.interrupted:
        lines.append(f'<p class="warn">Incomplete: the run was interrupted ({_text(report.interruption())}); '
                     "checks that had not finished are missing.</p>")
    lines += [f'<p class="warn">Crashed worker: {_text(crash_line(worker))}</p>' for worker in report.crashed_workers]
    return lines


def _levels(report: Report) -> list[str]:
    return list(dict.fromkeys(level for level, _ in columns(report)))


def _scenarios(report: Report) -> list[str]:
    return list(dict.fromkeys(scenario for _, scenario in columns(report)))


def _counts_section(report: Report, checks: list[CheckResult]) -> list[str]:
    """Outcomes per level, as a table (a cell filters the checks to it) and as stacked bars."""
    outcomes = canonical({result.outcome for result in checks}, OUTCOMES)
    by_level = {level: Counter(r.outcome for r in checks if r.level == level) for level in _levels(report)}
    total = Counter(result.outcome for result in checks)
    lines = ["<h2>Outcomes by level</h2>", '<table id="counts"><thead><tr><th>level</th>',
             *(f'<th class="n">{_text(outcome)}</th>' for outcome in outcomes),
             '<th class="n">checks</th></tr></thead><tbody>']
    for level, counts in [*by_level.items(), ("all levels", total)]:
        attribute = f' data-level="{_text(level)}"' if level in by_level else ' data-level=""'
        cells = "".join(f'<td class="n"{attribute} data-outcome="{_text(outcome)}">{counts[outcome]}</td>'
                        for outcome in outcomes)
        lines.append(f'<tr><th>{_text(level)}</th>{cells}<td class="n">{sum(counts.values())}</td></tr>')
    lines += ["</tbody></table>", _bars(list(by_level.items()), outcomes, "o", "Outcomes per level"),
              _legend(outcomes, "o")]
    return lines


def _bars(rows: Sequence[tuple[str, Counter[str]]], keys: Sequence[str], prefix: str, title: str) -> str:
    """One stacked bar per row, a segment per key (coloured by the class ``<prefix>-<key>``), to the scale of the
    longest: drawn here, so the page needs no chart library."""
    label_width, bar_width, height = 160, 600, 22
    longest = max((sum(counts[key] for key in keys) for _, counts in rows), default=0) or 1
    parts = []
    for index, (label, counts) in enumerate(rows):
        y, x = index * height, float(label_width)
        parts.append(f'<text x="{label_width - 6}" y="{y + 15}" text-anchor="end">{_text(label)}</text>')
        for key in (key for key in keys if counts[key]):
            width = counts[key] / longest * bar_width
            parts.append(f'<rect class="{prefix}-{_text(key)}" fill="#57606a" x="{x:.1f}" y="{y + 3}" '
                         f'width="{width:.1f}" height="{height - 6}"><title>{_text(label)}: {counts[key]} '
                         f"{_text(key)}</title></rect>")
            if width > 8 * len(str(counts[key])) + 4:
                parts.append(f'<text class="count" x="{x + width / 2:.1f}" y="{y + 15}" '
                             f'text-anchor="middle">{counts[key]}</text>')
            x += width
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 15}">{sum(counts[key] for key in keys)}</text>')
    size = f'width="{label_width + bar_width + 60}" height="{max(len(rows), 1) * height}"'
    return (f'<svg class="bars" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_text(title)}" {size}>'
            f"<title>{_text(title)}</title>{''.join(parts)}</svg>")


def _legend(keys: Sequence[str], prefix: str) -> str:
    return '<p class="legend">' + "".join(f'<span class="badge {prefix}-{_text(k)}">{_text(k)}</span>'
                                          for k in keys) + "</p>"


def changes_by_check(gate: GateResult) -> dict[str, list[str]]:
    """The kinds of change (``CHANGES``) of each check the gate's lines name, by check id."""
    found: dict[str, list[str]] = {}
    for line in [*gate.regressions, *gate.improvements, *gate.notes]:
        prefix, _, rest = line.partition(" ")
        if prefix in CHANGES:
            kinds = found.setdefault(rest.partition(": ")[0], [])
            kinds += [CHANGES[prefix]] if CHANGES[prefix] not in kinds else []
    return found


def _changes_section(baseline: Report, report: Report, gate: GateResult, name: str) -> list[str]:
    """Changed checks per level and kind of change, as bars, then the gate's own lines."""
    level_of = {result.check_id: result.level for result in [*baseline.checks, *report.checks]}
    by_level: dict[str, Counter[str]] = {}
    for check, kinds in changes_by_check(gate).items():
        by_level.setdefault(level_of.get(check, "?"), Counter()).update(kinds)
    levels = canonical(set(by_level), _levels(report) + _levels(baseline))
    env = baseline.environment
    lines = [f"<h2>Compared with {_text(name)}</h2>",
             *(f"<p><strong>{_text(line)}</strong></p>" for line in gate.header()),
             f'<p>{_text(gate.summary())}. The baseline: torch {_text(env.get("torch"))}, transformers '
             f'{_text(env.get("transformers"))}, {plural(len(baseline.checks), "check")}. The change filter below '
             "shows the checks of one kind of change.</p>"]
    if by_level:
        kinds = list(CHANGES.values())
        lines += [_bars([(level, by_level[level]) for level in levels], kinds, "c", "Changed checks per level"),
                  _legend(kinds, "c")]
    for title, group in (("Regressions", gate.regressions), ("Improvements", gate.improvements),
                         ("Notes", gate.notes)):
        if group:
            lines += [f'<details{" open" if title == "Regressions" else ""}><summary>{title} ({len(group)})'
                      "</summary><ul>", *(f"<li><code>{_text(line)}</code></li>" for line in group), "</ul></details>"]
    return lines


def _facets(report: Report, checks: list[CheckResult], changed: dict[str, list[str]] | None) -> list[dict[str, Any]]:
    """The filters: name, label and options (value, label with its count of checks), in the report's order."""
    counted: dict[str, Counter[str]] = {name: Counter() for name in ("level", "scenario", "dtype", "outcome",
                                                                      "origin", "change")}
    for result in checks:
        origins = {record.origin for record in result.break_records()} or {NO_ORIGIN}
        kinds = (changed or {}).get(result.check_id) or ["unchanged"]
        for name, values in (("level", [result.level]), ("scenario", [result.scenario]), ("dtype", [result.dtype]),
                             ("outcome", [result.outcome]), ("origin", origins), ("change", kinds)):
            counted[name].update(values)
    orders = {"level": _levels(report), "scenario": _scenarios(report), "dtype": report.environment.get("dtypes") or [],
              "outcome": list(OUTCOMES), "origin": [], "change": [*CHANGES.values(), "unchanged"]}
    labels = {"origin": "origin of a break", "change": f"change ({plural(len(changed or {}), 'check')})"}
    names = [name for name in counted if name != "change" or changed is not None]
    return [{"name": name, "label": labels.get(name, name),
             "options": [[value, f"{value} ({counted[name][value]})"]
                         for value in canonical(set(counted[name]), orders[name])]} for name in names]


def _known_section(checks: list[CheckResult]) -> list[str]:
    """The known upstream issues the failing checks match (``known_issues``), each linked, with its checks."""
    matched = by_issue(checks)
    if not matched:
        return []
    lines = ["<h2>Known upstream issues</h2>", '<table class="known"><thead><tr><th>known</th><th>status</th>'
             '<th>what</th><th class="n">checks</th><th>which</th></tr></thead><tbody>']
    for issue, found in matched:
        ids = (f"<details><summary>{plural(len(found), 'check')}</summary>"
               f"{_text(', '.join(result.check_id for result in found))}</details>")
        lines.append(f'<tr><td><a href="{_text(issue.url)}">{_text(issue.url)}</a></td><td>{_text(issue.status)}</td>'
                     f'<td>{_text(issue.title)}</td><td class="n">{len(found)}</td><td class="models">{ids}</td></tr>')
    return [*lines, "</tbody></table>"]


def _checks_section(facets: list[dict[str, Any]]) -> list[str]:
    """The filters and the table the script fills (a row's click shows the check's breaks and JSON)."""
    selects = [f'<label>{_text(facet["label"])}<select id="filter-{facet["name"]}"><option value="">all</option>'
               + "".join(f'<option value="{_text(value)}">{_text(label)}</option>' for value, label in facet["options"])
               + "</select></label>" for facet in facets]
    return ['<h2 id="checks-section">Checks</h2>', '<div id="filters">', *selects,
            '<label>model contains<input id="filter-model" type="search" placeholder="e.g. llama"></label>',
            '<button id="filter-reset" type="button">show all</button></div>',
            '<p id="shown">Showing <b id="visible">0</b> of <b id="total">0</b> checks: <span id="shown-counts">'
            "</span> (a row's click shows its breaks and JSON; a header's click sorts)</p>",
            "<noscript><p>The checks table needs JavaScript; every check is in fullgraph-report.json.</p></noscript>",
            '<table id="checks"><colgroup>' + "".join(f'<col class="col-{name}">' for _, _, name in CHECK_COLUMNS)
            + "</colgroup><thead><tr>" + "".join(_header_cell(key, label) for key, label, _ in CHECK_COLUMNS)
            + "</tr></thead><tbody></tbody></table>"]


def _header_cell(sort_key: str, label: str) -> str:
    """A column header; one with a sort key sorts the rows when clicked."""
    return f'<th data-sort="{sort_key}">{label}</th>' if sort_key else f"<th>{label}</th>"


def _sites_section(report: Report, checks: list[CheckResult]) -> list[str]:
    """Break sites across the checks, most widespread first, each linked to its line at the release that ran, with
    advice for each."""
    sites = grouped_sites(checks)
    if not sites:
        return []
    roots, help_by_id = source_roots(report.environment), report.break_help()
    lines = ["<h2>Break sites</h2>", '<table class="sites"><thead><tr><th>location</th><th>function</th><th>GB id</th>'
             "<th>break</th><th>hint</th><th>origin</th><th>root cause</th><th>models</th><th class=\"n\">checks</th>"
             "</tr></thead>"
             "<tbody>"]
    for site in sites:
        file, _, line = str(site["where"]).rpartition(":")
        url = source_url(file, int(line), roots) if line.isdigit() else ""
        where = f'<a href="{_text(url)}">{_text(site["where"])}</a>' if url else _text(site["where"])
        inside = f"; inside it: {_text(site['inside'])}" if site.get("inside") else ""
        inside += "".join(f'; known: <a href="{_text(issue.url)}">{_text(issue.url)}</a> ({_text(issue.status_text)})'
                          for issue in site["known"])
        models = (f"<details><summary>{plural(len(site['models']), 'model')}</summary>"
                  f"{_text(', '.join(site['models']))}</details>")
        lines.append(f'<tr><td class="where">{where}</td><td>{_text(site["function"])}</td>'
                     f"<td>{_gb_link(site['gb_id'], help_by_id)}</td><td>{_text(site['gb_type'])}{inside}</td>"
                     f"<td class=\"hint\">{_advice_cell(site_advice(site, help_by_id))}</td>"
                     f"<td>{_text(site['origin'])}</td><td>{'yes' if site['root_cause'] else 'no'}</td>"
                     f'<td class="models">{models}</td><td class="n">{len(site["checks"])}</td></tr>')
    return [*lines, "</tbody></table>"]


def _advice_cell(advice: Advice) -> str:
    """The advice, its page linked, and where its words come from unless PyTorch's help for the GB id."""
    page = f' <a href="{_text(advice.url)}">page</a>' if advice.url else ""
    origin = "" if advice.source == REGISTRY else f" <i>({_text(SOURCES[advice.source])})</i>"
    return f"{_text(advice.text)}{page}{origin}"


def _gb_link(gb_id: str, help_by_id: dict[str, Any]) -> str:
    """A GB id linked to PyTorch's page on it, when the run's torch gave one."""
    if not gb_id:
        return "&mdash;"
    found = help_by_id.get(gb_id)
    return f'<a href="{_text(found.url)}">{_text(gb_id)}</a>' if found and found.url else _text(gb_id)
