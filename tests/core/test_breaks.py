"""Break capture and classification: planted breaks in toy code, and the real breaks of transformers' generate."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch

from pytest_fullgraph import build_tiny, run_check
from pytest_fullgraph.core import breaks
from pytest_fullgraph.core.breaks import ORIGINS, classify
from pytest_fullgraph.core.compile_events import capture_compile_events
from pytest_fullgraph.core.frames import frames_from, innermost
from pytest_fullgraph.core.results import Frame

EOS_TOKEN_ID = 2


def sample_then_read(probs: torch.Tensor) -> int:
    return int(torch.multinomial(probs, 1).sum().item())  # planted sampling break


def stop_when_all_finished(tokens: torch.Tensor) -> torch.Tensor:
    if (tokens == EOS_TOKEN_ID).all():  # planted break in a stopping check
        return tokens
    return tokens + 1


def planted_user_break(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:  # planted user break
        return x * 2
    return x


@pytest.mark.parametrize(("function", "argument", "origin", "gb_id", "marker"), [
    (sample_then_read, torch.tensor([[0.2, 0.8]]), "sampling", "GB0124", "planted sampling break"),
    (stop_when_all_finished, torch.tensor([2, 3]), "eos", "GB0170", "planted break in a stopping check"),
    (planted_user_break, torch.tensor([1.0]), "user", "GB0170", "planted user break"),
])
def test_planted_breaks_are_located_and_classified(function, argument, origin, gb_id, marker) -> None:  # type: ignore[no-untyped-def]
    torch._dynamo.reset()
    with capture_compile_events() as trace:
        torch.compile(function, backend="eager")(argument)
    assert len(trace.breaks) == 1, trace.breaks
    record = trace.breaks[0]
    assert record.file.endswith("test_breaks.py") and record.function == function.__name__
    assert marker in record.source
    assert (record.origin, record.gb_id, record.root_cause) == (origin, gb_id, True)


@pytest.mark.parametrize(("frame", "origin"), [
    (Frame("transformers/models/llama/modeling_llama.py", 1, "forward", "x = y"), "model"),
    (Frame("transformers/cache_utils.py", 1, "update", "self.keys = k"), "cache"),
    (Frame("transformers/masking_utils.py", 1, "sdpa_mask", "m = a"), "masking"),
    (Frame("transformers/generation/logits_process.py", 1, "__call__", "s = x"), "sampling"),
    (Frame("transformers/generation/stopping_criteria.py", 1, "__call__", "d = x"), "eos"),
    (Frame("transformers/integrations/sdpa_attention.py", 1, "sdpa", "a = b"), "integration"),
    (Frame("torch/nn/modules/module.py", 1, "_call_impl", "f()"), "torch"),
    (Frame("mypackage/model.py", 1, "forward", "y = x"), "user"),
    (Frame("executorch/runtime/__init__.py", 147, "execute", "return self._method(inputs)"), "runtime"),
    (Frame("openvino/_ov_api.py", 202, "infer", "return self._infer(inputs)"), "runtime"),
    (Frame("pytest_fullgraph/loop/decode.py", 1, "_next_tokens", "t = torch.multinomial(p, 1)"), "loop"),
    # the draft modes' loops are the loop's too, whatever their statement looks like
    (Frame("pytest_fullgraph/loop/modes/assisted.py", 1, "body", "accepted = (drafts == tokens).cumprod(-1)"), "loop"),
    (Frame("pytest_fullgraph/loop/modes/speculative.py", 1, "accept", "u = torch.rand_like(p)"), "loop"),
    (Frame("pytest_fullgraph/loop/modes/lookup.py", 1, "candidates", "if finished.any():"), "loop"),
])
def test_origin_rules_table(frame: Frame, origin: str) -> None:
    assert classify(frame) == origin and origin in ORIGINS


def _first_generate_break() -> tuple[str, str, str]:
    """(function, origin, GB id) of generate's first break on the installed torch: before 2.12 dynamo cannot trace
    ``copy.deepcopy`` of the generation config (bench/reports/releases: the site is gone from 2.12.1 on)."""
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if release < (2, 12):
        return "_prepare_generation_config", "generation", "GB0179"
    return "_prepare_special_tokens", "eos", "GB0170"


@pytest.mark.breadth  # compiles the whole of generate with every break recorded, as the main command does
def test_real_breaks_of_transformers_generate_are_classified() -> None:
    result = run_check(build_tiny("llama"), "llama", "eos", "generate", "eager", 2)
    assert result.outcome == "break"
    first = result.first_break
    function, origin, gb_id = _first_generate_break()
    assert first is not None and first.function == function
    assert (first.origin, first.gb_id, first.file) == (origin, gb_id, "transformers/generation/utils.py")
    sites = {(b.function, b.gb_type): b for b in result.breaks}
    special = [b for b in result.breaks if b.function == "_prepare_special_tokens"]
    assert special and {b.origin for b in special} == {"eos"}
    assert any("torch.isin(eos_token_tensor, pad_token_tensor)" in b.source for b in special), special
    padding = next(b for b in result.breaks if "has_right_padding" in b.source)
    assert padding.origin == "masking" and padding.gb_id == "GB0124"
    stop_check = sites[("__call__", "Unsupported Tensor.item() call with capture_scalar_outputs=False")]
    assert stop_check.origin == "eos" and "unfinished_sequences.max() == 0" in stop_check.source
    assert stop_check.root_cause
    assert any(frame.function == "_sample" for frame in stop_check.stack)  # reached from the decode loop
    wrapper = sites[("__call__", "Graph break under GenericContextWrappingVariable")]
    assert wrapper.gb_id == "GB0066" and not wrapper.root_cause
    assert all(b.origin in ORIGINS for b in result.breaks)
    assert result.graph_count and result.graph_count > 1


def test_recompile_reasons_are_the_same_in_every_process() -> None:
    from pytest_fullgraph.core.compile_events import normalise_reason

    reason = ("0/0: ___check_obj_id(func.__code__, 93848271708960), type=<class 'code'>  # f at 0x7f3a12\n"
              "User stack trace:\n  File ...")
    assert normalise_reason(reason) == "0/0: ___check_obj_id(func.__code__, <id>), type=<class 'code'>  # f at <id>"


#: A higher-order op's message as torch 2.9 and 2.10 word it: the inner break's title on the first line.
OLDER_HOP_MESSAGE = """while_loop doesn't work unless it is captured completely with torch.compile. Got Attempted to \
call function marked as skipped
  Explanation: Dynamo developers have intentionally marked that the function `_tensor_min_max` should not be traced.

 For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0007.html

from user code:
   File "/somewhere/site-packages/torch/_higher_order_ops/while_loop.py", line 224, in flat_body_fn
    return body_fn(*carried, *additional)
   File "/somewhere/project/model.py", line 12, in body
    tokens = scores.max()
"""


def test_a_higher_order_break_worded_by_older_torch_keeps_its_cause_from_the_message() -> None:
    """Without the inner exception (``__context__``), the cause is read from the message, in either wording."""
    from traceback import StackSummary

    from torch._dynamo.exc import UncapturedHigherOrderOpError

    from pytest_fullgraph.core.breaks import break_message, inner_break

    error = UncapturedHigherOrderOpError(OLDER_HOP_MESSAGE, StackSummary())
    assert break_message(str(error), "UncapturedHigherOrderOpError") == (
        "while_loop doesn't work unless it is captured completely with torch.compile")
    cause = inner_break(error)
    assert cause is not None
    assert (cause.gb_type, cause.gb_id, cause.file, cause.line, cause.function) == (
        "Attempted to call function marked as skipped", "GB0007", "/somewhere/project/model.py", 12, "body")
    assert cause.message.startswith("Dynamo developers have intentionally marked") and cause.source == (
        "tokens = scores.max()")
    newer = OLDER_HOP_MESSAGE.replace("torch.compile. Got Attempted",
                                      "torch.compile. Got graph break/error:\n\nAttempted")
    assert inner_break(UncapturedHigherOrderOpError(newer, StackSummary())) == cause
    assert inner_break(ValueError("Got graph break/error: not a higher-order op's message")) is None


def test_library_paths_are_shown_relative_to_their_package_or_the_standard_library() -> None:
    """A report names ``transformers/...`` and ``python3.X/copy.py``, never the machine's absolute paths."""
    import copy
    import sys

    import transformers

    from pytest_fullgraph.core.frames import display_path

    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert display_path(copy.__file__) == f"{version}/copy.py"
    assert display_path(transformers.__file__) == "transformers/__init__.py"


def test_a_break_in_the_standard_library_is_placed_at_its_caller() -> None:
    """inkling2_loop's forward deep-copies cache layers (``copy.deepcopy`` of a tensor, GB4198): the site is the
    model's line that called ``copy``, not ``copy.py``, and the origin is the model's."""
    model = Frame("transformers/models/inkling2_loop/modeling_inkling2_loop.py", 1357, "forward",
                  "cache.layers += [copy.deepcopy(layer) for layer in loop_cache_layers]")
    stack = [model, Frame("python3.11/copy.py", 172, "deepcopy", "y = _reconstruct(x, memo, *rv)"),
             Frame("python3.11/copy.py", 153, "deepcopy", "y = copier(memo)")]
    assert innermost(stack) == model and classify(innermost(stack)) == "model"
    assert innermost(stack[1:]) == stack[-1]  # nothing else to blame: the standard library's frame it is


def test_an_error_in_transformers_integrations_names_the_model_code_that_called_them() -> None:
    """sdpa's shape error for dory is the tensors dory's attention passed it: the site keeps the integration's line
    and adds the model's call, which the report blames; an integration reached without model code stays as it is."""
    from pytest_fullgraph.core.breaks import error_site, record_from_exception

    error = RuntimeError("The size of tensor a (25) must match the size of tensor b (22)")
    record = record_from_exception(error)
    record.file, record.line = "transformers/integrations/sdpa_attention.py", 182
    record.stack = [Frame("pytest_fullgraph/core/generation.py", 60, "generate"),
                    Frame("transformers/models/dory/modeling_dory.py", 523, "forward"),
                    Frame("transformers/models/dory/modeling_dory.py", 275, "forward"),
                    Frame("transformers/integrations/sdpa_attention.py", 182, "sdpa_attention_forward")]
    assert error_site(record) == ("transformers/integrations/sdpa_attention.py:182 "
                                  "(called from transformers/models/dory/modeling_dory.py:275)")
    record.stack = [record.stack[0], record.stack[-1]]
    assert error_site(record) == "transformers/integrations/sdpa_attention.py:182"
    record.file, record.line = "transformers/models/dory/modeling_dory.py", 275
    assert error_site(record) == "transformers/models/dory/modeling_dory.py:275"


def test_every_loop_form_lives_in_a_module_whose_breaks_are_the_loops() -> None:
    """A loop lives in the ``loop`` package, and every module there is blamed on the loop, not on "user" or the
    harness, by where it lives: a new mode's module needs no list. The loops are every row's of the mode table."""
    from pytest_fullgraph.loop import decode, exported
    from pytest_fullgraph.loop.modes import table

    rows = (table.core(), *table.modes())
    loops = [loop for row in rows for loop in row.loops.values() if not isinstance(loop, table.Refusal)]
    assert len(loops) >= 2 * len(table.LINES) + 2  # every built-in mode runs both forms today
    loops += [exported.DecodeProgram.forward, decode.fullgraph_generate]
    assert {loop.__module__.split(".")[1] for loop in loops} == {"loop"}
    package = Path(decode.__file__).parent
    files = sorted(package.rglob("*.py"))
    assert len(files) > 10
    frames = frames_from([traceback.FrameSummary(str(path), 1, "f") for path in files])
    assert len(frames) == len(files)  # none of them is cut off as harness
    assert {breaks.classify(frame) for frame in frames} == {"loop"}
