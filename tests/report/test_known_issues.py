"""Known upstream issues (``report.known_issues``): every entry of the table matches the finding it claims in the
recorded reports and nothing else there; the matcher on fake records, near misses included; "known: URL" in the
JSON, Markdown, HTML, terminal summary, a failing test's message and ``report upstream``'s drafts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.results import BreakRecord, CheckResult
from pytest_fullgraph.publish.run_tables import outcome_lines
from pytest_fullgraph.publish.upstream import write_drafts
from pytest_fullgraph.report import known_issues
from pytest_fullgraph.report.html import html
from pytest_fullgraph.report.known_issues import KNOWN_ISSUES, SIGNATURE, STATUSES, KnownIssue, known
from tests import REPOSITORY
from tests.factories import GENERATION_UTILS, a_break

#: Every report the repository keeps: the measured runs, the torch releases and the CI baseline.
RECORDINGS = sorted([*(REPOSITORY / "bench" / "reports").rglob("*.json.gz"),
                     *(REPOSITORY / "baselines").glob("*.json")])
DSV4 = "https://github.com/huggingface/transformers/pull/46384"
SLIDING = "https://github.com/huggingface/transformers/issues/44609"
#: Each entry of ``KNOWN_ISSUES`` by its address: the models whose checks it covers in the recorded reports, and
#: words every covered check's message or break says (the finding the entry claims). An entry without a line here
#: fails ``test_every_entry_matches_what_it_claims_in_the_recorded_reports``.
RECORDED = {
    DSV4: ({"deepseek_v4"}, "KeyError: 'heavily_compressed_attention'"),
    # transformers' exporters (bench/reports/hf/): the decode program exported after the 8-token prompt refuses
    # the cache of the next step, 68 hf_dynamo checks and the 3 hf_executorch ones whose refusal has the note
    SLIDING: ({"afmoe", "beam", "cohere2", "cohere2_moe", "cohere_compass_text", "cwm", "dots3_note", "dots3_note_text",
               "exaone4", "exaone_moe", "flint", "gemma2", "gemma3_text", "gemma3n_text", "gemma4", "gemma4_text",
               "gemma4_unified", "gemma4_unified_text", "gpt_oss", "granite_swa", "granitemoe_swa", "inkling2_text",
               "inkling_text", "kolibri1", "lara_mini", "lfm3", "llama4", "llama4_text", "mimo_v2_flash", "ministral",
               "modernbert-decoder", "moshi", "olmo3", "vaultgemma"}, "cumulative_length_int 8 at export, 9 now"),
}
#: deepseek_v4's static-cache error as the 196-model run recorded it (``bench/reports/matrix-a-f.json.gz``).
DSV4_ERROR = ("eager generation by fullgraph_generate failed at transformers/cache_utils.py:2156: KeyError: "
              "'heavily_compressed_attention'; model.generate with a static cache fails too (KeyError: "
              "'heavily_compressed_attention'): the model's static-cache path, not the loop")


@pytest.fixture(scope="module")
def recorded() -> list[CheckResult]:
    if not RECORDINGS:
        pytest.skip("bench/reports/ is not in this checkout")
    return [result for path in RECORDINGS for result in report.load(path).checks]


def texts(result: CheckResult) -> str:
    return " ".join([result.message, *(failure.message for failure in known_issues.failures(result))])


@pytest.mark.parametrize("issue", KNOWN_ISSUES, ids=lambda issue: issue.url.rpartition("github.com/")[2])
def test_every_entry_matches_what_it_claims_in_the_recorded_reports(issue: KnownIssue,
                                                                     recorded: list[CheckResult]) -> None:
    assert issue.url in RECORDED, f"{issue.url}: add the models and words it covers to RECORDED"
    models, words = RECORDED[issue.url]
    matched = [result for result in recorded if issue in known(result)]
    assert matched, f"{issue.url} matches no check of {len(RECORDINGS)} recorded reports"
    assert {result.model for result in matched} == models
    assert all(words in texts(result) for result in matched)
    # and nothing else: every failing check that says those words is matched
    said = [result.check_id for result in recorded if words in texts(result) and result.outcome != "pass"]
    assert sorted(said) == sorted(result.check_id for result in matched)


def test_deepseek_v4s_static_cache_entry_is_its_51_errors_not_its_generate_breaks(recorded: list[CheckResult]) -> None:
    """16 in the basic run (four scenarios x forward, decode, export, while), 12 in the decoding-modes matrix
    (the three beam modes x the same levels; its draft modes fail otherwise: transformers refuses them), 10 in the
    export-paths run (greedy and padded x transformers' five export paths, all on a static cache), 4 in the chunked
    prefill run (the same four levels), 4 in the cache level's (its static cache, four scenarios) and 5 in the
    past_window run (the same four levels and the cache level's)."""
    matched = [result for result in recorded if any(issue.url == DSV4 for issue in known(result))]
    assert len(matched) == 51 and {result.outcome for result in matched} == {"error"}
    assert {result.level for result in matched} == {"forward", "decode", "export", "while", "hf_dynamo", "hf_onnx",
                                                    "hf_executorch", "hf_et_helper", "hf_openvino", "cache"}
    generate = [result for result in recorded if result.model == "deepseek_v4" and result.level == "generate"]
    assert generate and not any(known(result) for result in generate)


def test_the_table_is_well_formed() -> None:
    assert len({issue.url for issue in KNOWN_ISSUES}) == len(KNOWN_ISSUES)
    for issue in KNOWN_ISSUES:
        assert issue.url.startswith("https://github.com/") and issue.title and issue.status in STATUSES
        # a model or level alone would mark every failure of a model known
        assert set(issue.signature()) - {"model", "level"}, issue.url
        assert set(issue.signature()) <= set(SIGNATURE)


def an_error(message: str = DSV4_ERROR, outcome: str = "error", model: str = "deepseek_v4",
             level: str = "decode") -> CheckResult:
    return CheckResult(model, "greedy", level, "eager", 4, outcome, message)


@pytest.mark.parametrize(("result", "matches"), [
    (an_error(), True),
    (an_error(level="while", model="deepseek_v5"), True),  # the cache's fault, whichever model has the layer
    (an_error(DSV4_ERROR.replace(":2156", ":2301")), True),  # the line moves between releases
    (an_error(DSV4_ERROR.replace("heavily_compressed_attention", "sliding_attention")), False),
    (an_error(DSV4_ERROR.replace("transformers/cache_utils.py", "transformers/models/x/modeling_x.py")), False),
    (an_error(DSV4_ERROR.replace("KeyError: 'heavily", "IndexError: 'heavily", 1)), False),  # another type
    (an_error("eager generation failed: KeyError 'heavily_compressed_attention'"), False),  # no place named
    (an_error(outcome="pass"), False),
    (an_error(outcome="skip"), False),
])
def test_the_deepseek_v4_signature_and_its_near_misses(result: CheckResult, matches: bool) -> None:
    assert bool(known(result)) is matches


#: gemma2's refusal in transformers' dynamo runner as the exporter run recorded it (``bench/reports/hf/hf-ge.json.gz``).
SLIDING_ERROR = ("compiled generation failed at transformers/exporters/runners/runner_dynamo.py:54: ValueError: Trying "
                 "to flatten user inputs with exported input tree spec; the decode program's input spec holds the "
                 "cache's Python values as they were at export, and the cache the loop passes differs: "
                 "StaticSlidingWindowLayer.cumulative_length_int 8 at export, 9 now")
#: recurrent_gemma's refusal at the same place (``hf-r.json.gz``): its prefill returns no cache, another bug.
NO_CACHE_ERROR = SLIDING_ERROR.replace(
    "StaticSlidingWindowLayer.cumulative_length_int 8 at export, 9 now",
    "StaticSlidingWindowLayer.keys {'_t': 'tensor', 'i': 0} at export, None now; StaticSlidingWindowLayer.values "
    "{'_t': 'tensor', 'i': 1} at export, None now; StaticSlidingWindowLayer.is_initialized True at export, False now; "
    "and 8 more; the previous step's outputs hold no cache, so the loop passed on the cache it started with, as "
    "generate does (the eager forward fills it in place)")


@pytest.mark.parametrize(("message", "matches"), [
    (SLIDING_ERROR, True),
    (SLIDING_ERROR.replace("runner_dynamo.py:54: ValueError", "runner_executorch.py:54: RuntimeError"), True),
    (SLIDING_ERROR.replace("StaticSlidingWindowLayer", "LinearAttentionAndStaticSlidingWindowAttentionLayer"), True),
    (SLIDING_ERROR.replace("8 at export, 9 now", "16 at export, 17 now"), True),  # another prompt length
    (NO_CACHE_ERROR, False),
    # ExecuTorch's refusal without the note: the spec it was given, not what differs from the exported one
    ("compiled generation failed at transformers/exporters/runners/runner_executorch.py:54: RuntimeError: Real spec "
     "TreeSpec(StaticCache, {'_t': 'obj', 'p': 'transformers.cache_utils:StaticCache', 's': {'layers': [{'_t': 'obj', "
     "'p': 'transformers.cache_utils:StaticSlidingWindowLayer', 's': {'cumulative_length_int': 9}}]}}", False),
    (SLIDING_ERROR.replace("transformers/exporters/runners/runner_dynamo.py", "pytest_fullgraph/levels/hf_export.py"),
     False),
])
def test_the_sliding_window_counter_signature_and_its_near_misses(message: str, matches: bool) -> None:
    result = an_error(message, model="gemma2", level="hf_dynamo")
    assert ([issue.url for issue in known(result)] == [SLIDING]) is matches


@pytest.mark.parametrize("words", [
    "the same exported program fed positions",  # the ExecuTorch helper's off-by-one (hf_et_helper)
    "object has no attribute 'cache'",  # assisted decoding of a model that returns no cache (openai-gpt, xlm)
    "Segmentation fault at executorch/runtime/__init__.py",  # ExecuTorch's runtime on mixtures of experts
])
def test_findings_without_an_upstream_report_stay_unmatched(words: str, recorded: list[CheckResult]) -> None:
    """Found in no tracker: not in the table, so every rendering counts them as new (docs/what-it-finds.md says
    "not reported upstream")."""
    said = [result for result in recorded if words in texts(result) and result.outcome != "pass"]
    assert said and not [result.check_id for result in said if known(result)]


def test_a_status_not_read_from_the_tracker_says_so() -> None:
    [sliding] = [issue for issue in KNOWN_ISSUES if issue.url == SLIDING]
    assert sliding.status == "unknown" and sliding.label() == f"known: {SLIDING} (status unknown)"
    assert KNOWN_ISSUES[0].label() == f"known: {DSV4} (open)"


#: generate's own break at its special tokens' check, and one at another line of the same file.
SPECIAL_TOKENS = a_break(GENERATION_UTILS, 2413, "eos", function="_prepare_special_tokens")
ELSEWHERE = a_break(GENERATION_UTILS, 2899, "eos")
BRANCHING = KnownIssue(url="https://github.com/example/x/issues/1", title="branching", status="open",
                       site="transformers/generation/utils.py:24*", gb_id="GB0170", error="Unsupported",
                       level="generate")


@pytest.mark.parametrize(("record", "level", "matches"), [
    (SPECIAL_TOKENS, "generate", True),
    (ELSEWHERE, "generate", False),  # another site
    (a_break(GENERATION_UTILS, 2413, "eos", gb_id="GB0124"), "generate", False),  # another break there
    (SPECIAL_TOKENS, "decode", False),  # another level
    (BreakRecord("torch._dynamo.exc.UncapturedHigherOrderOpError", "while_loop", None, "m", "pytest_fullgraph/x.py",
                 3, "f", "", "loop", cause=SPECIAL_TOKENS), "generate", True),  # the break inside a while_loop
])
def test_a_break_signature_matches_its_site_id_type_and_level(record: BreakRecord, level: str, matches: bool) -> None:
    result = CheckResult("llama", "eos", level, "eager", 4, "break", record.summary(), breaks=[record])
    assert (known(result, table=[BRANCHING]) == [BRANCHING]) is matches
    assert (known(result, record, table=[BRANCHING]) == [BRANCHING]) is matches


def test_only_the_given_break_of_a_check_is_matched() -> None:
    hit, miss = SPECIAL_TOKENS, ELSEWHERE
    result = CheckResult("llama", "eos", "generate", "eager", 4, "break", "", breaks=[miss, hit])
    assert known(result, table=[BRANCHING]) == [BRANCHING]
    assert known(result, hit, table=[BRANCHING]) == [BRANCHING] and known(result, miss, table=[BRANCHING]) == []


@pytest.fixture(scope="module")
def run() -> report.Report:
    """deepseek_v4's and cpmant's checks of the recorded 196-model run: one known cause and one new one."""
    path = REPOSITORY / "bench" / "reports" / "matrix-a-f.json.gz"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in this checkout")
    recorded = report.load(path)
    return report.Report(recorded.environment, [result for result in recorded.checks
                                                if result.model in ("deepseek_v4", "cpmant")])


def test_the_json_lists_the_known_issues_with_their_checks_and_reads_back(run: report.Report) -> None:
    data = run.to_dict()
    [entry] = data["known_issues"]
    assert entry["url"] == DSV4 and entry["status"] == "open" and entry["signature"]["error"] == "KeyError"
    assert len(entry["checks"]) == 12 and all(check.startswith("deepseek_v4-") for check in entry["checks"])
    assert report.Report.from_dict(data, "round trip").to_dict() == data  # derived: recomputed, never read back
    assert report.Report({}, [an_error(outcome="pass")]).to_dict()["known_issues"] == []


def test_the_markdown_marks_the_known_cause_and_counts_the_new_ones(run: report.Report) -> None:
    page = report.markdown(run)
    errors = page[page.index("## Errors by cause"):]
    errors = errors[:errors.index("\n## ")]
    [row] = [line for line in errors.splitlines() if "heavily_compressed_attention" in line and "decode" in line]
    assert row.count(f"(known: {DSV4} (open))") == 1
    assert not [line for line in errors.splitlines() if "cpmant" in line and "known:" in line]
    section = page[page.index("## Known upstream issues"):]
    assert f"| {DSV4} | open | deepseek_v4's static cache" in section
    assert " failing checks match an issue or pull request already reported upstream" in section


def test_the_html_page_and_the_findings_page_link_it(run: report.Report) -> None:
    page = html(run)
    assert "<h2>Known upstream issues</h2>" in page and f'<a href="{DSV4}">{DSV4}</a>' in page
    lines = outcome_lines(run.checks, "error")
    at = next(index for index, line in enumerate(lines) if line.startswith("  - deepseek_v4 "))
    assert lines[at + 1].startswith(f"    - known: {DSV4} (open): ")
    assert not any("known:" in line for line in lines if "cpmant" in line)


def test_the_terminal_summary_says_known_for_a_failure_and_a_break_site(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(known_issues, "KNOWN_ISSUES", (*KNOWN_ISSUES, BRANCHING))
    checks = [an_error(), CheckResult("llama", "eos", "generate", "eager", 4, "break", "b", breaks=[SPECIAL_TOKENS])]
    lines = report.terminal_lines(report.Report({}, checks))
    assert f"known: {DSV4} (open): deepseek_v4's static cache has no `heavily_compressed_attention` layer (DSv4 " \
           "static cache), in 1 failing check(s): deepseek_v4" in lines
    site = next(index for index, line in enumerate(lines) if line.startswith("  transformers/generation/utils.py:2413"))
    assert lines[site + 1] == f"    known: {BRANCHING.url} (open)"


def test_a_known_failure_says_so_under_its_message_in_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(textwrap.dedent(f"""
        from pytest_fullgraph.plugin.verdict import apply_verdict
        from pytest_fullgraph.core.results import CheckResult

        def test_known():
            apply_verdict(CheckResult("deepseek_v4", "greedy", "decode", "eager", 4, "error", {DSV4_ERROR!r}),
                          strict=False)

        def test_new():
            apply_verdict(CheckResult("cpmant", "greedy", "decode", "eager", 4, "error", "IndexError"), strict=False)
    """))
    result = pytester.runpytest("-p", "no:cacheprovider", "--fullgraph-suite=off")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"known: {DSV4} (open): deepseek_v4's static cache has no *"])
    failures = result.stdout.str().split("short test summary info")[0]  # its width varies with the terminal
    known_section, new_section = failures.split("___ test_new ___")
    assert known_section.count("known: ") == 1
    assert "known: " not in new_section


def test_report_upstream_links_the_known_cause_instead_of_presenting_it_as_new(run: report.Report,
                                                                                tmp_path: Path) -> None:
    write_drafts(run, "r.json", tmp_path)
    draft = (tmp_path / "transformers-models.md").read_text()
    section = draft[draft.index("KeyError at transformers/cache_utils.py:2156 (known upstream)\n"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    assert "**Known upstream** (open, 12 of 12 checks): [deepseek_v4's static cache" in section
    assert f"]({DSV4}). Already reported" in section
    new = draft[draft.index("IndexError at transformers/cache_utils.py:487"):]
    assert "**Known upstream**" not in new[:new.index("**Expected:**")]
    assert "(1 known upstream)" in (tmp_path / "README.md").read_text()
