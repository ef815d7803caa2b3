"""PyTorch's own help for a graph break (its registry's explanation and hints, boilerplate reduced to a kind) with
each break site in the JSON, the Markdown and the terminal summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch._dynamo import graph_break_hints
from torch._dynamo.exc import get_gbid_documentation_link

from pytest_fullgraph import report
from pytest_fullgraph.core.break_help import _registry, help_for, help_for_ids
from pytest_fullgraph.core.results import BREAK, BreakRecord, CheckResult
from pytest_fullgraph.report.render import markdown
from pytest_fullgraph.report.terminal import terminal_lines

BOILERPLATE = {hint.strip() for name in ("FUNDAMENTAL", "SUPPORTABLE", "DYNAMO_BUG", "USER_ERROR", "DIFFICULT",
                                         "CAUSED_BY_EARLIER_GRAPH_BREAK")
               for hint in getattr(graph_break_hints, name)}


def test_data_dependent_branching_says_use_torch_cond_and_that_it_is_fundamental() -> None:
    found = help_for("GB0170")
    assert found is not None
    assert found.gb_type == "Data-dependent branching"
    assert found.explanation.startswith("Detected data-dependent branching")
    assert found.hints == ("Use `torch.cond` to express dynamic control flow.",)
    assert found.kinds == ("fundamental",)
    assert found.url == get_gbid_documentation_link("Data-dependent branching")  # torch's own link


def test_no_entry_shows_boilerplate_as_a_hint_or_a_template_field() -> None:
    shown = [help_for(gb_id) for gb_id in _registry()]
    assert len(shown) > 400 and all(found is not None for found in shown)
    hints = [hint for found in shown if found for hint in found.hints]
    assert not BOILERPLATE & set(hints)
    assert not [text for found in shown if found for text in (found.explanation, *found.hints) if "{" in text]
    # the boilerplate is recognised, not dropped: a fifth of the entries are "supportable" (2.11: 90 of 421;
    # 2.13: 152 of 517)
    assert sum(1 for found in shown if found and "supportable" in found.kinds) > len(shown) // 5


def test_a_hint_the_registry_splits_in_two_is_one_sentence() -> None:
    found = help_for("GB0036")  # dynamic-shape operator: "Enable tracing ... with " + "`torch._dynamo.config...`"
    assert found is not None
    assert any(hint.startswith("Enable tracing of dynamic shape operators with `torch._dynamo.config.")
               for hint in found.hints)


@pytest.mark.parametrize("gb_id", [None, "", "GB9999", "nonsense"])
def test_an_unknown_id_has_no_help(gb_id: str | None) -> None:
    assert help_for(gb_id) is None


def _broken(model: str, gb_id: str | None, file: str = "modeling_x.py") -> CheckResult:
    record = BreakRecord("Unsupported", "Data-dependent branching", gb_id, "attempted to jump", file, 7,
                         "forward", "if x.any():", "model")
    return CheckResult(model, "greedy", "decode", "aot_eager", 4, BREAK, record.summary(), first_break=record)


def test_each_break_site_carries_its_help_in_json_markdown_and_terminal(tmp_path: Path) -> None:
    written = report.Report({}, [_broken("llama", "GB0170"), _broken("gemma", "GB0170"),
                                 _broken("opt", None, "modeling_opt.py")])
    written.stored_help = help_for_ids(written.gb_ids())  # as the session does when it builds the report
    report.write(written, tmp_path)
    data = json.loads((tmp_path / report.JSON_NAME).read_text())
    assert list(data["break_help"]) == ["GB0170"]
    assert data["break_help"]["GB0170"]["hints"] == ["Use `torch.cond` to express dynamic control flow."]
    page = markdown(written)
    url = "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0170.html"
    assert f"| [GB0170]({url}) Data-dependent branching | model | gemma, llama | 2 |" in page
    assert (f"- [GB0170]({url}) **Data-dependent branching**: Detected data-dependent branching (e.g. `if "
            "my_tensor.sum() > 0:`). Dynamo does not support tracing dynamic control flow. Hint: Use `torch.cond` "
            "to express dynamic control flow. (fundamental)") in page
    lines = terminal_lines(written)
    site = lines.index("  modeling_x.py:7 GB0170 Data-dependent branching [model] in 2 check(s): gemma, llama")
    assert lines[site + 1] == f"    hint: Use `torch.cond` to express dynamic control flow. (fundamental) {url}"


def test_a_report_without_breaks_has_no_help(tmp_path: Path) -> None:
    written = report.Report({}, [CheckResult("llama", "greedy", "decode", "aot_eager", 4, "pass")])
    assert written.to_dict()["break_help"] == {}
    assert "What PyTorch says" not in markdown(written)


def test_a_report_shows_only_the_help_its_run_stored() -> None:
    """Reading a report never asks the installed torch (the reader may have another release, or none): the help is
    what the run stored, less the ids no check of the report has (a shard of a larger run)."""
    bare = report.Report({}, [_broken("llama", "GB0170")])
    assert bare.break_help() == {} and "What PyTorch says" not in markdown(bare)
    shard = report.Report({}, [_broken("llama", "GB0170")], stored_help=help_for_ids(["GB0170", "GB0036"]))
    assert list(shard.break_help()) == ["GB0170"] and list(shard.to_dict()["break_help"]) == ["GB0170"]
