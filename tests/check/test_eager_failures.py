"""A failing eager run, with the scripted model and fake levels: no kernel for the dtype, or transformers
refusing the mode, is a skip; any other failure is an error blamed on whichever code fails alone (the model's
static cache, our loop, or the code a loop drives)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.check.scripted import DIFFERENT, EAGER, FakeLevel, ScriptedModel, check


def test_no_kernel_for_the_dtype_is_a_skip_not_an_error() -> None:
    model = ScriptedModel(crash=RuntimeError("\"addmm_impl_cpu_\" not implemented for 'BFloat16'"))
    result = check(model, FakeLevel())
    assert result.outcome == "skip"
    assert result.message.startswith("float32 cannot run here") and "not implemented for 'BFloat16'" in result.message


@pytest.mark.parametrize("refusal", [
    "assisted generation is not supported with stateful models, such as BambaForCausalLM",
    "cannot use beam search with a cache currently, as the cache cannot be reordered. ...",
    "Assisted decoding requires a cache",  # generate builds no cache for minimax's own cache class
])
def test_transformers_refusing_the_mode_for_the_model_is_a_skip_naming_it(refusal: str) -> None:
    """No reference to compare with, by transformers' own decision: no verdict, and not the check's error."""
    result = check(ScriptedModel(crash=ValueError(refusal)), FakeLevel())
    assert result.outcome == "skip"
    assert result.message.startswith("transformers' generate refuses this mode for this model")
    assert result.message.endswith(f"ValueError: {refusal.splitlines()[0]}")


def test_another_eager_failure_stays_an_error() -> None:
    result = check(ScriptedModel(crash=ValueError("beam search is broken here")), FakeLevel())
    assert result.outcome == "error" and result.message.startswith("eager generation failed")


class StaticReference(FakeLevel):
    """A level whose eager reference runs transformers' static cache, as the forward level's does."""

    def reference_config(self, config: Any) -> Any:
        from pytest_fullgraph.core.generation import static_cache_config

        return static_cache_config(config)


class LoopCrashes(FakeLevel):
    def __init__(self) -> None:
        super().__init__(own_loop=EAGER)

    def run_own_loop_eagerly(self, model: Any, inputs: dict[str, Any], config: Any) -> torch.Tensor | None:
        raise IndexError("index_copy_(): index 11 is out of bounds for dimension 2 with size 11")


def test_an_eager_failure_of_the_static_cache_alone_blames_the_models_static_cache_path() -> None:
    model = ScriptedModel(static=IndexError("index 11 is out of bounds"))
    result = check(model, StaticReference())
    assert (result.outcome, result.stage) == ("error", "eager generation")
    assert result.message.endswith("; model.generate with the default cache works: the model's static-cache path "
                                   "fails (a bug of the model or transformers, not of the compiler)")
    assert "static-cache path" not in check(ScriptedModel(crash=ValueError("bad")), StaticReference()).message


@pytest.mark.parametrize(("static", "ending"), [
    (IndexError("index 11 is out of bounds"), "the model's static-cache path, not the loop"),
    (None, "; model.generate with a static cache works, so the loop is at fault"),
])
def test_our_loop_failing_eagerly_is_blamed_on_whichever_fails_alone(static: Exception | None, ending: str) -> None:
    result = check(ScriptedModel(static=static), LoopCrashes())
    assert result.stage == "eager generation by scripted_loop"
    assert result.message.startswith("eager generation by scripted_loop failed") and result.message.endswith(ending)


def test_a_loop_that_drives_someone_elses_code_blames_that_code() -> None:
    """hf_et_helper's own loop runs transformers' exportable module: when it fails and generate with a static
    cache works, the fault is the module's, not our loop's."""
    level = LoopCrashes()
    level.own_loop_blame = "transformers' exportable module (integrations/executorch.py)"
    result = check(ScriptedModel(), level)
    assert result.message.endswith("; model.generate with a static cache works, so transformers' exportable module "
                                   "(integrations/executorch.py) is at fault")


def test_a_loop_that_drives_someone_elses_code_blames_that_code_for_a_difference_too() -> None:
    """roberta's exportable module numbers positions from its input ids, so fed one token a step it differs from
    generate; the loop only drives it."""
    level = FakeLevel(own_loop=DIFFERENT)
    level.own_loop = "the exportable module (one position a step)"
    level.own_loop_blame = "transformers' exportable module (integrations/executorch.py)"
    result = check(ScriptedModel(static=EAGER), level)
    assert result.outcome == "mismatch"
    assert result.message.startswith("the exportable module (one position a step) run eagerly differs from "
                                     "model.generate at row 0")
    assert result.message.endswith("so transformers' exportable module (integrations/executorch.py) is at fault")
