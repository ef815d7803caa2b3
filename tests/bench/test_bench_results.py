"""Every table on the bench/results/ pages says where it comes from; each one a bench command made is rendered again
from the raw output committed beside it (bench/raw.py), so no number there is typed in unseen. The pages are one per
topic, each listed in the index and giving its current figures before its history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.bench.bench_modules import BENCH, bench_module

RESULTS = BENCH / "results"
INDEX = RESULTS / "README.md"
PAGES = sorted(path for path in RESULTS.glob("*.md") if path != INDEX)
MARKER = re.compile(r"<!-- (table|typed): (.+) -->")


def _tables(text: str) -> list[tuple[int, str, list[str]]]:
    """Each table of ``text``: its first line's number, the last non-blank line above it, and its lines."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines):
        if line.startswith("|---") and number and lines[number - 1].startswith("|"):
            above = next((lines[i] for i in range(number - 2, -1, -1) if lines[i].strip()), "")
            end = next((i for i in range(number, len(lines)) if not lines[i].startswith("|")), len(lines))
            found.append((number, above, lines[number - 1:end]))
    return found


def _page_tables() -> list[tuple[str, int, str, list[str]]]:
    """Each table of every results page (the index too): where it is (page:line), its first line's number, the line
    above it, its lines."""
    return [(f"{page.name}:{number}", number, above, table) for page in [INDEX, *PAGES]
            for number, above, table in _tables(page.read_text())]


def _generated() -> list[tuple[str, str, list[str]]]:
    """Each table made from raw output: where it is (page:line), its raw output's path, its lines."""
    found = []
    for where, _, above, table in _page_tables():
        marker = MARKER.fullmatch(above)
        if marker and marker[1] == "table":
            found.append((where, marker[2], table))
    return found


def test_there_are_results_pages_and_no_notebook_beside_them() -> None:
    assert PAGES, f"no results pages under {RESULTS}"
    assert not (BENCH / "RESULTS.md").exists(), "bench/RESULTS.md is split into bench/results/, one page per topic"


def test_every_table_says_where_it_comes_from() -> None:
    unsaid = [f"{where}: {table[0][:60]}" for where, _, above, table in _page_tables() if not MARKER.fullmatch(above)]
    assert not unsaid, "tables with neither <!-- table: FILE --> nor <!-- typed: WHY --> above them:\n" + "\n".join(
        unsaid)


def test_a_table_with_neither_marker_is_found() -> None:
    text = "Intro.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n<!-- typed: x -->\n\n| c |\n|---|\n"
    assert [(above, table[0]) for _, above, table in _tables(text)] == [("Intro.", "| a | b |"),
                                                                        ("<!-- typed: x -->", "| c |")]


@pytest.mark.parametrize(("where", "source", "table"), _generated(), ids=lambda value: str(value)[:40])
def test_a_generated_table_is_its_raw_output(where: str, source: str, table: list[str]) -> None:
    raw_module = bench_module("raw")
    raw = raw_module.load(BENCH.parent / source)
    assert table == bench_module(raw["bench"]).table(raw), f"{where} differs from {source}"


def test_every_raw_output_is_shown() -> None:
    shown = {source for _, source, _ in _generated()}
    committed = {str(path.relative_to(BENCH.parent)) for path in RESULTS.glob("*.json")}
    assert committed <= shown, f"raw outputs no results page's table is made from: {sorted(committed - shown)}"


def test_results_pages_say_when_and_at_which_commit_not_which_session() -> None:
    """A reader of a results page knows dates and commits; who measured in which sitting means nothing to them."""
    pages = [INDEX, *PAGES, BENCH.parent / "docs" / "what-it-finds.md", BENCH.parent / "docs" / "FINDINGS.md"]
    said = [f"{page.name}:{number}" for page in pages
            for number, line in enumerate(page.read_text().splitlines(), 1) if re.search(r"\bsessions?\b", line, re.I)]
    assert not said, f"results pages speaking of sessions: {', '.join(said)}"


def _listed(index: str) -> list[str]:
    """The pages an index lists: one line each, starting with a link to the page."""
    return re.findall(r"^- \[[^]]+\]\(([^)/]+\.md)\)", index, re.M)


def test_every_results_page_is_listed_in_the_index_once() -> None:
    listed = _listed(INDEX.read_text())
    assert sorted(listed) == [page.name for page in PAGES], (
        f"{INDEX.name} lists {sorted(listed)}; the pages are {[page.name for page in PAGES]}")


def test_an_index_lists_the_pages_it_links_line_by_line() -> None:
    index = "# R\n\n- [a.md](a.md): one\n- [b.md](b.md): two,\n  wrapped\nSee [c.md](c.md).\n"
    assert _listed(index) == ["a.md", "b.md"]


def _sections(text: str) -> list[str]:
    """A page's second-level headings, in order."""
    return re.findall(r"^## (.+)$", text, re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_results_page_gives_its_current_figures_then_its_history(page: Path) -> None:
    assert _sections(page.read_text()) == ["Current figures", "History"], (
        f"{page.name}: its sections must be \"## Current figures\", then \"## History\", each once")


def test_a_page_with_history_first_is_found() -> None:
    assert _sections("# T\n\n## History\n\n### old\n\n## Current figures\n") == ["History", "Current figures"]


def test_modes_table_counts_models_per_cause_and_names_few() -> None:
    rows = [{"model": "a", "scenario": "beam", "outcome": "exact"},
            {"model": "b", "scenario": "beam", "outcome": "loop error", "error": "E",
             "static_cache": "(model.generate with a static cache failed: E)"},
            {"model": "c", "scenario": "beam", "outcome": "mismatch",
             "static_cache": "model.generate with a static cache gives the default tokens, so the loop is at fault"},
            {"model": "d", "scenario": "beam", "outcome": "refused", "error": "X.forward takes no `cache` argument"},
            {"model": "a", "scenario": "assisted", "outcome": "generate error", "error": "not supported with stateful"}]
    assert bench_module("modes").table({"rows": rows}) == [
        "| scenario | models | exact | model's static cache (generate fails or differs too) | loop refuses (no `cache` "
        "argument) | transformers refuses a stateful model | mismatch |",
        "|---|---|---|---|---|---|---|",
        "| `beam` | 4 | 1 | 1 (b) | 1 (d) | 0 | 1 (c) |",
        "| `assisted` | 1 | 0 | 0 | 0 | 1 (a) | 0 |"]


def test_breadth_table_counts_small_builds_and_groups_failures() -> None:
    rows = [{"type": "a", "parameters": 10}, {"type": "b", "parameters": 3_000_000},
            {"type": "c", "error": "ValueError: x | y"}, {"type": "d", "error": "ValueError: x | y"}]
    assert bench_module("breadth").table({"rows": rows}) == [
        "| result | types |", "|---|---|", "| build and generate | 2 of 4 |", "| of those under 2M parameters | 1 |",
        "| fails: ValueError: x / y | 2 (c, d) |"]


def test_precision_table_shows_each_run_and_its_differences() -> None:
    rows = [{"model": "mid", "dtype": "bfloat16", "setting": "default", "results": ["equal", "flip@3"],
             "seconds": 9.5}, {"model": "mid", "dtype": "float16", "setting": "no_simd", "failed": "OOM"}]
    assert bench_module("precision").table({"rows": rows})[2:] == [
        "| mid | bfloat16 | default | 1/2 | flip@3 | 9.5 |", "| mid | float16 | no_simd | failed: OOM | | |"]


def test_the_cache_reproducers_paragraph_is_its_committed_index() -> None:
    """bench/results/reproducers.md's counts of the cache level's scripts come from the index it links."""
    import json

    index = json.loads((BENCH / "repros" / "cache-reproducers.json").read_text())
    written = [entry for entry in index["reproducers"] if entry["written"]]
    seconds = [entry["verify_s"] for entry in written]
    lines = [entry["lines"] for entry in written]
    templates = [entry["template"] for entry in written]
    text = " ".join((BENCH / "results" / "reproducers.md").read_text().split())
    assert all(entry["exit_status"] == 1 for entry in written)
    assert (f"{len(written)} scripts cover {sum(len(entry['checks']) for entry in written)} of the 85 failing `cache` "
            f"checks, and all {len(written)} exit 1 in the bare environment, {min(seconds):.1f} to {max(seconds):.1f} "
            f"s each, {min(lines)} to {max(lines)} lines") in text
    assert (f"{templates.count('cache_divergence')} `cache_divergence` scripts" in text
            and f"{templates.count('static_error')} `static_error` ones" in text)


def test_the_reach_page_quotes_the_code_reach_figures() -> None:
    """bench/results/reference.md's figures above its table (lines run, each distinctive path's models) are
    code_reach's summary of the committed raw output, line for line."""
    page = " ".join((RESULTS / "reference.md").read_text().split())
    summary = bench_module("code_reach").summary(bench_module("raw").load(RESULTS / "code-reach.json"))
    missing = [line for line in summary if " ".join(line.split()) not in page]
    assert not missing, "reference.md does not say:\n" + "\n".join(missing)
