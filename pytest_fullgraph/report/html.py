"""A report as one self-contained HTML page (``fullgraph-report.html``): every check in a table the browser filters
by level, scenario, dtype, outcome, origin and model, outcome counts per level as a table and a chart, break sites
linked to the transformers / torch source of the release that ran, and, given a baseline, what changed.

One file that loads nothing: the checks are JSON inside the page, the script and style are inlined, the charts are
SVG drawn in Python (``html_parts``), and a Content-Security-Policy forbids any fetch, so a CI artifact opens offline
and cannot leak what it shows. The break sites and known issues are ``html_sites``. No torch import (merge and
collate write the page where torch is absent)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pytest_fullgraph.core.results import DEFAULT_DTYPE, OUTCOMES, CheckResult
from pytest_fullgraph.report import recompiles
from pytest_fullgraph.report.gate import GateResult, diff
from pytest_fullgraph.report.html_parts import asset, bars, json_script, legend, text
from pytest_fullgraph.report.html_sites import known_section, sites_section, source_roots
from pytest_fullgraph.report.order import canonical, report_levels, report_scenarios
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import crash_line, plural

HTML_NAME = "fullgraph-report.html"
#: The page `report diff --html DIR` writes into a directory: beside a merged report, not over its own page
DIFF_HTML_NAME = "fullgraph-diff.html"
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
    sections += [*known_section(checks), *_checks_section(facets), *sites_section(report, checks),
                 *recompiles.html_section(checks)]
    meta = {"roots": source_roots(report.environment), "outcomes": list(OUTCOMES), "facets": facets,
            "help": {gb_id: found.url for gb_id, found in report.break_help().items()}, "changes": changed}
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">', '<link rel="icon" href="data:,">',
        "<title>pytest_fullgraph report</title>", f"<style>\n{asset('report.css')}</style>", "</head><body>",
        *sections, json_script("fullgraph-checks", [result.to_dict() for result in checks]),
        json_script("fullgraph-meta", meta), f"<script>\n{asset('report.js')}</script>", "</body></html>", ""])


def _ordered(report: Report) -> list[CheckResult]:
    """The checks as the table first lists them: by model and dtype, then level and scenario in the report's order
    (forward before generate, greedy before sample), as the Markdown matrix reads."""
    levels = {name: index for index, name in enumerate(report_levels(report))}
    scenarios = {name: index for index, name in enumerate(report_scenarios(report))}
    return sorted(report.checks, key=lambda result: (result.model, result.dtype, levels.get(result.level, 0),
                                                     scenarios.get(result.scenario, 0)))


def _header(report: Report, checks: list[CheckResult]) -> list[str]:
    env = report.environment
    shard = env.get("shard")
    shards = f"shard {shard}" if isinstance(shard, str) else f"shards {', '.join(shard)}" if shard else ""
    facts = [f"torch {env.get('torch')}", f"transformers {env.get('transformers')}", f"backend {env.get('backend')}",
             f"max_new_tokens {env.get('max_new_tokens')}", f"dtypes {','.join(env.get('dtypes') or [DEFAULT_DTYPE])}",
             f"device {env.get('device')}", plural(len(checks), "check"), shards]
    lines = ["<h1>pytest_fullgraph report</h1>",
             '<p class="env">' + " &middot; ".join(text(fact) for fact in facts if fact) + "</p>"]
    if env.get("shards_missing"):
        lines.append(f'<p class="warn">Incomplete: shard(s) {text(", ".join(env["shards_missing"]))} of this run '
                     "are missing from the merged report.</p>")
    if report.interrupted:
        lines.append(f'<p class="warn">Incomplete: the run was interrupted ({text(report.interruption())}); '
                     "checks that had not finished are missing.</p>")
    lines += [f'<p class="warn">Crashed worker: {text(crash_line(worker))}</p>' for worker in report.crashed_workers]
    return lines


def _counts_section(report: Report, checks: list[CheckResult]) -> list[str]:
    """Outcomes per level, as a table (a cell filters the checks to it) and as stacked bars."""
    outcomes = canonical({result.outcome for result in checks}, OUTCOMES)
    by_level = {level: Counter(r.outcome for r in checks if r.level == level) for level in report_levels(report)}
    total = Counter(result.outcome for result in checks)
    lines = ["<h2>Outcomes by level</h2>", '<table id="counts"><thead><tr><th>level</th>',
             *(f'<th class="n">{text(outcome)}</th>' for outcome in outcomes),
             '<th class="n">checks</th></tr></thead><tbody>']
    for level, counts in [*by_level.items(), ("all levels", total)]:
        attribute = f' data-level="{text(level)}"' if level in by_level else ' data-level=""'
        cells = "".join(f'<td class="n"{attribute} data-outcome="{text(outcome)}">{counts[outcome]}</td>'
                        for outcome in outcomes)
        lines.append(f'<tr><th>{text(level)}</th>{cells}<td class="n">{sum(counts.values())}</td></tr>')
    lines += ["</tbody></table>", bars(list(by_level.items()), outcomes, "o", "Outcomes per level"),
              legend(outcomes, "o")]
    return lines


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
    levels = canonical(set(by_level), report_levels(report) + report_levels(baseline))
    env = baseline.environment
    lines = [f"<h2>Compared with {text(name)}</h2>",
             *(f"<p><strong>{text(line)}</strong></p>" for line in gate.header()),
             f'<p>{text(gate.summary())}. The baseline: torch {text(env.get("torch"))}, transformers '
             f'{text(env.get("transformers"))}, {plural(len(baseline.checks), "check")}. The change filter below '
             "shows the checks of one kind of change.</p>"]
    if by_level:
        kinds = list(CHANGES.values())
        lines += [bars([(level, by_level[level]) for level in levels], kinds, "c", "Changed checks per level"),
                  legend(kinds, "c")]
    for title, group in (("Regressions", gate.regressions), ("Improvements", gate.improvements),
                         ("Notes", gate.notes)):
        if group:
            lines += [f'<details{" open" if title == "Regressions" else ""}><summary>{title} ({len(group)})'
                      "</summary><ul>", *(f"<li><code>{text(line)}</code></li>" for line in group), "</ul></details>"]
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
    orders = {"level": report_levels(report), "scenario": report_scenarios(report),
              "dtype": report.environment.get("dtypes") or [],
              "outcome": list(OUTCOMES), "origin": [], "change": [*CHANGES.values(), "unchanged"]}
    labels = {"origin": "origin of a break", "change": f"change ({plural(len(changed or {}), 'check')})"}
    names = [name for name in counted if name != "change" or changed is not None]
    return [{"name": name, "label": labels.get(name, name),
             "options": [[value, f"{value} ({counted[name][value]})"]
                         for value in canonical(set(counted[name]), orders[name])]} for name in names]


def _checks_section(facets: list[dict[str, Any]]) -> list[str]:
    """The filters and the table the script fills (a row's click shows the check's breaks and JSON)."""
    selects = [f'<label>{text(facet["label"])}<select id="filter-{facet["name"]}"><option value="">all</option>'
               + "".join(f'<option value="{text(value)}">{text(label)}</option>' for value, label in facet["options"])
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

