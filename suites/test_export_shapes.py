"""One exported generation program serves several shapes: ``export_generate(dynamic=True)`` once, then batches and
prompt lengths it was not traced with, each exactly ``model.generate``'s tokens; the ``while_loop`` form's program
also serves a shorter generation than the one it was exported for."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import GenerationConfig, PreTrainedModel

from pytest_fullgraph.check.compare import first_difference
from pytest_fullgraph.check.inputs import left_padded_prompts, model_generation_defaults
from pytest_fullgraph.core.breaks import compile_failure_types, record_from_exception
from pytest_fullgraph.core.generation import generate_fn
from pytest_fullgraph.core.model_facts import vocab_size
from pytest_fullgraph.core.results import first_line
from pytest_fullgraph.levels.artifacts import describe_shape, fits
from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate
from pytest_fullgraph.models import tiny
from pytest_fullgraph.models.positions import declared_positions
from pytest_fullgraph.plugin.settings import Settings
from pytest_fullgraph.report.causes import OUR_FAULTS, fault_of_origin

#: Prompt lengths per row: the export's example first, then a larger batch of shorter prompts, then longer ones.
SHAPES = ((8, 5), (5, 2, 4), (12, 9))
SEED = 7


def export_limits() -> tuple[type[BaseException], ...]:
    """What torch.export raises when traced code keeps one program from every shape: dynamo's breaks and user
    errors (strict), a guard on a data-dependent value and a violated dynamic-shape constraint (non-strict)."""
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError, GuardOnDataDependentSymNode

    return (*compile_failure_types(), ConstraintViolationError, GuardOnDataDependentSymNode)


def export_refusal(error: BaseException) -> str | None:
    """What torch.export said keeps the model from one program for every shape, located (a guard, a constraint, a
    data-dependent branch, outside pytest_fullgraph's code), or None: anything else, and anything located in our
    loop, is a failure of the test, never the model's limit."""
    if not isinstance(error, export_limits()):
        return None
    record = record_from_exception(error)
    return None if fault_of_origin(record.origin) in OUR_FAULTS else record.summary()


def not_dynamic(message: str, strict: bool) -> None:
    """The model, not the loop, keeps one program from serving every shape: xfail (failed when strict)."""
    if strict:
        pytest.fail(message, pytrace=False)
    pytest.xfail(message)


def new_tokens_that_fit(model: Any, wanted: int, prompt: int) -> int:
    """The run's ``max_new_tokens``, or as many as fit after this test's longest prompt in the model's declared
    positions: start-up holds ``--fullgraph-max-new-tokens`` to the scenarios' longest prompt (8), shorter than
    this test's (12), and a learned position table (gpt2, opt) has no row past its end."""
    limit = declared_positions(type(model).__name__, getattr(model, "config", None))
    return wanted if limit is None else max(1, min(wanted, limit.most_new_tokens(prompt)))


@pytest.mark.parametrize("loop", ["unrolled", "while"])
def test_one_exported_program_serves_three_shapes(fullgraph_model: PreTrainedModel, fullgraph_settings: Settings,
                                                  loop: str) -> None:
    """Greedy, left-padded; a model whose loop does not export is xfail with the reason (failed when strict)."""
    model: Any = fullgraph_model
    longest = max(max(prompts) for prompts in SHAPES)
    bound = new_tokens_that_fit(model, fullgraph_settings.max_new_tokens, longest)
    lengths = (bound, max(1, bound // 2)) if loop == "while" else (bound,)
    config = GenerationConfig(max_new_tokens=bound, do_sample=False, pad_token_id=tiny.PAD_TOKEN_ID)
    cases = [left_padded_prompts(list(prompts), SEED, vocab_size(model)) for prompts in SHAPES]
    with torch.no_grad(), model_generation_defaults(model, None):
        try:
            program = export_generate(model, cases[0]["input_ids"], cases[0]["attention_mask"], config,
                                      dynamic=True, max_prompt_length=longest, loop=loop)
        except UnsupportedGeneration as error:
            pytest.skip(f"export_generate does not support this model: {first_line(error)}")
        except export_limits() as error:
            refusal = export_refusal(error)
            if refusal is None:
                raise  # in our loop: a bug of ours, with its traceback
            not_dynamic(f"the model does not export with dynamic shapes: {refusal}", fullgraph_settings.strict)
        taken = program.artifact_metadata["inputs"]["input_ids"]["shape"]
        outside = [tuple(case["input_ids"].shape) for case in cases if not fits(case["input_ids"].shape, taken)]
        if outside:
            not_dynamic(f"the exported program takes input_ids of {describe_shape(taken)} only: tracing the model "
                        f"fixed a size (its code branches on it), so shapes {outside} need programs of their own",
                        fullgraph_settings.strict)
        for case in cases:
            for new_tokens in lengths:
                expected = generate_fn(model)(**case, generation_config=GenerationConfig(
                    **{**config.to_diff_dict(), "max_new_tokens": new_tokens}))
                tokens = program(case["input_ids"], case["attention_mask"],
                                 **({"max_new_tokens": new_tokens} if loop == "while" else {}))
                shape = tuple(case["input_ids"].shape)
                if not torch.equal(tokens, expected):
                    where = first_difference(expected, tokens, shape[1])
                    pytest.fail(f"shape {shape}, {new_tokens} new tokens: the exported program differs from "
                                f"generate at {where.describe('exported')}", pytrace=False)
