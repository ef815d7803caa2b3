"""docs/recompiles.md quotes committed reports: every block under a ``<!-- recompiles: REPORT -->`` marker is that
report's Recompiles summary as the terminal shows it, every table under ``<!-- recompile-tables: REPORT -->`` its
Markdown tables, rendered again; and the variations' cost it states is the report's."""

from __future__ import annotations

import re

from pytest_fullgraph import report
from pytest_fullgraph.report import recompiles
from tests import REPOSITORY

PAGE = REPOSITORY / "docs" / "recompiles.md"
QUOTED = re.compile(r"<!-- recompiles: (?P<report>\S+) -->\n```text\n(?P<block>.*?)\n```", re.DOTALL)
TABLES = re.compile(r"<!-- recompile-tables: (?P<report>\S+) -->\n(?P<tables>(?:\|.*\n|\n(?=\|))+)")


def test_every_quoted_block_is_its_committed_report_rendered_again() -> None:
    quoted = list(QUOTED.finditer(PAGE.read_text()))
    assert quoted, f"no <!-- recompiles: REPORT --> block in {PAGE}"
    for found in quoted:
        checks = report.load(REPOSITORY / found["report"]).checks
        assert found["block"].splitlines() == recompiles.terminal_section(checks), found["report"]


def test_every_quoted_table_is_its_committed_report_rendered_again() -> None:
    quoted = list(TABLES.finditer(PAGE.read_text()))
    assert quoted, f"no <!-- recompile-tables: REPORT --> tables in {PAGE}"
    for found in quoted:
        checks = report.load(REPOSITORY / found["report"]).checks
        tables = [line for line in recompiles.markdown_section(checks) if line.startswith("|")]
        assert [line for line in found["tables"].splitlines() if line] == tables, found["report"]


def test_the_cost_the_page_states_is_the_reports() -> None:
    checks = report.load(REPOSITORY / "bench/reports/recompiles/quickstart-aot_eager.json.gz").checks
    spent = sum(result.timings.get("variations_s", 0) for result in checks)
    total = sum(result.duration_s or 0 for result in checks)
    assert f"{spent:.1f} s of the quick start's {total:.0f} s of checks" in PAGE.read_text()
