"""fullgraph_generate's contract: unsupported settings are named; the decode level finds model breaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import torch
from transformers import GenerationConfig

from pytest_fullgraph import build_tiny
from pytest_fullgraph.core.generation import generate_fn
from pytest_fullgraph.loop.decode import UnsupportedGeneration, fullgraph_generate
from tests import REPOSITORY
from tests.conftest import PLANTED_BREAK_LINE, checks_by_id, read_report


@pytest.mark.parametrize(("settings", "named"), [
    ({"num_beams": 2, "output_logits": True, "return_dict_in_generate": True}, "output_logits=True"),
    ({"num_return_sequences": 2, "do_sample": True}, "num_return_sequences=2"),
    ({"penalty_alpha": 0.6, "top_k": 4}, "penalty_alpha=0.6"),
    ({"output_scores": True, "return_dict_in_generate": True}, "output_scores=True"),
])
def test_unsupported_settings_raise_naming_the_setting(settings: dict[str, object], named: str) -> None:
    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=2, pad_token_id=0, **settings)
    with pytest.raises(UnsupportedGeneration, match=f"does not support {named}"):
        fullgraph_generate(model, torch.tensor([[5, 6, 7]]), None, config)


def test_a_model_with_a_cache_class_of_its_own_is_refused_naming_it() -> None:
    """minimax and xlstm take a `cache` of their own class only: a static cache failed inside their forward, and
    the message blamed the loop, since generate (which builds them none) "worked with a static cache"."""
    from transformers import LlamaForCausalLM

    class OwnCacheLM(LlamaForCausalLM):
        @classmethod
        def _supports_default_dynamic_cache(cls) -> bool:
            return False

    model = build_tiny("llama")
    model.__class__ = OwnCacheLM
    with pytest.raises(UnsupportedGeneration, match=r"OwnCacheLM keeps a cache of its own class, .*"
                                                    r"_supports_default_dynamic_cache\(\) is False"):
        fullgraph_generate(model, torch.tensor([[5, 6, 7]]), None, GenerationConfig(max_new_tokens=2, pad_token_id=0))


def test_transformers_lists_minimax_and_xlstm_as_keeping_their_own_caches() -> None:
    """The refusal above rests on transformers' list; the models it names in 5.24 (and their M2/M3 successors,
    which do not) keep it honest."""
    import transformers

    def keeps_its_own(name: str) -> bool:
        return not cast(Any, getattr(transformers, name))._supports_default_dynamic_cache()

    assert keeps_its_own("MiniMaxForCausalLM") and keeps_its_own("xLSTMForCausalLM")
    assert not keeps_its_own("MiniMaxM2ForCausalLM")


def test_eager_loop_equals_generate_with_eos_list_and_min_new_tokens() -> None:
    model = build_tiny("gemma")
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = (ids != 0).long()
    free = generate_fn(model)(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0,
                          eos_token_id=None)
    eos = [int(free[0, 5]), int(free[1, 6])]  # tokens the rows really emit, so both stop early
    config = GenerationConfig(max_new_tokens=6, min_new_tokens=2, do_sample=False, pad_token_id=0, eos_token_id=eos)
    expected = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config)
    new_tokens = expected[:, ids.shape[1]:]
    # EOS really cut the output short or padded a finished row (the prompt's own padding does not count)
    assert expected.shape[1] < ids.shape[1] + 6 or bool((new_tokens == 0).any())
    assert torch.equal(fullgraph_generate(model, ids, mask, config), expected)


def test_recurrent_model_gets_its_mask_at_prefill_only_like_generate() -> None:
    """mamba drops the attention mask after prefill; fed the full mask, its one-token steps broadcast to the
    mask's length and the tokens diverged from generate at the fourth new token."""
    model = build_tiny("mamba")
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = (ids != 0).long()
    config = GenerationConfig(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    model.generation_config.eos_token_id = None
    expected = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config)
    assert torch.equal(fullgraph_generate(model, ids, mask, config), expected)
    assert torch.equal(fullgraph_generate(model, ids, mask, config, loop="while"), expected)


@pytest.mark.parametrize("loop", ["unrolled", "while"])
def test_model_that_builds_its_own_generate_masks_gets_them_like_generate(loop: str) -> None:
    """bloom's ``create_masks_for_generate`` pads the 2D mask to the cache length for its alibi bias; handed the
    raw, shorter mask, its attention failed on mismatched shapes where ``generate`` with a static cache works."""
    model = build_tiny("bloom")
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = (ids != 0).long()
    config = GenerationConfig(max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
    expected = generate_fn(model)(input_ids=ids, attention_mask=mask, generation_config=config,
                                  cache_implementation="static")
    assert torch.equal(fullgraph_generate(model, ids, mask, config, loop=loop), expected)


def test_a_compiler_crash_away_from_the_models_break_stays_torchs_error_naming_the_break() -> None:
    """mpt reads its cache length with Tensor.item(): a break in modeling_mpt.py, which under fullgraph=True
    crashes dynamo (PyTorch 2.13) while it traces the loop's call of the model, not at the item call: the check is
    PyTorch's error, and its message names the model's break."""
    from pytest_fullgraph import run_check

    result = run_check(build_tiny("mpt"), "mpt", "greedy", "decode", "eager", 2)  # a crash while tracing
    assert result.outcome == "error"
    assert result.first_break is not None
    assert (result.first_break.gb_type, result.first_break.origin) == ("InternalTorchDynamoError", "torch")
    assert result.first_break.file.startswith("pytest_fullgraph/loop/decode.py")
    assert result.message.endswith(" (also breaks at transformers/models/mpt/modeling_mpt.py:121: Unsupported "
                                   "Tensor.item() call with capture_scalar_outputs=False (model))")
    assert [record.gb_id for record in result.breaks if record.root_cause] == ["GB0124"]  # Tensor.item()


def test_cache_is_sized_as_generate_sizes_it() -> None:
    """gpt_neo's local-attention mask depends on the cache size; with one slot more than generate's own static
    cache (prompt + new - 1) this case, found by the slow property profile, differed from generate."""
    model = build_tiny("gpt_neo")
    ids = torch.tensor([[47, 117, 61, 13, 91, 7, 55, 6, 125, 61, 104, 119]])
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    model.generation_config.eos_token_id = None
    expected = generate_fn(model)(input_ids=ids, generation_config=config)
    assert torch.equal(fullgraph_generate(model, ids, None, config), expected)


def test_loop_mismatch_says_whether_the_models_static_cache_is_to_blame() -> None:
    """gpt_neo's local attention is wrong with a static cache longer than its window (16 in the tiny config):
    generate's own static-cache path differs too, so the message blames the model, not the loop."""
    from pytest_fullgraph import run_check

    result = run_check(build_tiny("gpt_neo"), "gpt_neo", "greedy", "decode", "eager", 12)
    assert result.outcome == "mismatch"
    assert result.message.endswith("the model's static-cache path is wrong, not the loop")


def test_loop_mismatch_on_a_sound_model_is_the_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_fullgraph import run_check
    from pytest_fullgraph.loop import decode

    monkeypatch.setattr(decode, "initial_positions", lambda mask: mask.long().cumsum(-1))  # off by one
    result = run_check(build_tiny("gpt2"), "gpt2", "greedy", "decode", "eager", 3)  # absolute positions
    assert result.outcome == "mismatch"
    assert result.message.endswith("so the loop is at fault")


def test_decode_level_is_one_graph(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    """(A model's break at this level stays the model's: ``tests/plugin/test_verdict.py``.)"""
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-backend=eager", "-k", "greedy and decode",
                                   "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1)
    assert checks_by_id(read_report(tmp_path))["toy-greedy-decode"]["graph_count"] == 1


@pytest.mark.breadth  # runs the property suite's four parts on a model that breaks
def test_property_suite_checks_the_eager_loop_and_xfails_a_model_that_does_not_compile(
        toy_project: pytest.Pytester) -> None:
    suite = REPOSITORY / "suites" / "test_decode_properties.py"
    toy_project.makepyfile(test_properties=suite.read_text())
    result = toy_project.runpytest("test_properties.py", "--fullgraph-models=toy_break", "-rx", "-p",
                                   "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("xfailed") == 4 and "failed" not in outcomes  # one per part of the examples
    result.stdout.fnmatch_lines(["*eager loop == generate held on every example; the model does not compile "
                                 "with fullgraph=True (*: Data-dependent branching [[]GB0170[]] at conftest.py:9 in "
                                 "forward (user)*"])


def _compiled_while(model: torch.nn.Module, ids: torch.Tensor, config: GenerationConfig,
                    seed: int) -> tuple[torch.Tensor, list[int]]:
    from pytest_fullgraph.core.compile_events import capture_compile_events, counting_backend

    torch._dynamo.reset()
    with capture_compile_events() as trace:
        backend = counting_backend("aot_eager", trace)
        torch.manual_seed(seed)
        tokens = fullgraph_generate(model, ids, None, config, loop="while",  # type: ignore[arg-type]
                                    compiler=lambda loop: torch.compile(loop, fullgraph=True, backend=backend))
    assert trace.breaks == []
    return tokens, trace.graph_ops


@pytest.mark.parametrize(("do_sample", "batch"), [(False, 2), (True, 2),
                                                  pytest.param(False, 1, marks=pytest.mark.breadth)])
@pytest.mark.breadth
def test_while_loop_form_is_one_graph_of_constant_size_and_exact(do_sample: bool, batch: int) -> None:
    model = build_tiny("llama")
    ids = torch.randint(3, 128, (batch, 6), generator=torch.Generator().manual_seed(3))
    sizes = []
    for tokens in (3, 12):
        config = GenerationConfig(max_new_tokens=tokens, do_sample=do_sample, top_k=20, temperature=0.8,
                                  pad_token_id=0, eos_token_id=None)
        model.generation_config.eos_token_id = None
        torch.manual_seed(7)
        expected = generate_fn(model)(input_ids=ids, generation_config=config)
        compiled, graph_ops = _compiled_while(model, ids, config, seed=7)
        assert torch.equal(compiled, expected)
        assert len(graph_ops) == 1
        sizes.append(graph_ops[0])
    assert sizes[0] == sizes[1], "the while_loop graph must not grow with max_new_tokens"


def test_while_loop_form_stops_early_on_eos_like_generate() -> None:
    model = build_tiny("gemma")
    ids = torch.randint(3, 128, (2, 6), generator=torch.Generator().manual_seed(4))
    free = generate_fn(model)(input_ids=ids, max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)
    config = GenerationConfig(max_new_tokens=8, do_sample=False, pad_token_id=0,
                              eos_token_id=[int(free[0, 7]), int(free[1, 8])])
    expected = generate_fn(model)(input_ids=ids, generation_config=config)
    compiled, _ = _compiled_while(model, ids, config, seed=0)
    assert torch.equal(compiled, expected)
    assert expected.shape[1] < 14  # both rows stopped before max_new_tokens: the loop exited early


def test_an_unknown_loop_form_is_named_with_the_forms_allowed() -> None:
    """What the while form itself cannot do (a processor, a cache layer) is named too: tests/loop/test_loop_state.py."""
    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=2, pad_token_id=0)
    with pytest.raises(UnsupportedGeneration, match="loop='scan' is not a loop form; use one of unrolled, while"):
        fullgraph_generate(model, torch.tensor([[5, 6, 7]]), None, config, loop="scan")


def test_export_level_locates_a_failing_export(toy_project: pytest.Pytester, tmp_path: Path) -> None:
    """The judged export is strict (dynamo traces the loop); its diagnosis must find the model's break too."""
    result = toy_project.runpytest("--fullgraph-models=toy_break", "--fullgraph-backend=eager", "-k",
                                   "greedy and export", "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(xfailed=1)
    check = checks_by_id(read_report(tmp_path))["toy_break-greedy-export"]
    assert check["outcome"] == "break"
    first = check["first_break"]
    assert (first["file"], first["line"], first["origin"]) == ("conftest.py", PLANTED_BREAK_LINE, "user")
    assert [(b["file"], b["line"]) for b in check["breaks"] if b["root_cause"]] == [("conftest.py",
                                                                                    PLANTED_BREAK_LINE)]


def test_break_in_our_loop_is_located_in_decode_py_as_the_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """A break planted in the loop (a call dynamo must not trace) is reported where the loop makes that call,
    with origin ``loop``: the loop's fault, not the model's."""
    import inspect

    from pytest_fullgraph import run_check
    from pytest_fullgraph.loop import decode

    monkeypatch.setattr(decode, "_next_tokens", torch._dynamo.disable(decode._next_tokens))
    source, first_line = inspect.getsourcelines(decode.decode_loop)
    call_line = first_line + next(i for i, line in enumerate(source) if "= _next_tokens(" in line)
    result = run_check(build_tiny("llama"), "llama", "greedy", "decode", "eager", 2)
    assert result.outcome == "break", result.message
    assert result.first_break is not None
    assert (result.first_break.file, result.first_break.line, result.first_break.origin) == (
        "pytest_fullgraph/loop/decode.py", call_line, "loop")
    assert any((b.file, b.line, b.origin) == ("pytest_fullgraph/loop/decode.py", call_line, "loop")
               for b in result.breaks)
