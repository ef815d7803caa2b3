"""The HTML page's break sites and known upstream issues: each site linked to its line in the source of the
transformers / torch release that ran, with its GB id linked to PyTorch's page and advice. No torch import."""

from __future__ import annotations

import re
from typing import Any

from pytest_fullgraph.core.break_advice import REGISTRY, SOURCES, Advice
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report.html_parts import text
from pytest_fullgraph.report.known_issues import by_issue
from pytest_fullgraph.report.schema import Report
from pytest_fullgraph.report.tables import grouped_sites, plural, site_advice

#: Where a break's file lies on GitHub, by the first folder of its path: the package whose version picks the tag,
#: and the address of the tag's tree (transformers keeps its package under ``src/``).
SOURCE_TREES = {"transformers/": ("transformers", "https://github.com/huggingface/transformers/blob/v{version}/src/"),
                "torch/": ("torch", "https://github.com/pytorch/pytorch/blob/v{version}/")}
#: A release (``2.13.0``, after the local ``+cpu`` part is cut) is tagged ``v<version>``; a dev build is not.
_RELEASE = re.compile(r"\d+(\.\d+)+")


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


def known_section(checks: list[CheckResult]) -> list[str]:
    """The known upstream issues the failing checks match (``known_issues``), each linked, with its checks."""
    matched = by_issue(checks)
    if not matched:
        return []
    lines = ["<h2>Known upstream issues</h2>", '<table class="known"><thead><tr><th>known</th><th>status</th>'
             '<th>what</th><th class="n">checks</th><th>which</th></tr></thead><tbody>']
    for issue, found in matched:
        ids = (f"<details><summary>{plural(len(found), 'check')}</summary>"
               f"{text(', '.join(result.check_id for result in found))}</details>")
        lines.append(f'<tr><td><a href="{text(issue.url)}">{text(issue.url)}</a></td><td>{text(issue.status)}</td>'
                     f'<td>{text(issue.title)}</td><td class="n">{len(found)}</td><td class="models">{ids}</td></tr>')
    return [*lines, "</tbody></table>"]


def sites_section(report: Report, checks: list[CheckResult]) -> list[str]:
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
        where = f'<a href="{text(url)}">{text(site["where"])}</a>' if url else text(site["where"])
        inside = f"; inside it: {text(site['inside'])}" if site.get("inside") else ""
        inside += "".join(f'; known: <a href="{text(issue.url)}">{text(issue.url)}</a> ({text(issue.status_text)})'
                          for issue in site["known"])
        models = (f"<details><summary>{plural(len(site['models']), 'model')}</summary>"
                  f"{text(', '.join(site['models']))}</details>")
        lines.append(f'<tr><td class="where">{where}</td><td>{text(site["function"])}</td>'
                     f"<td>{_gb_link(site['gb_id'], help_by_id)}</td><td>{text(site['gb_type'])}{inside}</td>"
                     f"<td class=\"hint\">{_advice_cell(site_advice(site, help_by_id))}</td>"
                     f"<td>{text(site['origin'])}</td><td>{'yes' if site['root_cause'] else 'no'}</td>"
                     f'<td class="models">{models}</td><td class="n">{len(site["checks"])}</td></tr>')
    return [*lines, "</tbody></table>"]


def _advice_cell(advice: Advice) -> str:
    """The advice, its page linked, and where its words come from unless PyTorch's help for the GB id."""
    page = f' <a href="{text(advice.url)}">page</a>' if advice.url else ""
    origin = "" if advice.source == REGISTRY else f" <i>({text(SOURCES[advice.source])})</i>"
    return f"{text(advice.text)}{page}{origin}"


def _gb_link(gb_id: str, help_by_id: dict[str, Any]) -> str:
    """A GB id linked to PyTorch's page on it, when the run's torch gave one."""
    if not gb_id:
        return "&mdash;"
    found = help_by_id.get(gb_id)
    return f'<a href="{text(found.url)}">{text(gb_id)}</a>' if found and found.url else text(gb_id)

