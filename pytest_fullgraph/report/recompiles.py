"""The second requests in a report: how each variation's calls went (``variation_counts``) and the guards that made
them recompile, grouped by the line of code that installed them (``recompile_sites``), as the Markdown page, the
terminal summary and the HTML page show them; break sites are grouped the same way."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report.html_parts import text
from pytest_fullgraph.report.tables import escape, fold, location_key, plural


@dataclass
class RecompileSite:
    """One line of code whose guards made second requests recompile, with what it guarded and who met it."""

    where: str
    function: str
    source: str
    origin: str
    on_input: bool
    guards: list[str] = field(default_factory=list)
    variations: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    #: checks where a recompile here broke the level's promise (the check failed)
    broken: int = 0

    def guard_text(self, shown: int = 2) -> str:
        more = f" (+{len(self.guards) - shown} more)" if len(self.guards) > shown else ""
        return "; ".join(self.guards[:shown]) + more


def variation_counts(checks: list[CheckResult]) -> dict[str, Counter[str]]:
    """Per variation (in the order first met), how many calls gave each result."""
    counts: dict[str, Counter[str]] = {}
    for result in checks:
        for variation in result.variations:
            counts.setdefault(variation.name, Counter())[variation.result] += 1
    return counts


def recompile_sites(checks: list[CheckResult]) -> list[RecompileSite]:
    """Each line of code a failing guard was installed at, most checks first, then by location."""
    sites: dict[tuple[str, str], RecompileSite] = {}
    for result in checks:
        for variation in result.variations:
            for guard in variation.guards:
                site = sites.setdefault((guard.where(), guard.origin), RecompileSite(
                    guard.where(), guard.function, guard.source, guard.origin, guard.on_input))
                _add(site.guards, guard.guard)
                _add(site.variations, variation.name)
                _add(site.models, result.model)
                if result.check_id not in site.checks:
                    site.checks.append(result.check_id)
                    site.broken += variation.broken_promise
    return sorted(sites.values(), key=lambda site: (-len(site.checks), location_key(site.where)))


def _add(values: list[str], value: str) -> None:
    if value not in values:
        values.append(value)


def _counts_text(counts: Counter[str]) -> str:
    return ", ".join(f"{count} {result}" for result, count in counts.most_common())


def markdown_section(checks: list[CheckResult]) -> list[str]:
    """``## Recompiles``: each variation's results, then the guard sites, as break sites are listed."""
    counts = variation_counts(checks)
    if not counts:
        return []
    called = sum(1 for result in checks if result.variations)
    lines = ["## Recompiles", "",
             f"{plural(called, 'passing check')} called {'its' if called == 1 else 'their'} compiled object again "
             "(`--fullgraph-recompiles`); a call that would recompile was stopped before compiling and its failing "
             "guard recorded, a call that ran was compared with eager `generate` on the same inputs.", "",
             "| variation | calls |", "|---|---|"]
    lines += [f"| {name} | {_counts_text(found)} |" for name, found in counts.items()]
    sites = recompile_sites(checks)
    if sites:
        lines += ["", "| guard installed at | guard | origin | variations | models | checks |",
                  "|---|---|---|---|---|---|"]
        for site in sites:
            source = f"<br>`{escape(site.source.strip())}`" if site.source.strip() else ""
            kind = " (on the compiled frame's input)" if site.on_input else ""
            broken = f", {site.broken} failed (promised none)" if site.broken else ""
            lines.append(f"| `{site.where}` ({site.function}){kind}{source} | `{escape(site.guard_text())}` | "
                         f"{site.origin} | {', '.join(site.variations)} | {fold(site.models)} | "
                         f"{len(site.checks)}{broken} |")
    return [*lines, ""]


def terminal_section(checks: list[CheckResult], top_sites: int = 5) -> list[str]:
    """One line of results per variation, then the most met guard sites."""
    counts = variation_counts(checks)
    if not counts:
        return []
    lines = ["second requests: " + "; ".join(f"{name} {_counts_text(found)}" for name, found in counts.items())]
    sites = recompile_sites(checks)[:top_sites]
    if sites:
        lines.append("top recompile sites:")
    for site in sites:
        lines.append(f"  {site.where} [{site.origin}] `{site.guard_text(1)}` on {', '.join(site.variations)} in "
                     f"{len(site.checks)} check(s): {', '.join(site.models)}")
    return lines


def html_section(checks: list[CheckResult]) -> list[str]:
    """The guard sites as a table, after each variation's results."""
    counts = variation_counts(checks)
    if not counts:
        return []
    lines = ["<h2>Recompiles</h2>", '<table class="sites"><thead><tr><th>variation</th><th>calls</th></tr></thead>'
             "<tbody>", *(f"<tr><td>{text(name)}</td><td>{text(_counts_text(found))}</td></tr>"
                          for name, found in counts.items()), "</tbody></table>"]
    sites = recompile_sites(checks)
    if not sites:
        return lines
    lines.append('<table class="sites"><thead><tr><th>guard installed at</th><th>function</th><th>guard</th>'
                 '<th>origin</th><th>variations</th><th>models</th><th class="n">checks</th></tr></thead><tbody>')
    for site in sites:
        lines.append(f'<tr><td class="where">{text(site.where)}</td><td>{text(site.function)}</td>'
                     f"<td>{text(site.guard_text())}</td><td>{text(site.origin)}</td>"
                     f"<td>{text(', '.join(site.variations))}</td><td class=\"models\">{text(', '.join(site.models))}"
                     f'</td><td class="n">{len(site.checks)}</td></tr>')
    return [*lines, "</tbody></table>"]

