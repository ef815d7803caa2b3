"""Numbers the docs quote in prose, each computed here from docs/FINDINGS.md (which a test regenerates byte for byte
from the committed reports): a rerun that changes one fails until the sentence says it too."""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Callable

import pytest

from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report import Report
from tests import REPOSITORY
from tests.publish.test_findings import feature_rows

FINDINGS = (REPOSITORY / "docs" / "FINDINGS.md").read_text()
MODES = ("forward", "generate", "decode", "export", "while")
LOOP_LEVELS = ("decode", "export", "while")


def prose(page: str) -> str:
    """A page with its line breaks as spaces, so a quoted sentence is found however it wraps."""
    return " ".join((REPOSITORY / page).read_text().split())


def count(cell: str, mark: str) -> int:
    found = re.search(rf"{mark} (\d+)", cell)
    return int(found.group(1)) if found else 0


def cells(scenario: str) -> dict[str, str]:
    return dict(zip(MODES, feature_rows(FINDINGS)[MODES, scenario], strict=True))


def passing(scenarios: tuple[str, ...]) -> list[int]:
    return [count(cells(scenario)[level], "✅") for scenario in scenarios for level in LOOP_LEVELS]


BEAM, DRAFT = ("beam", "beam_sample", "beam_eos"), ("prompt_lookup", "assisted", "assisted_sample")


def test_readme_quotes_the_modes_ranges_and_the_beam_forward_errors() -> None:
    beams, drafts = passing(BEAM), passing(DRAFT)
    text = prose("README.md")
    assert (f"for beam search on {min(beams)} to {max(beams)} models and for the draft modes on {min(drafts)} to "
            f"{max(drafts)}") in text
    assert f"the {count(cells('beam')['forward'], '💥')} errors say so" in text


def test_what_it_finds_quotes_each_loop_levels_exact_models_per_mode() -> None:
    text = prose("docs/what-it-finds.md")
    beam, sample, eos = (passing((scenario,)) for scenario in BEAM)
    assert (f"for beam search on {beam[0]} models at `decode`, {beam[1]} at `export`, {beam[2]} in the `while` form; "
            f"beam sampling {' / '.join(map(str, sample))}; beam search with EOS and two sequences returned "
            f"{' / '.join(map(str, eos))}") in text
    lookup, assisted, speculative = (set(passing((scenario,))) for scenario in DRAFT)
    assert len(lookup) == len(assisted) == len(speculative) == 1, "the draft modes' sentence assumes one count each"
    assert (f"prompt lookup {lookup.pop()} at each, assisted decoding {assisted.pop()} and speculative sampling "
            f"{speculative.pop()}") in text
    forward = {scenario: count(cells(scenario)["forward"], "✅") for scenario in ("prompt_lookup", "assisted")}
    assert f"it is exact on {forward['prompt_lookup']} (prompt lookup) and {forward['assisted']} (assisted)" in text
    breaking = [count(cells(scenario)["generate"], "⛔") for scenario in (*BEAM, *DRAFT)]
    assert f"({min(breaking)} to {max(breaking)} models by mode;" in text


def model_counts(level: str) -> dict[str, int]:
    """The basic matrix's models by outcome at ``level`` (FINDINGS' first "over models" table)."""
    table = FINDINGS.split("The same over models", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith(f"| `{level}` |"))
    numbers = [int(cell) for cell in row.strip("|").split("|")[1:]]
    return dict(zip(("models", "pass", "skip", "nondeterministic", "break", "mismatch", "error"), numbers,
                    strict=True))


@pytest.mark.parametrize(("level", "sentence"), [
    ("forward", "`forward` (transformers' compiled forward inside `generate`): {pass} one graph with eager's tokens, "
                "{break} break, {error} error, {skip} skipped with their reasons."),
    ("decode", "`decode` (the model's forward inside our one-graph loop): {pass} pass, {break} break, {error} error, "
               "{skip} skipped."),
])
def test_what_it_finds_quotes_the_basic_matrix_per_level(level: str, sentence: str) -> None:
    assert sentence.format(**model_counts(level)) in prose("docs/what-it-finds.md")


def results_text() -> str:
    """Every bench/results/ page, as prose: a test finds a quoted result on whichever topic's page holds it."""
    pages = sorted((REPOSITORY / "bench" / "results").glob("*.md"))
    assert pages, "no bench/results/ pages"
    return " ".join(prose(str(page.relative_to(REPOSITORY))) for page in pages)


def test_the_recheck_results_are_its_committed_output() -> None:
    data = json.loads((REPOSITORY / "bench" / "recheck" / "recheck-2026-12-06.json").read_text())
    rechecked = data["rechecked"]
    differing = [each for each in rechecked if each["differs"]]
    same = len(rechecked) - len(differing)
    outcomes = Counter(each["now"].split(" ")[0] for each in rechecked)
    text = results_text()
    assert f"**{same} of {len(rechecked)} are as recorded. {len(differing)} differs**" in text
    assert (f"Rerun: {outcomes['pass']} pass, {outcomes['break']} break, {outcomes['skip']} skip, "
            f"{outcomes['error']} error.") in text
    for each in differing:
        assert each["check_id"] in text


def test_the_gated_pull_request_tier_results_are_its_committed_report() -> None:
    from pytest_fullgraph import report

    run = report.load(REPOSITORY / "bench" / "runs" / "popular-gated-2026-12-06.json.gz")
    baseline = report.load(REPOSITORY / "baselines" / "fast-torch2.13.0.json")
    outcomes = Counter(result.outcome for result in run.checks)
    assert {result.key: result.outcome for result in run.checks} == {r.key: r.outcome for r in baseline.checks}
    text = results_text()
    assert f"**{outcomes['pass']} passed, {len(run.checks) - outcomes['pass']} xfailed in 28 min 28 s**" in text
    assert f"{len(run.checks)} check(s) compared, 0 worse, 0 better, 0 not in it" in text


@functools.cache
def export_path_reports() -> list[Report]:
    from pytest_fullgraph import report

    return [report.load(path) for path in sorted((REPOSITORY / "bench" / "reports" / "hf").glob("hf-*.json.gz"))]


def remeasure_counts() -> dict[str, int]:
    """The ExecuTorch re-measure, from what ``bench/replace.py`` kept of each swapped check (``was``): the shards
    rerun whole (of those holding ``hf_executorch`` checks), and how many checks that had passed now fail and that
    had failed now pass."""
    shards = executorch_shards = passed = now_failing = now_passing = 0
    for loaded in export_path_reports():
        now = {result.check_id: result.outcome for result in loaded.checks}
        was = {check_id: outcome for entry in loaded.environment.get("replaced_checks", [])
               if "ExecuTorch re-measure" in entry["by"] for check_id, outcome in entry.get("was", {}).items()}
        shards += bool(was)
        executorch_shards += any(result.level == "hf_executorch" for result in loaded.checks)
        passed += sum(outcome == "pass" for outcome in was.values())
        now_failing += sum(outcome == "pass" and now[check_id] != "pass" for check_id, outcome in was.items())
        now_passing += sum(outcome not in ("pass", "skip") and now[check_id] == "pass"
                           for check_id, outcome in was.items())
    return {"remeasured": shards, "executorch_shards": executorch_shards, "passed_before": passed,
            "now_failing": now_failing, "now_passing": now_passing}


def draws_counts(level: str = "hf_executorch") -> dict[str, int]:
    """The level's row of FINDINGS' draws table (each failing check drawn three times)."""
    lines = FINDINGS.splitlines()
    start = next(index for index, line in enumerate(lines)
                 if line.startswith("| level | checks | pass | skip | fail all"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")]
    row = next(line for line in lines[start:] if line.startswith(f"| `{level}` |"))
    cells = dict(zip(header, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
    varies = sum(int(count) for name, count in cells.items() if name.startswith("varies"))
    return {"fail_every_draw": int(cells["fail all 3 draws"]), "varies": varies,
            "not_drawn": int(cells["failed, not drawn again"])}


def names(models: set[str]) -> str:
    """``a, b and c``, as the pages list models."""
    ordered = sorted(models)
    return ", ".join(ordered[:-1]) + f" and {ordered[-1]}" if len(ordered) > 1 else "".join(ordered)


def exporter_counts() -> dict[str, int | str]:
    """README's exporter paragraph, each count computed from the committed export-path reports."""
    by_model: dict[str, list[CheckResult]] = {}
    for loaded in export_path_reports():
        for result in loaded.checks:
            by_model.setdefault(result.model, []).append(result)

    def models(test: Callable[[CheckResult], bool]) -> set[str]:
        return {model for model, checks in by_model.items() if any(test(result) for result in checks)}

    exporters = ("hf_dynamo", "hf_onnx", "hf_executorch")
    exact = {model for model, checks in by_model.items()
             if sum(result.level in exporters and result.outcome == "pass" for result in checks) == 6}
    refused = models(lambda r: r.level in ("hf_dynamo", "hf_executorch") and " at export, " in r.message)
    onnx = {model for model in refused
            if sum(r.level == "hf_onnx" and r.outcome == "pass" for r in by_model[model]) == 2}
    openvino = {model for model in refused
                if sum(r.level == "hf_openvino" and r.outcome == "pass" for r in by_model[model]) == 2}

    def both(level: str) -> int:
        return sum(sum(r.level == level and r.outcome == "pass" for r in checks) == 2 for checks in by_model.values())

    conversion = models(lambda r: r.level == "hf_openvino" and r.outcome == "mismatch"
                        and "give generate's tokens in the same loop: the OpenVINO conversion" in r.message)
    onnx_differs = models(lambda r: r.level == "hf_onnx" and r.outcome == "mismatch"  # mpt's: the host loop's
                          and not r.message.startswith("the host loop over the eager forward run eagerly differs"))
    openvino_export = models(lambda r: "OpenVINOExporter.export_program failed" in r.message)
    return {"exact": len(exact), "refused": len(refused), "onnx": len(onnx), "openvino_refused": len(openvino),
            "openvino": both("hf_openvino"), "onnx_all": both("hf_onnx"), "openvino_conversion": len(conversion),
            "openvino_export": len(openvino_export), "openvino_export_names": names(openvino_export),
            "openvino_conversion_names": names(conversion), "onnx_differs": len(onnx_differs),
            "onnx_differs_names": ", ".join(sorted(onnx_differs)),
            "step": len(models(lambda r: bool(re.search(r"cumulative_length_int 8 at export, 9 now", r.message)))),
            "segfault": len(models(lambda r: r.level == "hf_executorch" and "Segmentation fault" in r.message)),
            "resize": len(models(lambda r: "Attempted to resize a static tensor" in r.message)),
            "polar": len(models(lambda r: "aten::polar.out" in r.message)),
            "helper": len(models(lambda r: r.level == "hf_et_helper" and "the helper's loop is at fault" in r.message)),
            **remeasure_counts(), **draws_counts()}


def test_readmes_exporter_paragraph_is_the_export_path_reports() -> None:
    counts = exporter_counts()
    words: dict[int | str, int | str] = {3: "three"}
    text = prose("README.md")
    assert counts["remeasured"] == counts["executorch_shards"], "README says every shard was rerun whole"
    for sentence in ("All three exporters give `generate`'s tokens on {exact} models.",
                     "The dynamo and ExecuTorch runners refuse the cache of {refused}:",
                     "as it was at export (\"StaticSlidingWindowLayer.cumulative_length_int 8 at export, 9 now\", "
                     "{step} models); ONNX runs {onnx} of them exactly,",
                     "segfaults in `execute` on {segfault} models' programs and on {resize} finds an XNNPACK output",
                     "{polar} lack complex-number kernels, `aten::polar.out`)",
                     "OpenVINO {openvino_refused}. OpenVINO gives",
                     "OpenVINO gives `generate`'s tokens, greedy and padded, on {openvino} models (ONNX on "
                     "{onnx_all});",
                     "it differs where the same torch.export programs do not on {openvino_conversion} (the "
                     "conversion or its runtime) and transformers' OpenVINO export fails on {openvino_export}.",
                     "measured again over every model, each shard rerun whole "
                     "([bench/results/exporters.md](bench/results/exporters.md)): {now_failing} of the {passed_before} "
                     "checks that had passed failed and {now_passing} that had failed passed.",
                     "feeds the first new token one position late ({helper} models;"):
        assert sentence.format(**{key: words.get(value, value) for key, value in counts.items()}) in text


def test_what_it_finds_exporter_findings_are_the_export_path_reports() -> None:
    counts = exporter_counts()
    text = prose("docs/what-it-finds.md")
    for sentence in ("All three exporters give `generate`'s tokens, greedy and padded, on {exact} models.",
                     "The dynamo and ExecuTorch runners refuse the cache of {refused} models",
                     "and ONNX runs {onnx} of them exactly.", "(\"8 at export, 9 now\", {step} models;",
                     "on {segfault} models' programs, mostly mixtures of experts and hybrids, logging nothing first, "
                     "and fails with `0x10` on {resize}.",
                     "drawn three times ([FINDINGS.md](FINDINGS.md)'s draws table, `bench/draws.py`), "
                     "{fail_every_draw} fail every draw and {varies} pass in some draws only.",
                     "ONNX differs from `generate` on {onnx_differs} models ({onnx_differs_names});",
                     "`generate`'s tokens, greedy and padded, on {openvino} models, ONNX on {onnx_all}; of the "
                     "{refused} whose cache the dynamo and ExecuTorch runners refuse it runs {openvino_refused} "
                     "exactly",
                     "programs give `generate`'s tokens on {openvino_conversion_names} (the conversion",
                     "`OpenVINOExporter.export_program` fails on {openvino_export_names} (`exporters/base.py:521`)",
                     "`hf_et_helper`: the off-by-one above on {helper} models;"):
        assert sentence.format(**counts) in text, sentence
    # the page says every failing check was drawn three times: one failed once and never drawn again would belie it
    assert counts["not_drawn"] == 0, f"{counts['not_drawn']} failing hf_executorch checks are not drawn: bench/draws.py"
