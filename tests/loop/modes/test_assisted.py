"""Assisted decoding with a draft model in the loop: ``generate``'s drafts and kept tokens step by step, its
tokens eager, compiled and exported, both forms; refusals name what they refuse.

Greedy assisted decoding keeps exactly greedy's tokens whatever the draft, so equal tokens alone would not catch
a wrong draft: the step-by-step test records what ``generate``'s candidate generator drafted from which prefix
and checks the loop drafted the same from the same prefixes."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation.candidate_generator import AssistedCandidateGenerator

from pytest_fullgraph import build_tiny
from pytest_fullgraph.core.generation import generate_fn
from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate, fullgraph_generate
from pytest_fullgraph.loop.modes import assisted
from pytest_fullgraph.models.draft import build_draft
from tests.loop.modes import learned_positions, upstream

TARGET = build_tiny("llama")
PROMPT = torch.tensor([[5, 9, 14, 3, 27, 8, 11, 6]])


def _scikit_learn(monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    """Whether transformers (and so the loop) sees scikit-learn: with it, generate moves a confidence threshold by a
    ROC curve on the host each step (candidate_generator.py), which the loop refuses by name."""
    import transformers.generation.candidate_generator as candidate_generator
    import transformers.utils

    monkeypatch.setattr(candidate_generator, "is_sklearn_available", lambda: installed)
    monkeypatch.setattr(transformers.utils, "is_sklearn_available", lambda: installed)


@pytest.fixture(autouse=True)
def _as_installed_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests compare with generate as the default install runs it, without scikit-learn, whatever else an
    environment holds (the onnx and executorch extras pull it in)."""
    _scikit_learn(monkeypatch, installed=False)


def near_copy(model: PreTrainedModel, scale: float, seed: int) -> PreTrainedModel:
    """The model with its weights nudged: a draft that agrees with it often but not always."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    return draft


def drafting(model: PreTrainedModel, budget: int, schedule: str = "constant",
             threshold: float = 0.0) -> PreTrainedModel:
    model.generation_config.num_assistant_tokens = budget
    model.generation_config.num_assistant_tokens_schedule = schedule
    model.generation_config.assistant_confidence_threshold = threshold
    return model


DRAFTS = {
    "small": lambda: drafting(build_draft(TARGET), 3),
    "self": lambda: drafting(copy.deepcopy(TARGET), 4),
    "near": lambda: drafting(near_copy(TARGET, 0.05, 1), 3),
    "near-heuristic": lambda: drafting(near_copy(TARGET, 0.05, 2), 2, "heuristic_transient"),
    "near-confident": lambda: drafting(near_copy(TARGET, 0.05, 3), 4, threshold=0.08),
}


def generates_steps(draft: PreTrainedModel, config: GenerationConfig, monkeypatch: pytest.MonkeyPatch,
                    target: PreTrainedModel = TARGET,
                    prompt: torch.Tensor = PROMPT) -> tuple[torch.Tensor, list[tuple[list[int], list[int]]]]:
    """``generate``'s tokens and, per step, the prefix it drafted from and the draft."""
    steps: list[tuple[list[int], list[int]]] = []
    original = AssistedCandidateGenerator.get_candidates

    def recorded(self: Any, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        candidates, logits = original(self, cast(torch.LongTensor, input_ids), **kwargs)
        steps.append((input_ids[0].tolist(), candidates[0, input_ids.shape[1]:].tolist()))
        return candidates, logits

    with monkeypatch.context() as patch:
        patch.setattr(AssistedCandidateGenerator, "get_candidates", recorded)
        tokens = generate_fn(target)(input_ids=prompt, generation_config=config, assistant_model=draft)
    return tokens, steps


def loops_steps(draft: PreTrainedModel, config: GenerationConfig, monkeypatch: pytest.MonkeyPatch,
                target: PreTrainedModel = TARGET,
                prompt: torch.Tensor = PROMPT) -> tuple[torch.Tensor, list[tuple[list[int], list[int]]]]:
    """The eager unrolled loop's tokens and, per step that still generates, its prefix and draft."""
    steps: list[tuple[list[int], list[int]]] = []
    original = assisted.draft

    def recorded(settings: Any, state: assisted.Assisted, *args: Any, **kwargs: Any) -> Any:
        drafted = original(settings, state, *args, **kwargs)
        if bool(state.running):
            steps.append((state.sequence[0, :int(state.length)].tolist(),
                          drafted.tokens[:int(drafted.length)].tolist()))
        return drafted

    with monkeypatch.context() as patch:
        patch.setattr(assisted, "draft", recorded)
        tokens = fullgraph_generate(target, prompt, None, config, assistant_model=draft)
    return tokens, steps


def assert_drafts_as_generate(name: str, config: GenerationConfig,
                              monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], list[int]]]:
    """Seeded alike, the unrolled loop drafts what ``generate`` drafts from the same prefixes, gives its tokens and
    leaves the generator where it leaves it; the ``while`` form gives its tokens too. Returns the steps."""
    results = []
    for run in (generates_steps, loops_steps):
        torch.manual_seed(3)
        results.append((*run(DRAFTS[name](), config, monkeypatch), torch.rand(4)))
    (expected, generate_steps, generate_after), (tokens, steps, after) = results
    assert torch.equal(tokens, expected) and steps == generate_steps and torch.equal(after, generate_after)
    torch.manual_seed(3)
    while_tokens = fullgraph_generate(TARGET, PROMPT, None, config, loop="while", assistant_model=DRAFTS[name]())
    assert torch.equal(while_tokens, expected)
    return steps


@pytest.mark.parametrize(("name", "eos"), [("small", None), ("self", "emitted"), ("near", None), ("near", "emitted"),
                                         ("near-heuristic", None), ("near-confident", "emitted")])
def test_each_step_drafts_and_keeps_what_generate_does(name: str, eos: str | None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    plain = generate_fn(TARGET)(input_ids=PROMPT, generation_config=GenerationConfig(max_new_tokens=8,
                                                                                     pad_token_id=0))
    eos_id = int(plain[0, PROMPT.shape[1] + 5]) if eos else None  # a token greedy emits mid-generation
    config = GenerationConfig(max_new_tokens=8, pad_token_id=0, eos_token_id=eos_id)
    expected, generate_steps = generates_steps(DRAFTS[name](), config, monkeypatch)
    tokens, steps = loops_steps(DRAFTS[name](), config, monkeypatch)
    assert torch.equal(tokens, expected)
    assert steps == generate_steps
    if not name.startswith("near-"):
        return  # the while form's tokens, where its state carries a budget or a threshold cuts the draft
    # the while form's tokens
    while_tokens = fullgraph_generate(TARGET, PROMPT, None, config, loop="while", assistant_model=DRAFTS[name]())
    assert torch.equal(while_tokens, expected)


SAMPLING = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}


@pytest.mark.parametrize(("name", "eos"), [("small", None), ("near", None), ("near", "emitted"),
                                         ("near-heuristic", None), ("near-confident", "emitted")])
def test_speculative_sampling_draws_what_generate_draws_step_by_step(name: str, eos: str | None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With do_sample, every draft token, acceptance and next token is a draw: the same seed gives generate's
    drafts from the same prefixes, its tokens, and the generator's state after (as many draws)."""
    seeded = GenerationConfig(max_new_tokens=10, pad_token_id=0, **SAMPLING)
    torch.manual_seed(1)
    free = generate_fn(TARGET)(input_ids=PROMPT, generation_config=seeded, assistant_model=DRAFTS[name]())
    config = GenerationConfig(max_new_tokens=10, pad_token_id=0, eos_token_id=int(free[0, -4]) if eos else None,
                              **SAMPLING)
    steps = assert_drafts_as_generate(name, config, monkeypatch)
    assert any(len(draft) > 0 and prefix + draft != steps[index + 1][0][:len(prefix + draft)]
               for index, (prefix, draft) in enumerate(steps[:-1])) or name == "small"  # some draft was cut


#: Logits processors and warpers in the draft modes: the target runs them at every verified position, the draft
#: model's generate runs its own list built from them.
GREEDY_PROCESSORS = [{"repetition_penalty": 1.3}, {"no_repeat_ngram_size": 2, "suppress_tokens": [3, 7]}]
WARPERS = [{"temperature": 0.7, "top_k": 20, "top_p": 0.9},
           {"temperature": 0.7, "top_p": 0.8, "repetition_penalty": 1.2}]


@pytest.mark.parametrize("name", ["near", "near-heuristic"])
@pytest.mark.parametrize("settings", GREEDY_PROCESSORS + [{"do_sample": True, **warpers} for warpers in WARPERS])
def test_logits_processors_and_warpers_draft_and_keep_what_generate_does(name: str, settings: dict[str, Any],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each verified position's logits processed with the sequence up to it, each drafted token from the draft's
    own processed scores: the same drafts from the same prefixes, tokens and generator state as ``generate``."""
    config = GenerationConfig(max_new_tokens=10, pad_token_id=0, eos_token_id=None, **settings)
    assert_drafts_as_generate(name, config, monkeypatch)


def test_the_draft_runs_the_processors_its_generate_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft model's processors are what its ``generate`` runs, kind by kind and setting by setting (in
    transformers 5.24 the warpers twice: merged with the target's before its own are appended)."""
    from transformers.generation.utils import GenerationMixin

    from pytest_fullgraph.loop.planning import prepare

    draft = DRAFTS["near"]()
    config = GenerationConfig(max_new_tokens=4, pad_token_id=0, do_sample=True, repetition_penalty=1.2, **WARPERS[0])
    built: list[Any] = []
    original = GenerationMixin._get_logits_processor

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        processors = original(self, *args, **kwargs)
        if self is draft:
            built.append(processors)
        return processors

    with monkeypatch.context() as patch:
        patch.setattr(GenerationMixin, "_get_logits_processor", recorded)
        generate_fn(TARGET)(input_ids=PROMPT, generation_config=config, assistant_model=draft)
    _, plan = prepare(TARGET, PROMPT, None, config, assistant=draft)
    settings = plan.settings(assisted.AssistSettings)
    assert plan.mode is assisted.MODE and built

    def described(processors: Any) -> list[tuple[str, dict[str, Any]]]:
        # the settings (a processor's first call adds state of its own); the draft's generate also builds a
        # MinLength processor for its own prompt's length, which never fires
        settings = ("penalty", "temperature", "top_k", "top_p", "min_tokens_to_keep", "filter_value")
        return [(type(p).__name__, {k: getattr(p, k) for k in settings if hasattr(p, k)})
                for p in processors if type(p).__name__ != "MinLengthLogitsProcessor"]

    assert described(settings.processors) == described(built[0])
    names = [type(p).__name__ for p in settings.processors]
    assert names.count("RepetitionPenaltyLogitsProcessor") == 1 and "TemperatureLogitsWarper" in names


@pytest.mark.parametrize("name", ["cohere2", "gemma3n_text"])
def test_a_sliding_window_model_rolls_back_past_its_window(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sliding layers (window 16) kept whole: 17 prompt tokens and 10 new ones run past the window, and every
    step's verification and rollback keeps what generate keeps (gemma3n's shared-KV layers hold nothing)."""
    target = build_tiny(name)
    prompt = torch.tensor([[5, 9, 14, 3, 27, 8, 11, 6, 5, 9, 14, 3, 27, 8, 11, 6, 5]])
    config = GenerationConfig(max_new_tokens=10, pad_token_id=0, eos_token_id=None)
    expected, generate_steps = generates_steps(drafting(near_copy(target, 0.05, 1), 3), config, monkeypatch,
                                               target, prompt)
    tokens, steps = loops_steps(drafting(near_copy(target, 0.05, 1), 3), config, monkeypatch, target, prompt)
    assert torch.equal(tokens, expected)
    assert steps == generate_steps
    assert any(len(draft) > 0 and prefix + draft != steps[index + 1][0][:len(prefix + draft)]
               for index, (prefix, draft) in enumerate(steps[:-1]))  # some draft was cut short: a real rollback


def test_the_drafts_are_partly_kept() -> None:
    """The near-copy drafts exercise both outcomes of a step: drafts kept whole, and cut short."""
    config = GenerationConfig(max_new_tokens=12, pad_token_id=0, eos_token_id=None)
    draft = DRAFTS["near"]()  # before the hook: a deep copy would take it along
    forwards: list[int] = []
    handle = TARGET.register_forward_hook(lambda *_: forwards.append(1))
    try:
        generate_fn(TARGET)(input_ids=PROMPT, generation_config=config, assistant_model=draft)
    finally:
        handle.remove()
    assert 12 / 3 < len(forwards) < 12


@pytest.mark.breadth  # compiles and exports both models: the workflow's plugin job runs it on every pull request
@pytest.mark.parametrize("loop", ["unrolled", "while"])
@pytest.mark.parametrize("settings", [{}, SAMPLING, {"do_sample": True, **WARPERS[1]}], ids=["greedy", "sample",
                                                                                          "warped"])
def test_compiled_and_exported_loops_give_generates_tokens(loop: str, settings: dict[str, Any]) -> None:
    """Speculative sampling's draws sit in torch.cond branches: compiled and exported, they draw as generate, with
    the processors and warpers run at every verified position and drafted token."""
    config = GenerationConfig(max_new_tokens=8, pad_token_id=0, eos_token_id=None, **settings)
    draft = DRAFTS["near"]()
    torch.manual_seed(7)
    expected = generate_fn(TARGET)(input_ids=PROMPT, generation_config=config, assistant_model=draft)
    torch._dynamo.reset()
    torch.manual_seed(7)
    compiled = fullgraph_generate(TARGET, PROMPT, None, config, loop=loop, assistant_model=draft,
                                  compiler=lambda f: torch.compile(f, fullgraph=True, backend="aot_eager"))
    assert torch.equal(compiled, expected)
    exported = export_generate(TARGET, PROMPT, torch.ones_like(PROMPT), config, loop=loop, assistant_model=draft,
                               strict=True)  # as the export level does: dynamo traces the loop
    torch.manual_seed(7)
    assert torch.equal(exported(PROMPT, torch.ones_like(PROMPT)), expected)
    parameters = {name for name, _ in exported.exported_program.named_parameters()}
    assert any(name.startswith("assistant.") for name in parameters)  # the draft's weights are the program's


@pytest.mark.parametrize(("ids", "settings", "draft_settings", "named"), [
    ([[5, 6], [7, 8]], {}, {}, "takes one prompt"),
    ([[5, 6]], {"min_new_tokens": 2}, {}, "min_length=4 \\(or min_new_tokens\\)"),
    ([[5, 6]], {}, {"num_assistant_tokens_schedule": "heuristic"}, "writes the budget back"),
])
def test_what_assisted_decoding_cannot_do_is_refused_by_name(ids: list[list[int]], settings: dict[str, Any],
                                                             draft_settings: dict[str, Any], named: str) -> None:
    draft = build_draft(TARGET)
    for key, value in draft_settings.items():
        setattr(draft.generation_config, key, value)
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0, **settings)
    for run in (fullgraph_generate, export_generate):  # both refuse before any graph
        with pytest.raises(UnsupportedGeneration, match=named):
            run(TARGET, torch.tensor(ids), torch.ones(len(ids), 2, dtype=torch.long), config, assistant_model=draft)


def test_a_draft_model_whose_cache_cannot_roll_back_is_refused_by_name() -> None:
    """mamba's recurrent state cannot be un-updated (and generate refuses a stateful target itself)."""
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0)
    draft = build_tiny("mamba")
    with pytest.raises(UnsupportedGeneration, match="draft model cannot roll back cache layer"):
        fullgraph_generate(TARGET, PROMPT, None, config, assistant_model=draft)


def test_a_confidence_threshold_is_refused_where_scikit_learn_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    _scikit_learn(monkeypatch, installed=True)
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0)
    with pytest.raises(UnsupportedGeneration, match="where scikit-learn is installed: generate then moves the "
                                                    "threshold by a ROC curve"):
        fullgraph_generate(TARGET, PROMPT, None, config, assistant_model=DRAFTS["near-confident"]())


def test_beams_ignore_the_draft_model_as_generate_does() -> None:
    config = GenerationConfig(max_new_tokens=4, pad_token_id=0, num_beams=2)
    draft = build_draft(TARGET)
    expected = generate_fn(TARGET)(input_ids=PROMPT, generation_config=config, assistant_model=draft)
    assert torch.equal(fullgraph_generate(TARGET, PROMPT, None, config, assistant_model=draft), expected)


def test_a_dynamic_export_of_a_draft_mode_is_refused_by_name() -> None:
    config = GenerationConfig(max_new_tokens=3, pad_token_id=0)
    with pytest.raises(UnsupportedGeneration, match=r"dynamic=True\) does not support assisted decoding"):
        export_generate(TARGET, PROMPT, None, config, dynamic=True, assistant_model=build_draft(TARGET))
    lookup = GenerationConfig(max_new_tokens=3, pad_token_id=0, prompt_lookup_num_tokens=2)
    with pytest.raises(UnsupportedGeneration, match=r"dynamic=True\) does not support prompt lookup"):
        export_generate(TARGET, PROMPT, None, lookup, dynamic=True)


def test_a_model_whose_tokens_follow_its_cache_length_is_blamed_not_the_loop() -> None:
    """axk2's sparse-attention indexer picks other positions with a longer static cache (its scores tie at 0), so
    the draft modes' longer cache changes its tokens: ``generate`` with a cache of the loop's length says whose."""
    from pytest_fullgraph.check.compare import static_cache_verdict
    from pytest_fullgraph.check.inputs import make_inputs
    from pytest_fullgraph.check.scenarios import SCENARIOS

    model = build_tiny("axk2")
    inputs = make_inputs(model, SCENARIOS["prompt_lookup"])
    config = GenerationConfig(max_new_tokens=6, pad_token_id=0, eos_token_id=None, prompt_lookup_num_tokens=3)
    eager = generate_fn(model)(**inputs, generation_config=config)
    assert not torch.equal(fullgraph_generate(model, inputs["input_ids"], None, config), eager)
    verdict = static_cache_verdict(model, inputs, config, 0, eager)
    assert "static cache of the loop's 17 positions differs from the default (row 0, position 11" in verdict
    assert verdict.endswith("the model's static-cache path, not the loop")


@pytest.mark.breadth
def test_the_transformers_quirk_the_draft_follows_has_a_standalone_reproducer() -> None:
    """``assisted.draft_processors`` runs the draft's warpers twice because transformers does;
    docs/upstream/assisted_draft_warpers_twice.py is what transformers would be handed: with torch and
    transformers alone, in a fresh process, it says BUG (transformers 5.24, measured) or FIXED, and never fails
    otherwise."""
    upstream.assert_bug_or_fixed("assisted_draft_warpers_twice.py")


def test_a_generation_that_fills_a_learned_position_table_gives_generates_tokens() -> None:
    """Near the end a step still drafts and verifies its fixed width, reaching past ``max_length``: those slots
    read the last position (``drafting.chunk_positions``), so gpt2 does not index past its table; before, the
    unrolled form failed with an index error where ``generate`` (which drafts less there) runs."""
    model = learned_positions.table_model()
    draft = build_draft(model)
    config = learned_positions.filling()
    expected = generate_fn(model)(input_ids=learned_positions.PROMPT, generation_config=config,
                                  assistant_model=draft)
    assert expected.shape[1] == learned_positions.POSITIONS
    for loop in ("unrolled", "while"):
        assert torch.equal(fullgraph_generate(model, learned_positions.PROMPT, None, config, loop=loop,
                                              assistant_model=draft), expected), loop
