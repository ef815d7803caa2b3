"""The Markdown page reads at a glance at 196 models: counts first, models with the same outcomes in one row,
what went wrong grouped by cause and whose fault; and the grouping rules themselves, with fakes."""

from __future__ import annotations

from collections import Counter

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.results import BreakRecord, CheckResult, Mismatch
from pytest_fullgraph.report.causes import error_key, fault_of, group, skip_key
from pytest_fullgraph.report.render import markdown
from pytest_fullgraph.report.tables import grouped_sites
from tests import REPOSITORY
from tests.factories import a_break, a_check

#: The basic matrix's reports: every level of 196 models (matrix-a-f lacks ``while``, which while-a-f holds).
MERGED_PARTS = sorted((REPOSITORY / "bench" / "reports").glob("matrix-*.json.gz")) + sorted(
    (REPOSITORY / "bench" / "reports").glob("while-*.json.gz"))


@pytest.fixture(scope="module")
def merged_196() -> report.Report:
    if not MERGED_PARTS:
        pytest.skip("bench/reports/matrix-*.json.gz are not in this checkout")
    return report.merge([(str(path), report.load(path)) for path in MERGED_PARTS])


def test_a_merge_that_leaves_a_report_out_says_which_level_misses_models() -> None:
    matrix_only = [path for path in MERGED_PARTS if path.name.startswith("matrix-")]
    if not matrix_only:
        pytest.skip("bench/reports/matrix-*.json.gz are not in this checkout")
    merged = report.merge([(str(path), report.load(path)) for path in matrix_only])
    assert "**Levels not run for every model:** while: 140 of 196 models." in markdown(merged).splitlines()
    assert "levels not run for every model: while: 140 of 196 models" in report.terminal_lines(merged)


def test_the_196_model_page_is_short_and_starts_with_counts_that_match_the_json(merged_196: report.Report) -> None:
    page = markdown(merged_196)
    lines = page.splitlines()
    assert len({check.model for check in merged_196.checks}) == 196
    assert "Levels not run for every model" not in page  # every basic-matrix report merged
    assert len(lines) < 280, len(lines)  # 250 since the second requests' Recompiles section (issue #45)
    assert next(line for line in lines if line.startswith("## ")) == "## Summary"
    counts = Counter(check.outcome for check in merged_196.checks)
    header = next(line for line in lines if line.startswith("| level | checks |"))
    every = next(line for line in lines if line.startswith("| **all levels** |"))
    outcomes = [cell.split()[-1] for cell in header.strip("|").split("|")[2:-1]]
    numbers = [int(cell) for cell in every.strip("|").split("|")[1:-1]]
    assert numbers[0] == len(merged_196.checks)
    assert dict(zip(outcomes, numbers[1:], strict=True)) == {name: counts[name] for name in outcomes}
    forward = next(line for line in lines if line.startswith("| forward |"))
    passing = {model for model in {c.model for c in merged_196.checks if c.level == "forward"}
               if all(c.outcome == "pass" for c in merged_196.checks if c.model == model and c.level == "forward")}
    assert forward.endswith(f"| {len(passing)} of 196 |")


def test_the_196_model_page_groups_models_errors_and_sites(merged_196: report.Report) -> None:
    page = markdown(merged_196)
    # the models whose only failure is generate's breaks (at one count of breaks each) share one folded row
    only_generate = {model for model in {check.model for check in merged_196.checks}
                     if all((check.outcome == "break") == (check.level == "generate")
                            for check in merged_196.checks if check.model == model)}
    row = next(line for line in page.splitlines()
               if line.startswith("| <details><summary>") and "gemma, gemma2," in line)
    folded = row.split("</summary>")[1].split("</details>")[0].split(", ")
    assert len(folded) > 100 and set(folded) <= only_generate
    # cpmant's and dory's writes past the static cache's end are one cause, the models' fault
    cause = next(line for line in page.splitlines() if "index_copy_(): index 11 is out of bounds" in line)
    assert cause.startswith("| the model's code (transformers/models) |") and "cpmant, dory" in cause
    # a site's statement is under it, and a machine's absolute library path is not shown
    assert "| `transformers/generation/utils.py:396` (__call__)<br>`return bool(unfinished_sequences.max() == 0)` |" \
        in page
    assert "/root/" not in page and "`python3.11/copy.py:153` (deepcopy)" in page
    # decode and export as recorded before the reason said where the forward is and what the loop passes; while since
    assert "| unsupported by fullgraph_generate: {class}.forward takes no `cache` argument | 32 | openai-gpt, " \
           "reformer, rwkv, xlnet |" in page
    assert "takes no `cache` argument: the loop passes its static cache as forward(..., cache=...), as transformers " \
           "5's causal LMs take it | 16 | openai-gpt, reformer, rwkv, xlnet |" in page


def test_models_with_the_same_outcomes_share_a_row_and_all_pass_models_are_counted() -> None:
    checks = [a_check("llama", "pass"), a_check("gemma", "pass"), a_check("opt", "break", breaks=[a_break()]),
              a_check("gpt2", "break", breaks=[a_break()]), a_check("bloom", "error", "boom")]
    page = markdown(report.Report({}, checks))
    assert "**2** of 5 models pass every check: gemma, llama." in page
    assert "| gpt2, opt | ⛔ 1 break |" in page and "| bloom | 💥 error |" in page
    assert "| llama |" not in page and "| gemma |" not in page


def test_dtypes_follow_one_order_everywhere() -> None:
    checks = [a_check("toy", "break", dtype="bfloat16", breaks=[a_break()]),
              a_check("toy", "mismatch", dtype="float32", mismatch=Mismatch(0, 8, 0, 1, 2))]
    page = markdown(report.Report({}, checks))
    assert page.index("| decode (float32) |") < page.index("| decode (bfloat16) |")
    assert page.index("| toy (float32) |") < page.index("| toy (bfloat16) |")


def test_changes_since_the_baseline_lead_with_regressions() -> None:
    before = report.Report({}, [a_check("llama", "pass"), a_check("gemma", "break", breaks=[a_break()])])
    after = report.Report({}, [a_check("llama", "mismatch", "tokens differ at row 0"), a_check("gemma", "pass")])
    page = markdown(after, before)
    section = page[page.index("## Changes since the baseline"):]
    assert "1 regression(s), 3 improvement(s)" in section  # gemma: its outcome, its break site, its break count
    assert section.index("REGRESSION llama-greedy-decode-float32: pass -> mismatch") < section.index("IMPROVED")
    assert "## Changes since the baseline" not in markdown(after)


def test_slowest_checks_are_listed_with_their_phases() -> None:
    slow = a_check("llama", "pass", timings={"eager_s": 1.0, "compile_s": 30.0})
    quick = a_check("gemma", "pass", timings={"eager_s": 0.5, "compile_s": 2.0})
    page = markdown(report.Report({}, [quick, slow]))
    section = page[page.index("## Slowest checks"):]
    assert section.index("`llama-greedy-decode-float32` | 31.0 | eager 1.0, compile 30.0 |") < section.index("gemma")


#: The test a crashed worker was running, as xdist names it.
CRASHED = "suites/test_conformance.py::test_generation_compiles_exactly[opt-greedy-hf_executorch-float32]"


@pytest.mark.parametrize(("check", "fault"), [
    (a_check("opt", "break", breaks=[a_break(origin="model")]), "model"),
    (a_check("opt", "break", breaks=[a_break(origin="masking")]), "transformers"),
    (a_check("opt", "break", breaks=[a_break(origin="loop")]), "loop"),
    (a_check("opt", "break", breaks=[a_break(origin="user")]), "user"),
    (a_check("opt", "error", "eager generation failed at transformers/cache_utils.py:487: IndexError: x; "
                             "model.generate with a static cache fails too (IndexError: x): the model's static-cache "
                             "path, not the loop"), "model"),
    (a_check("opt", "error", "eager generation by fullgraph_generate failed at transformers/models/x.py:1: "
                             "ValueError: v; model.generate with a static cache works, so the loop is at fault"),
     "loop"),
    (a_check("opt", "error", "nothing was compiled: transformers ran level 'forward' eagerly"), "transformers"),
    # in this package: an error in the draft modes' loop is the loop's, one of the checks' own explanation the plugin's
    (a_check("opt", "error",
             "compiled generation failed at pytest_fullgraph/loop/modes/assisted.py:9: RuntimeError: r"),
     "loop"),
    (a_check("opt", "error", "eager generation failed at pytest_fullgraph/check/compare.py:9: RuntimeError: Sizes of "
                             "tensors must match"), "plugin"),
    (a_check("opt", "error", "eager generation failed at transformers/integrations/sdpa_attention.py:182 (called "
                             "from transformers/models/dory/modeling_dory.py:275): RuntimeError: sizes"), "model"),
    (a_check("opt", "error", "eager generation failed at transformers/integrations/sdpa_attention.py:182: "
                             "RuntimeError: sizes"), "transformers"),  # as recorded before the caller was kept
    (a_check("opt", "error", "compiled generation failed at torch/_inductor/lowering.py:9: KeyError: k"), "torch"),
    (a_check("opt", "error", "timeout after 60 s, during compiled generation"), "unknown"),
    (a_check("opt", "error", "compiled generation failed at executorch/runtime/__init__.py:147: RuntimeError: "
                             "method->execute() failed with error 0x10"), "runtime"),
    (a_check("opt", "error", "compiled generation failed at openvino/_ov_api.py:202: RuntimeError: Exception from "
                             "src/inference/src/cpp/infer_request.cpp:224"), "runtime"),  # hf_openvino's runtime
    (a_check("opt", "error", "eager generation by the exportable module (one position a step) failed at "
                             "transformers/cache_utils.py:487: RuntimeError: r; model.generate with a static cache "
                             "works, so transformers' exportable module (integrations/executorch.py) is at fault"),
     "transformers"),
    (a_check("opt", "error", "eager generation by the exportable module (one position a step) failed at "
                             "transformers/integrations/executorch.py:536: AttributeError: a; model.generate with a "
                             "static cache works, so the loop is at fault"), "transformers"),  # as recorded before
    (a_check("opt", "error", f"worker gw1 crashed while running this check ({CRASHED}): Segmentation fault at "
                             "executorch/runtime/__init__.py:147 in execute"), "runtime"),
    (a_check("opt", "error", f"worker gw1 crashed while running this check ({CRASHED})"), "unknown"),
    (a_check("opt", "mismatch", "compiled tokens differ from eager at row 0, position 9 (new token 1): eager 1, "
                                "compiled 2; the same exported program fed positions P, P+1, ... gives generate's "
                                "tokens: the helper's loop is at fault (...)"), "transformers"),
    (a_check("opt", "mismatch", "compiled tokens differ ...; the same prefill and decode as torch.export programs "
                                "(transformers' dynamo back end) give generate's tokens in the same loop: the ONNX "
                                "conversion or ONNX Runtime is at fault"), "runtime"),
    (a_check("opt", "mismatch", "compiled tokens differ ...; the same prefill and decode as torch.export programs "
                                "(transformers' dynamo back end) differ in the same loop too: the exported program is "
                                "at fault, before the ONNX conversion or ONNX Runtime"), "transformers"),
])
def test_whose_fault_comes_from_what_the_check_recorded(check: CheckResult, fault: str) -> None:
    assert fault_of(check) == fault


def test_a_runtime_place_recorded_as_user_code_is_shown_as_the_runtime_in_the_site_table() -> None:
    """ExecuTorch's errors were recorded with the catch-all ``user`` origin before the ``runtime`` origin."""
    check = a_check("opt", "error", "compiled generation failed at executorch/runtime/__init__.py:147: x")
    check.first_break = BreakRecord("RuntimeError", "RuntimeError", None, "x", "executorch/runtime/__init__.py", 147,
                                    "execute", "", "user")
    own = a_check("opt", "break", level="while")
    own.first_break = BreakRecord("Unsupported", "Data-dependent branching", "GB0170", "x", "conftest.py", 8,
                                  "forward", "", "user")
    origins = {site["where"]: site["origin"] for site in grouped_sites([check, own])}
    assert origins == {"executorch/runtime/__init__.py:147": "runtime", "conftest.py:8": "user"}


def test_one_cause_however_its_numbers_names_and_loop_form_vary() -> None:
    assert error_key(f"worker gw0 crashed while running this check ({CRASHED}): Segmentation fault at x.py:1 in f") \
        == error_key("worker gw2 crashed while running this check (t.py::t[opt-beam-decode]): Segmentation fault at "
                     "x.py:1 in f")
    assert error_key("eager generation by fullgraph_generate failed: index 11 of 'cpmant'") == \
        error_key("eager generation by fullgraph_generate(loop='while') failed: index 9 of 'dory'")
    assert error_key("IndexError: index 11") != error_key("KeyError: index 11")
    assert skip_key("unsupported by fullgraph_generate(loop='while'): RwkvForCausalLM.forward takes no `cache`") == \
        skip_key("unsupported by fullgraph_generate: XLNetLMHeadModel.forward takes no `cache`")
    located = "unsupported: RwkvForCausalLM.forward (transformers/models/rwkv/modeling_rwkv.py:683) takes no `cache`"
    assert skip_key(located) == skip_key("unsupported: XLNetLMHeadModel.forward (x/m.py:9) takes no `cache`")
    assert skip_key("skipped: needs x.py:3") != skip_key("skipped: needs y.py:3")  # a site that is the reason itself


def test_groups_follow_the_fault_order_then_size() -> None:
    checks = [a_check("a", "error", "nothing was compiled: transformers ran level 'forward' eagerly"),
              a_check("b", "error", "x failed at transformers/models/b.py:1: E: the model's static-cache path"),
              a_check("c", "error", "nothing was compiled: transformers ran level 'forward' eagerly")]
    groups = group(checks, error_key, with_fault=True)
    assert [(found.fault, found.models) for found in groups] == [("model", ["b"]), ("transformers", ["a", "c"])]


def test_the_pages_length_quoted_in_the_docs_is_the_merged_runs(merged_196: report.Report) -> None:
    length = len(markdown(merged_196).splitlines())
    assert f"(the merged 196-model run is {length} lines;" in (REPOSITORY / "README.md").read_text()
    assert f"merged 196-model run: {length} lines)" in (REPOSITORY / "docs" / "reports.md").read_text()
