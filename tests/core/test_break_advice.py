"""Advice for every break site (``break_advice``): PyTorch's help for a GB id; else PyTorch's advice from its message
(recorded break texts -> the hint) and its user-error documentation page; else a hint by the break's kind. Shown
in the Markdown, the HTML page and the terminal summary, and for the default main command's one ``generate`` break
(a ``UserError`` without a GB id) rendered from the committed baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.core.break_advice import DOCS, KIND, KIND_HINTS, MESSAGE, OTHER_KIND, REGISTRY, advise
from pytest_fullgraph.core.break_help import docs_url, help_for_ids
from pytest_fullgraph.core.results import BREAK, BreakRecord, CheckResult
from pytest_fullgraph.report.html import html
from tests import REPOSITORY

BASELINE = REPOSITORY / "baselines" / "fast-torch2.13.0.json"
#: The page torch's ``UserError`` for a data-dependent guard links (``exportdb_error_message``).
CONSTRAIN_AS_SIZE = "https://pytorch.org/docs/main/generated/exportdb/index.html#constrain-as-size-example"
#: The default main command's ``generate`` break as the baseline records it (llama and gemma, greedy).
GUARD = ("Consider annotating your code using torch._check*(). Could not guard on data-dependent expression Eq(u0, 1) "
         "(unhinted: Eq(u0, 1)).  (Size-like symbols: none)")
GUARD_ADVICE = ("Consider annotating your code using torch._check*(). Consider using data-dependent friendly APIs "
                "such as guard_or_false, guard_or_true and statically_known_true.")


def recorded(message: str, exception: str = "torch._dynamo.exc.UserError", gb_id: str | None = None,
             cause: BreakRecord | None = None) -> BreakRecord:
    gb_type = exception.rpartition(".")[2] if gb_id is None else "Data-dependent branching"
    return BreakRecord(exception, gb_type, gb_id, message, "transformers/generation/utils.py", 2866, "generate",
                       "if has_right_padding:", "masking", cause=cause)


@pytest.mark.parametrize(("message", "text"), [
    (GUARD, GUARD_ADVICE),
    # the same guard re-raised without the "Consider annotating" sentence (bert-generation, hf_et_helper)
    ("Could not guard on data-dependent expression Eq(u2, 1) (unhinted: Eq(u2, 1)).  (Size-like symbols: none)",
     "Consider using data-dependent friendly APIs such as guard_or_false, guard_or_true and statically_known_true."),
    # an integer read from a tensor (dbrx's experts): PyTorch's message adds no API advice there
    ("Consider annotating your code using torch._check*(). Could not extract specialized integer from "
     "data-dependent expression u0 (unhinted: u0).  (Size-like symbols: u0)",
     "Consider annotating your code using torch._check*()."),
])
def test_a_recorded_user_error_gets_pytorchs_advice_and_its_page(message: str, text: str) -> None:
    advice = advise(recorded(message), {})
    assert (advice.text, advice.source, advice.url) == (text, MESSAGE, CONSTRAIN_AS_SIZE)


def test_the_advice_is_what_pytorchs_whole_message_says() -> None:
    """A record keeps the message's first line; the rest (the API advice, the page) is what torch really prints."""
    import torch

    from pytest_fullgraph.core.breaks import record_from_exception

    def branches_on_a_tensor(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if x.sum().item() == 1 else x - 1

    with torch._dynamo.config.patch(capture_scalar_outputs=True), pytest.raises(torch._dynamo.exc.UserError) as raised:
        torch.compile(branches_on_a_tensor, fullgraph=True, backend="eager")(torch.ones(1))
    whole = str(raised.value)
    advice = advise(record_from_exception(raised.value), {})
    assert advice.source == MESSAGE and advice.url in whole
    assert all(sentence.lower() in whole.lower() for sentence in advice.text.split(". ") if sentence)


def test_a_link_in_the_message_is_its_page() -> None:
    from torch._dynamo.exc import UserError, UserErrorType

    from pytest_fullgraph.core.breaks import record_from_exception

    error = UserError(UserErrorType.DYNAMIC_CONTROL_FLOW, "Expected the branches to return the same shapes.",
                      case_name="cond_operands")  # torch appends its page to a message ending in "."
    advice = advise(record_from_exception(error), {})
    assert advice.source == DOCS
    assert advice.url == "https://pytorch.org/docs/main/generated/exportdb/index.html#cond-operands"


def test_a_gb_id_gets_pytorchs_help_and_without_stored_help_its_page() -> None:
    record = recorded("Data-dependent branching", "torch._dynamo.exc.Unsupported", "GB0170")
    advice = advise(record, help_for_ids(["GB0170"]))
    assert (advice.text, advice.source) == ("Use `torch.cond` to express dynamic control flow. (fundamental)", REGISTRY)
    bare = advise(record, {})
    assert (bare.text, bare.source, bare.url) == (KIND_HINTS["Unsupported"], KIND, docs_url("GB0170"))


def test_a_higher_order_op_is_advised_by_the_break_inside_it() -> None:
    inside = recorded(GUARD)
    op = recorded("This higher order operator doesn't work unless it is captured completely with torch.compile.",
                  "torch._dynamo.exc.UncapturedHigherOrderOpError", cause=inside)
    assert advise(op, {}) == advise(inside, {})
    assert advise(recorded(op.message, op.exception), {}).text == KIND_HINTS["UncapturedHigherOrderOpError"]


@pytest.mark.parametrize(("exception", "message", "text"), [
    ("torch._dynamo.exc.InternalTorchDynamoError", "PendingUnbackedSymbolNotFound: Pending unbacked symbols {u2} "
     "not in returned outputs FakeTensor(..., size=(4, u1, 11)) ((256, 256, 1), u2 + 245).",
     KIND_HINTS["InternalTorchDynamoError"]),
    ("builtins.ValueError", "Trying to flatten user inputs with exported input tree spec:", OTHER_KIND),
])
def test_without_words_from_pytorch_the_kind_says_what_to_look_at(exception: str, message: str, text: str) -> None:
    advice = advise(recorded(message, exception), {})
    assert (advice.text, advice.source, advice.url) == (text, KIND, "")


def a_generate_check(model: str, record: BreakRecord) -> CheckResult:
    return CheckResult(model, "greedy", "generate", "aot_eager", 4, BREAK, record.summary(), first_break=record)


def test_markdown_html_and_terminal_show_the_advice_for_a_break_without_a_gb_id() -> None:
    written = report.Report({}, [a_generate_check(model, recorded(GUARD)) for model in ("llama", "gemma")])
    page = report.markdown(written)
    advice = page[page.index("### Advice for the breaks without PyTorch's help for a GB id"):]
    assert (f"- **UserError** at `transformers/generation/utils.py:2866`: {GUARD_ADVICE} [PyTorch's page]"
            f"({CONSTRAIN_AS_SIZE}) *(PyTorch's message)*") in advice
    assert "What PyTorch says about these breaks" not in page  # no GB id, no registry help claimed
    assert (f'<td class="hint">{GUARD_ADVICE} <a href="{CONSTRAIN_AS_SIZE}">page</a> <i>(PyTorch&#x27;s message)</i>'
            "</td>") in html(written)
    lines = report.terminal_lines(written)
    site = lines.index("  transformers/generation/utils.py:2866 - UserError [masking] in 2 check(s): gemma, llama")
    assert lines[site + 1] == f"    hint: {GUARD_ADVICE} (PyTorch's message) {CONSTRAIN_AS_SIZE}"


def test_every_site_of_a_report_has_a_hint_in_the_terminal_and_the_html() -> None:
    kinds = [recorded("Trying to flatten user inputs", "builtins.ValueError"),
             recorded("Data-dependent branching", "torch._dynamo.exc.Unsupported", "GB0170")]
    checks = [a_generate_check(f"m{index}", record) for index, record in enumerate(kinds)]
    written = report.Report({}, checks)
    lines = report.terminal_lines(written)
    sites = [index for index, line in enumerate(lines) if line.startswith("  transformers/")]
    assert len(sites) == 2 and all(lines[index + 1].startswith("    hint: ") for index in sites)
    assert html(written).count('<td class="hint">') == 2


def test_the_default_main_commands_markdown_advises_its_generate_break_site(tmp_path: Path) -> None:
    """``pytest -n 2 --fullgraph-models=llama,gemma`` (break mode ``auto``) records ``generate``'s first break only:
    the baseline's llama and gemma checks rendered as that run keeps them, through ``report merge``."""
    from pytest_fullgraph.__main__ import main

    data = json.loads(BASELINE.read_text())
    data["checks"] = [check for check in data["checks"] if check["model"] in ("llama", "gemma")]
    for check in data["checks"]:
        if check["level"] == "generate":
            check["breaks"] = []
    (tmp_path / "run.json").write_text(json.dumps(data))
    assert main(["report", "merge", str(tmp_path / "run.json"), "-o", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / report.MARKDOWN_NAME).read_text()
    site = "| `transformers/generation/utils.py:2866` (generate)<br>`if has_right_padding:` | UserError | masking |"
    assert site in page
    assert f"- **UserError** at `transformers/generation/utils.py:2866`: {GUARD_ADVICE}" in page
