"""Property tests of fullgraph_generate: random batches, paddings, seeds, lengths, EOS, sampling settings, the
logits processors the loop supports (n-gram ban, bad words, sequence bias, suppression, forced tokens, length
rules and penalties), beam search (widths, length penalties, early-stopping modes, sequences returned), where
the model's own beam search runs, and the draft-and-verify modes (prompt lookup; assisted decoding with a draft
model, its budget, schedule and confidence threshold), where the model's cache rolls back.

Our loop (either form, unrolled or while_loop) run eagerly must equal ``model.generate``, and compiled with
``fullgraph=True`` must equal eager.
The default profile (every pull request, the README's quick start) draws 8 examples per model, a new compiled
program each (about 6 s on 2 cores); the slow tier draws 100. They are drawn in ``PARTS`` tests of
their own seed each, so that xdist spreads one model's examples over its workers instead of one worker running
them all at the end of the run.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from transformers import GenerationConfig, PreTrainedModel
from transformers.utils import is_sklearn_available

from pytest_fullgraph.check.compare import static_cache_verdict
from pytest_fullgraph.check.inputs import left_padded_prompts, model_generation_defaults
from pytest_fullgraph.core.breaks import compile_failure_types, is_graph_break, record_from_exception
from pytest_fullgraph.core.generation import generate_fn, static_cache_config
from pytest_fullgraph.core.model_facts import moved_to, vocab_size
from pytest_fullgraph.core.results import first_line
from pytest_fullgraph.loop.decode import LOOPS, UnsupportedGeneration, fullgraph_generate
from pytest_fullgraph.models import tiny
from pytest_fullgraph.models.draft import build_draft
from pytest_fullgraph.plugin.session import DRAWS_PROPERTY
from pytest_fullgraph.plugin.settings import Settings
from pytest_fullgraph.report.causes import OUR_FAULTS, fault_of_origin

FAST_EXAMPLES = 8
SLOW_EXAMPLES = 100
#: Tests each model's examples are split into, each drawing its share from its own seed.
PARTS = 4
PROPERTY_BACKEND = "aot_eager"
#: What generate warns (a UserWarning) when a drawn minimum length is past the drawn maximum: the draws cross them on
#: purpose, to check the minimum-length processors at their edge, and the comparison with the loop is the verdict.
DRAWN_LENGTHS_WARNING = "Unfeasible length constraints"


def examples(run_slow: bool) -> int:
    """Examples one part draws: the tier's examples per model, shared out over the parts."""
    return (SLOW_EXAMPLES if run_slow else FAST_EXAMPLES) // PARTS


@st.composite
def drafting_cases(draw: st.DrawFn, vocab: int, loops: tuple[str, ...]) -> dict[str, Any]:
    """A drawn draft-and-verify generation: greedy or sampling (no warper: the draft modes take no processor), one
    prompt (left-padded or not) of few distinct tokens, so prompt lookup finds n-grams, and prompt lookup or
    assisted decoding (speculative sampling when it samples) with the suite's draft model."""
    alphabet = draw(st.sampled_from([2, vocab - 1 - tiny.FIRST_PROMPT_ID]))
    tokens = draw(st.lists(st.integers(tiny.FIRST_PROMPT_ID, tiny.FIRST_PROMPT_ID + alphabet), min_size=1,
                           max_size=12))
    pads = draw(st.integers(0, 2))
    eos = draw(st.one_of(st.none(), st.integers(tiny.FIRST_PROMPT_ID, vocab - 1)))
    config: dict[str, Any] = {"max_new_tokens": draw(st.integers(1, 6)), "eos_token_id": eos,
                              "pad_token_id": tiny.PAD_TOKEN_ID, "do_sample": draw(st.booleans())}
    if config["do_sample"]:
        config.update(temperature=1.0, top_k=0, top_p=1.0)
    assistant = None
    if draw(st.booleans()):
        config.update(prompt_lookup_num_tokens=draw(st.integers(1, 4)),
                      max_matching_ngram_size=draw(st.sampled_from([None, 1, 2, 3])))
    else:
        confident = [0.0] if is_sklearn_available() else [0.0, 0.05]  # scikit-learn makes the threshold move
        assistant = {"num_assistant_tokens": draw(st.integers(1, 4)),
                     "num_assistant_tokens_schedule": draw(st.sampled_from(["constant", "heuristic_transient"])),
                     "assistant_confidence_threshold": draw(st.sampled_from(confident))}
    return {"input_ids": torch.tensor([[tiny.PAD_TOKEN_ID] * pads + tokens]),
            "attention_mask": torch.tensor([[0] * pads + [1] * len(tokens)]), "seed": draw(st.integers(0, 2**16)),
            "loop": draw(st.sampled_from(loops)), "assistant": assistant, "mode": DRAFTS,
            "config": GenerationConfig(**{k: v for k, v in config.items() if v is not None or k == "eos_token_id"})}


def draft_model(model: PreTrainedModel, settings: dict[str, Any] | None) -> dict[str, Any]:
    """``generate``'s ``assistant_model`` argument for a drawn assisted case (none for the others)."""
    if settings is None:
        return {}
    draft = build_draft(model)
    for name, value in settings.items():
        setattr(draft.generation_config, name, value)
    return {"assistant_model": draft}


@st.composite
def generation_cases(draw: st.DrawFn, vocab: int, loops: tuple[str, ...]) -> dict[str, Any]:
    """A drawn generation: a quarter of them prompt lookup or assisted decoding, a third of the rest beam search;
    for a model whose ``generate`` or loop does not run a mode, its draws are counted as left out, with why."""
    if draw(st.integers(0, 3)) == 0:
        return draw(drafting_cases(vocab, loops))
    batch = draw(st.integers(1, 3))
    lengths = draw(st.lists(st.integers(1, 12), min_size=batch, max_size=batch))
    seed = draw(st.integers(0, 2**16))
    prompts = left_padded_prompts(lengths, seed, vocab)
    eos = draw(st.one_of(st.none(), st.integers(tiny.FIRST_PROMPT_ID, vocab - 1),
                         st.lists(st.integers(tiny.FIRST_PROMPT_ID, vocab - 1), min_size=2, max_size=3)))
    loop = draw(st.sampled_from(loops))
    token = draw(st.integers(tiny.FIRST_PROMPT_ID, vocab - 1))
    config: dict[str, Any] = {
        "max_new_tokens": draw(st.integers(1, 6)),
        "do_sample": draw(st.booleans()),
        "eos_token_id": eos,
        "pad_token_id": tiny.PAD_TOKEN_ID,
        "repetition_penalty": draw(st.sampled_from([None, 1.3, 0.3])),
        "min_new_tokens": draw(st.sampled_from([None, 2])),
        "min_length": draw(st.sampled_from([None, 10])),
        "no_repeat_ngram_size": draw(st.sampled_from([None, 1, 2, 3])),
        "forced_bos_token_id": draw(st.sampled_from([None, token])),
        "forced_eos_token_id": draw(st.sampled_from([None, token])),
    }
    # processors that name tokens: drawn from the vocabulary, one or two tokens long
    sequences = st.lists(st.integers(tiny.FIRST_PROMPT_ID, vocab - 1), min_size=1, max_size=2)
    if draw(st.booleans()):
        config["bad_words_ids"] = draw(st.lists(sequences, min_size=1, max_size=3, unique_by=tuple))
    if draw(st.booleans()):
        config["sequence_bias"] = [[sequence, draw(st.sampled_from([-4.0, 2.5]))]
                                   for sequence in draw(st.lists(sequences, min_size=1, max_size=3, unique_by=tuple))]
    if draw(st.booleans()):
        # never the forced token: generate refuses a config that forces a token it suppresses
        suppressible = st.integers(tiny.FIRST_PROMPT_ID, vocab - 1).filter(lambda drawn: drawn != token)
        config["suppress_tokens"] = draw(st.lists(suppressible, max_size=3))
        config["begin_suppress_tokens"] = draw(st.lists(suppressible, max_size=3))
    if eos is not None and draw(st.booleans()):
        config["exponential_decay_length_penalty"] = (draw(st.integers(0, 3)), draw(st.sampled_from([1.5, 4.0])))
    beams = draw(st.integers(0, 2)) == 0
    if beams:
        width = draw(st.integers(2, 3))
        config.update(num_beams=width, num_return_sequences=draw(st.integers(1, width)),
                      length_penalty=draw(st.sampled_from([-1.0, 0.0, 1.0, 2.0])),
                      early_stopping=draw(st.sampled_from([True, False, "never"])))
    if config["do_sample"]:
        config.update(temperature=draw(st.sampled_from([0.6, 1.0, 1.5])),
                      top_k=draw(st.sampled_from([None, 5, 40])),
                      top_p=draw(st.sampled_from([None, 0.8])),
                      min_p=draw(st.sampled_from([None, 0.05])),
                      top_h=draw(st.sampled_from([None, 0.4])),
                      typical_p=draw(st.sampled_from([None, 0.7])),
                      epsilon_cutoff=draw(st.sampled_from([None, 0.01])),
                      eta_cutoff=draw(st.sampled_from([None, 0.5])))
    return {**prompts, "seed": seed, "loop": loop, "assistant": None, "mode": BEAMS if beams else PLAIN,
            "config": GenerationConfig(**{k: v for k, v in config.items() if v is not None or k == "eos_token_id"})}


#: The modes a drawn case is in: the draft-and-verify modes and beam search run only where the model's ``generate``
#: and our loop run them; plain generation wherever the loop runs at all.
PLAIN, BEAMS, DRAFTS = "plain", "beam search", "prompt lookup and assisted decoding"
#: Loop forms each model (by identity: the session builds a model once per worker) offers, or why none, and why
#: its beam search and draft modes are left out (none when they run): the parts of one model's examples ask once.
_LOOPS_OFFERED: dict[int, tuple[PreTrainedModel, tuple[str, ...], str, dict[str, str]]] = {}


def supported_loops(model: PreTrainedModel) -> tuple[tuple[str, ...], dict[str, str]]:
    """Loop forms fullgraph_generate offers this model, and the modes whose draws are left out, with why; skips
    the test, with the reason, if no form runs."""
    if id(model) not in _LOOPS_OFFERED or _LOOPS_OFFERED[id(model)][0] is not model:
        loops, reasons = _probe_loops(model)
        left_out = {mode: why for mode, why in ((BEAMS, _beams_left_out(model)), (DRAFTS, _drafts_left_out(model)))
                    if why is not None} if loops else {}
        _LOOPS_OFFERED[id(model)] = (model, loops, reasons, left_out)
    _, loops, reasons, left_out = _LOOPS_OFFERED[id(model)]
    if not loops:
        pytest.skip(f"fullgraph_generate does not support this model: {reasons}")
    return loops, left_out


def _beams_left_out(model: PreTrainedModel) -> str | None:
    """Why beam search draws cannot be checked on this model, or None: its own beam search must run (not for
    caches transformers cannot reorder: rwkv, xlstm), the loop must take it, and the static cache the loop uses must
    keep ``generate``'s beams (some models' static caches change them: the model's fault, which the beam scenarios'
    checks report). A loop that crashes on the probe is a loop bug: that raises."""
    config = GenerationConfig(max_new_tokens=3, num_beams=2, pad_token_id=tiny.PAD_TOKEN_ID)
    return _mode_left_out(model, torch.tensor([[tiny.FIRST_PROMPT_ID] * 3] * 2), config)


def _drafts_left_out(model: PreTrainedModel) -> str | None:
    """Why prompt lookup and assisted decoding draws cannot be checked: ``generate`` must run them for this model
    (not for stateful ones), the loop must take them (its cache rolls back), and the static cache must keep
    ``generate``'s tokens."""
    config = GenerationConfig(max_new_tokens=3, prompt_lookup_num_tokens=2, pad_token_id=tiny.PAD_TOKEN_ID)
    return _mode_left_out(model, torch.tensor([[tiny.FIRST_PROMPT_ID] * 3]), config)


def _mode_left_out(model: PreTrainedModel, probe: torch.Tensor, config: GenerationConfig) -> str | None:
    """Why the config's mode cannot be checked on this model (``generate`` refuses or fails it, the loop refuses
    it by name, or ``generate``'s static cache differs from its default one), or None when it can. A loop that
    crashes on the probe is a loop bug: that raises."""
    with torch.no_grad(), model_generation_defaults(model, None):
        try:
            expected = generate_fn(model)(input_ids=probe, generation_config=config)
            static = generate_fn(model)(input_ids=probe, generation_config=static_cache_config(config))
        except Exception as error:  # transformers' own run of the mode: nothing of ours ran yet; counted and shown
            return f"generate fails it ({type(error).__name__}: {first_line(error)})"
        try:
            fullgraph_generate(model, probe, None, config)
        except UnsupportedGeneration as error:
            return f"the loop refuses it by name ({first_line(error)})"
    if not torch.equal(static, expected):
        return "generate's static cache gives other tokens than its default cache"
    return None


def draws_line(checked: int, left_out: dict[str, int], why: dict[str, str]) -> str:
    """How many draws a part checked, and each left-out mode with its count and reason."""
    total = checked + sum(left_out.values())
    line = f"{checked} of {total} draws checked"
    if left_out:
        line += f"; {sum(left_out.values())} left out: " + "; ".join(
            f"{count} {mode}: {why[mode]}" for mode, count in sorted(left_out.items()))
    return line


def _probe_loops(model: PreTrainedModel) -> tuple[tuple[str, ...], str]:
    """The loop forms that run the plainest generation of ``model``, and why the others do not."""
    probe = torch.tensor([[tiny.FIRST_PROMPT_ID] * 2])
    config = GenerationConfig(max_new_tokens=1, pad_token_id=tiny.PAD_TOKEN_ID)
    loops = []
    reasons = []
    for loop in LOOPS:
        try:
            fullgraph_generate(model, probe, None, config, loop=loop)
            loops.append(loop)
        except UnsupportedGeneration as error:
            reasons.append(str(error))
    return tuple(loops), "; ".join(dict.fromkeys(reasons))


def run_seeded(seed: int, function: Any) -> torch.Tensor:
    torch.manual_seed(seed)
    return function()


def compile_loop(function: Any) -> Any:
    return torch.compile(function, fullgraph=True, backend=PROPERTY_BACKEND)


def model_does_not_compile(model: PreTrainedModel, loop: str) -> str | None:
    """Why the plainest generation (greedy, prefill and one decode step, no padding) fails to compile in this
    loop form, or None if it compiles.

    Only a graph break located outside pytest_fullgraph (the model's forward, transformers' code it calls: the
    conformance suite's decode level locates it) makes the compiled half of the property an xfail; a break in our
    loop, a compiler crash, or a failure only on a drawn case raises: a failure of the test.
    """
    probe = torch.tensor([[tiny.FIRST_PROMPT_ID] * 4] * 2)
    config = GenerationConfig(max_new_tokens=2, do_sample=False, pad_token_id=tiny.PAD_TOKEN_ID)
    torch._dynamo.reset()
    try:
        with torch.no_grad(), model_generation_defaults(model, None):
            fullgraph_generate(model, probe, None, config, loop=loop, compiler=compile_loop)
    except compile_failure_types() as error:
        record = record_from_exception(error)
        if not is_graph_break(error) or fault_of_origin(record.origin) in OUR_FAULTS:
            raise
        return record.summary()
    return None


@pytest.mark.parametrize("part", range(PARTS), ids=[f"part{part + 1}of{PARTS}" for part in range(PARTS)])
def test_fullgraph_generate_matches_generate_and_compiles_exactly(fullgraph_model: PreTrainedModel,
                                                                  fullgraph_settings: Settings, part: int,
                                                                  record_property: Any) -> None:
    """Every draw is checked or counted as left out with why (in JUnit's ``fullgraph_draws`` property, and listed
    at the end of the run when any was)."""
    model = fullgraph_model
    loops, left_out_why = supported_loops(model)
    compile_failures: dict[str, str] = {}  # loop form -> why the model itself does not compile in it
    checked, left_out = 0, Counter[str]()

    @settings(max_examples=examples(fullgraph_settings.run_slow), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @seed(part)  # reproducible, and each part draws other examples
    @given(case=generation_cases(vocab_size(model), loops))
    def check(case: dict[str, Any]) -> None:
        nonlocal checked
        if case["mode"] in left_out_why:
            left_out[case["mode"]] += 1
            return
        checked += 1
        ids, mask, config, seed = case["input_ids"], case["attention_mask"], case["config"], case["seed"]
        further = draft_model(model, case["assistant"])
        with torch.no_grad(), model_generation_defaults(model, config.eos_token_id), warnings.catch_warnings():
            warnings.filterwarnings("ignore", DRAWN_LENGTHS_WARNING, UserWarning)
            expected = run_seeded(seed, lambda: generate_fn(model)(input_ids=ids, attention_mask=mask,
                                                               generation_config=config, **further))
            loop = case["loop"]
            eager = run_seeded(seed, lambda: fullgraph_generate(model, ids, mask, config, loop=loop, **further))
            if not torch.equal(eager, expected):
                inputs = {"input_ids": ids, "attention_mask": mask, **further}
                pytest.fail(f"eager {loop} loop != generate for {config.to_diff_dict()}"
                            f"{static_cache_verdict(model, inputs, config, seed, expected)}")
            if loop in compile_failures:
                return
            torch._dynamo.reset()
            try:
                compiled = run_seeded(seed, lambda: fullgraph_generate(model, ids, mask, config, loop=loop,
                                                                       compiler=compile_loop, **further))
            except compile_failure_types():
                reason = model_does_not_compile(model, loop)
                if reason is None:
                    raise
                compile_failures[loop] = reason
                return
            assert torch.equal(compiled, eager), f"compiled {loop} loop != eager for {config.to_diff_dict()}"

    check()
    record_property(DRAWS_PROPERTY, draws_line(checked, dict(left_out), left_out_why))
    if compile_failures:
        message = (f"eager loop == generate held on every example; the model does not compile with "
                   f"fullgraph=True ({'; '.join(f'{loop}: {why}' for loop, why in compile_failures.items())}), "
                   "see its decode and while checks")
        if fullgraph_settings.strict:
            pytest.fail(message)
        pytest.xfail(message)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available: cudagraphs "
                    "(mode='reduce-overhead') need a GPU")
@pytest.mark.parametrize("loop", list(LOOPS))
def test_decode_under_cudagraphs_matches_eager(fullgraph_model: PreTrainedModel, loop: str) -> None:
    """On a GPU, the loop (each form) compiled by inductor with cudagraphs gives eager's tokens."""
    with moved_to(fullgraph_model, "cuda") as model:
        ids = torch.randint(tiny.FIRST_PROMPT_ID, vocab_size(model), (2, 8), device="cuda",
                            generator=torch.Generator(device="cuda").manual_seed(0))
        config = GenerationConfig(max_new_tokens=8, do_sample=False, pad_token_id=tiny.PAD_TOKEN_ID)
        with torch.no_grad(), model_generation_defaults(model, None):
            eager = fullgraph_generate(model, ids, None, config, loop=loop)
            torch._dynamo.reset()
            compiled = fullgraph_generate(model, ids, None, config, loop=loop, compiler=lambda function: torch.compile(
                function, fullgraph=True, backend="inductor", mode="reduce-overhead"))
        assert torch.equal(compiled, eager)
