"""docs/recompiles.md quotes the committed quick-start report as the terminal shows it: every block under a
``<!-- recompiles: REPORT -->`` marker is that report's Recompiles summary rendered again, and the variations' cost
it states is the report's."""

from __future__ import annotations

import re

from pytest_fullgraph import report
from pytest_fullgraph.report import recompiles
from tests import REPOSITORY

PAGE = REPOSITORY / "docs" / "recompiles.md"
QUOTED = re.compile(r"<!-- recompiles: (?P<report>\S+) -->\n```text\n(?P<block>.*?)\n```", re.DOTALL)


def test_every_quoted_block_is_its_committed_report_rendered_again() -> None:
    quoted = list(QUOTED.finditer(PAGE.read_text()))
    assert quoted, f"no <!-- recompiles: REPORT --> block in {PAGE}"
    for found in quoted:
        checks = report.load(REPOSITORY / found["report"]).checks
        assert found["block"].splitlines() == recompiles.terminal_section(checks), found["report"]


def test_the_cost_the_page_states_is_the_reports() -> None:
    checks = report.load(REPOSITORY / "bench/reports/recompiles/quickstart-aot_eager.json.gz").checks
    spent = sum(result.timings.get("variations_s", 0) for result in checks)
    total = sum(result.duration_s or 0 for result in checks)
    assert f"{spent:.1f} s of the quick start's {total:.0f} s of checks" in PAGE.read_text()
