"""What the Markdown page and the terminal summary say of a run's checks: break cells, the break inside a
higher-order op, peak CUDA memory per level, why checks were skipped, break sites in line order."""

from __future__ import annotations

from pathlib import Path

from pytest_fullgraph import report
from pytest_fullgraph.core.results import BreakRecord, CheckResult
from tests.factories import REPORT_ENVIRONMENT, a_break, a_check, saved_report


def test_break_cell_says_what_happened() -> None:
    from pytest_fullgraph.report.render import cell

    three_graphs = CheckResult("m", "greedy", "decode", "eager", 4, "break", "expected one graph, got 3",
                               graph_count=3)
    assert cell(three_graphs) == "⛔ 3 graphs"
    assert cell(a_check("m", "break", breaks=[a_break(line=1), a_break(line=2)])) == "⛔ 2 breaks"
    assert cell(a_check("m", "break", breaks=[a_break(line=1)])) == "⛔ 1 break"


def a_higher_order_break() -> BreakRecord:
    """What a user's data-dependent branch in ``forward`` gives at the while level: the op, and the break in it."""
    inside = a_break("conftest.py", 8, "user", message="Detected data-dependent branching", source="if x.sum() > 0:")
    return a_break("pytest_fullgraph/loop/decode.py", 374, "user", cause=inside,
                   exception="torch._dynamo.exc.UncapturedHigherOrderOpError",
                   gb_type="UncapturedHigherOrderOpError", gb_id=None, message="This higher order operator doesn't "
                   "work unless it is captured completely with torch.compile",
                   function="decode_while_loop", source="state = while_loop(...)")


def test_a_higher_order_break_shows_the_break_inside_it_everywhere(tmp_path: Path) -> None:
    """The op's own message ends in "Got graph break/error:"; the cause is kept in JSON, Markdown and terminal."""
    from pytest_fullgraph.report.terminal import terminal_lines

    record = a_higher_order_break()
    result = CheckResult("toy", "greedy", "while", "eager", 4, "break", record.summary(), first_break=record)
    assert result.message.endswith("; inside it: Data-dependent branching [GB0170] at conftest.py:8 in forward "
                                   "(user): Detected data-dependent branching")
    loaded = report.load(saved_report(tmp_path, [result]))
    assert loaded.checks[0].first_break == record
    page = (tmp_path / report.MARKDOWN_NAME).read_text()
    assert ("| UncapturedHigherOrderOpError (inside it: Data-dependent branching [GB0170] at conftest.py:8 in "
            "forward) | user |") in page
    assert "[GB0170](" in page  # PyTorch's help for the inner break, which the op itself has no id for
    assert any("inside it: Data-dependent branching [GB0170] at conftest.py:8" in line
               for line in terminal_lines(loaded))


def test_peak_cuda_memory_is_summed_per_level(tmp_path: Path) -> None:
    mib = 1024 * 1024
    checks = [CheckResult("llama", "greedy", "cudagraphs", "inductor", 8, "pass", peak_memory=30 * mib),
              CheckResult("gemma", "greedy", "cudagraphs", "inductor", 8, "pass", peak_memory=50 * mib),
              CheckResult("gemma", "greedy", "while", "inductor", 8, "pass", peak_memory=12 * mib),
              CheckResult("gemma", "greedy", "forward", "inductor", 8, "pass")]  # a CPU check: not measured
    saved_report(tmp_path, checks)
    page = (tmp_path / report.MARKDOWN_NAME).read_text()
    assert "| cudagraphs | 2 | 80.0 | 50.0 | `gemma-greedy-cudagraphs-float32` |" in page
    assert "| while | 1 | 12.0 | 12.0 | `gemma-greedy-while-float32` |" in page
    assert "| forward |" not in page.split("## Peak CUDA memory")[1]
    assert report.load(tmp_path / report.JSON_NAME).checks[0].peak_memory in (30 * mib, 50 * mib, 12 * mib, None)


def test_no_cuda_check_means_no_memory_section(tmp_path: Path) -> None:
    saved_report(tmp_path, [a_check("llama", "pass")])
    assert "Peak CUDA memory" not in (tmp_path / report.MARKDOWN_NAME).read_text()


def test_the_terminal_summary_says_why_checks_were_skipped() -> None:
    """A skip cell in the matrix is only "skip"; the reasons follow it, most frequent first."""
    from pytest_fullgraph.report.terminal import terminal_lines

    checks = [CheckResult("llama", scenario, "decode", "eager", 4, "skip", "float16 cannot run here")
              for scenario in ("greedy", "sample")]
    checks.append(CheckResult("gemma", "greedy", "decode", "eager", 4, "skip", "skipped: no cache argument"))
    checks.append(CheckResult("gemma", "sample", "decode", "eager", 4, "pass", "1 graph(s), tokens equal to eager"))
    lines = terminal_lines(report.Report(dict(REPORT_ENVIRONMENT), checks), top_sites=1)
    assert "skipped 2 check(s): float16 cannot run here" in lines
    assert "skipped for 1 more reason(s): see the report" in lines
    assert not any("no cache argument" in line for line in lines)


def test_break_sites_of_one_file_are_in_line_order() -> None:
    """Sites sort by file and then by line as a number, not as text (":396" before ":2899")."""
    from pytest_fullgraph.report.tables import grouped_sites, location_key

    checks = [a_check("llama", "break", level="generate", breaks=[a_break("transformers/utils.py", line, "generation")])
              for line in (2899, 396, 1452)]
    assert [site["where"] for site in grouped_sites(checks)] == [
        "transformers/utils.py:396", "transformers/utils.py:1452", "transformers/utils.py:2899"]
    assert location_key("<unknown location>") == ("<unknown location>", 0)


def test_a_scenario_is_labelled_by_the_feature_its_run_recorded() -> None:
    """A new scenario's feature comes from the run (``scenario_features``), so it needs no line in ``core.names``;
    a report recorded before the run wrote it is labelled as the built-in scenarios were."""
    from pytest_fullgraph.report.render import feature_level_table

    checks = [CheckResult("llama", scenario, "decode", "aot_eager", 4, "pass") for scenario in ("beam", "twin")]
    recorded = feature_level_table(report.Report({"scenario_features": {"twin": "twin_search"}}, checks), checks)
    assert any(line.startswith("| beam_search (`beam`) |") for line in recorded)
    assert any(line.startswith("| twin_search (`twin`) |") for line in recorded)
    older = feature_level_table(report.Report({}, checks), checks)
    assert any(line.startswith("| `twin` |") for line in older)


def test_a_run_records_every_scenarios_feature_and_merge_keeps_them() -> None:
    from pytest_fullgraph.check.scenarios import SCENARIOS

    features = {name: scenario.feature for name, scenario in SCENARIOS.items()}
    first = report.Report({"scenario_features": dict(list(features.items())[:3])}, [])
    second = report.Report({"scenario_features": dict(list(features.items())[3:])}, [])
    assert report.merge([("a", first), ("b", second)]).environment["scenario_features"] == features
