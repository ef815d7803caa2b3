"""Scenarios: the inputs and generation settings of a check, as a table, and selecting from it.

Data only, and no torch import: the plugin reads it to parametrise tests. ``inputs`` makes a scenario concrete
for a model (prompts, config, the tokens it picks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_fullgraph.core.suggest import LIST_SCENARIOS, select_names
from pytest_fullgraph.loop.modes import table as mode_table
from pytest_fullgraph.models.shrink import SLIDING_WINDOW
from pytest_fullgraph.models.tiny import FIRST_PROMPT_ID
from pytest_fullgraph.models.variants import SHORT_CHUNKS, VARIANTS


@dataclass(frozen=True)
class GreedyToken:
    """A setting's value: the token the model's plain greedy run emits in ``row`` as its new token ``step``, so a
    scenario acts on tokens the model really generates (forbid, bias, suppress, force them)."""

    row: int
    step: int


@dataclass(frozen=True)
class PickedEos:
    """A setting's value: the scenario's EOS id (picked as ``pick_eos_token`` picks it)."""


@dataclass(frozen=True)
class NewTokens:
    """A setting's value: the run's ``max_new_tokens`` + ``delta`` (for ``min_new_tokens``)."""

    delta: int


@dataclass(frozen=True)
class TotalLength(NewTokens):
    """A setting's value: prompt width + the run's ``max_new_tokens`` + ``delta`` (for ``max_length``)."""


EOS = PickedEos()
#: Sampling settings that turn every warper off, so a sampling feature's scenario measures that feature alone
#: (``GenerationConfig``'s own defaults keep top-k 50 on).
NEUTRAL_SAMPLING: dict[str, Any] = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
#: The draft modes' context: drafting needs a cache, and some configs turn it off (mpt's: use_cache=False), where
#: transformers' assisted decoding stops with "Assisted decoding requires a cache".
DRAFTING_CACHE: dict[str, Any] = {"use_cache": True}


@dataclass(frozen=True)
class Scenario:
    """Inputs and generation settings of a check; every value is fixed so runs are reproducible.

    ``settings`` are the feature's further ``GenerationConfig`` values and ``context`` what it is measured
    against (``GreedyToken``, ``EOS`` and lengths in either are resolved per model); ``generate_kwargs`` are
    further ``generate`` arguments (``TOKENIZER``: a tokenizer of the model's tiny vocabulary). ``feature`` is
    the generation feature a scenario exercises (the report's feature views); ``inert`` says why its settings
    cannot change the tokens, when they cannot.
    """

    name: str
    description: str
    prompt_lengths: tuple[int, ...] = (8, 8)
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    uses_eos: bool = False
    seed: int = 1234
    feature: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: settings the feature is measured against (neutral sampling, a repetition reward): part of the config,
    #: but not the feature (the scenario without ``settings`` is its plain counterpart)
    context: Mapping[str, Any] = field(default_factory=dict)
    generate_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: in the default selection (``basic``)
    basic: bool = False
    inert: str = ""
    #: the variant of the tiny config its models are built with (``models.variants``), to reach a path the default
    #: config never runs; "" for the default config
    model_variant: str = ""

    @property
    def kind(self) -> str:
        """"basic" (the default four), else "length", "mode", "prefill", "processor", "sampling" or "stopping":
        which part of ``generate`` the feature lives in, or (``length``) how far the sequence runs."""
        if self.basic:
            return "basic"
        if self.feature in LENGTH_FEATURES:
            return "length"
        if self.feature in PREFILL_FEATURES:
            return "prefill"
        if self.feature in MODE_FEATURES:
            return "mode"
        if self.feature in STOPPING_FEATURES:
            return "stopping"
        return "sampling" if self.do_sample or self.context.get("do_sample") else "processor"


def allowed_prefix_tokens(batch_id: int, input_ids: Any) -> list[int]:
    """``prefix_allowed_tokens_fn`` of the prefix-constrained scenario: a fixed window of 16 ids."""
    del batch_id, input_ids
    return list(range(FIRST_PROMPT_ID, FIRST_PROMPT_ID + 16))


def _warper_alone(name: str, setting: str, value: float, warper: str) -> Scenario:
    """A sampling warper's scenario: its one setting against neutral sampling."""
    return Scenario(name, f"sampling, {setting}={value} alone ({warper})", feature=setting, context=NEUTRAL_SAMPLING,
                    settings={setting: value})


#: ``generate_kwargs`` value: a tokenizer for the model's tiny vocabulary (``tiny_tokenizer``).
TOKENIZER = "tokenizer"
#: ``generate_kwargs`` value: a draft model for the model (``models.draft.build_draft``), for ``assistant_model``.
DRAFT = "draft"
STOPPING_FEATURES = ("eos", "eos_list", "max_length", "stop_strings", "max_time")
#: Features of how the prompt is run before the first new token.
PREFILL_FEATURES = ("prefill_chunk",)
#: Features of a sequence longer than the basic checks' 12 tokens: the paths a model takes only past a length.
LENGTH_FEATURES = ("past_window",)
#: The longer prompt of ``past_window``: past the tiny configs' sliding window in the prompt itself.
PAST_WINDOW_PROMPT = SLIDING_WINDOW + 4
#: Features that are a decoding mode of their own (``GenerationConfig.get_generation_mode``), not greedy/sampling:
#: the mode table's (read without torch).
MODE_FEATURES = mode_table.FEATURES
_G = GreedyToken

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("greedy", "greedy decoding, batch 2, prompts of 8 tokens, no EOS", basic=True, feature="greedy"),
        Scenario("sample", "do_sample with temperature 0.7, top-k 20, top-p 0.9 and a fixed seed",
                 do_sample=True, temperature=0.7, top_k=20, top_p=0.9, basic=True, feature="sample"),
        Scenario("eos", "greedy with an EOS id the model emits mid-generation; finished rows are padded",
                 uses_eos=True, basic=True, feature="eos"),
        Scenario("padded", "left-padded batch of prompts of lengths 8 and 5 with an attention mask",
                 prompt_lengths=(8, 5), basic=True, feature="padding"),
        # logits processors, greedy
        Scenario("repetition_penalty", "greedy, repetition_penalty=0.2: seen tokens rewarded, so a few new tokens "
                 "change (RepetitionPenaltyLogitsProcessor)", feature="repetition_penalty",
                 settings={"repetition_penalty": 0.2}),
        Scenario("no_repeat_ngram", "greedy, no_repeat_ngram_size=1 against repetition_penalty=0.2: no token "
                 "twice where seen tokens are rewarded (NoRepeatNGramLogitsProcessor)", feature="no_repeat_ngram",
                 context={"repetition_penalty": 0.2}, settings={"no_repeat_ngram_size": 1}),
        Scenario("bad_words", "greedy, bad_words_ids: a token row 0 emits, and a 2-token sequence row 1 emits "
                 "(NoBadWordsLogitsProcessor)", feature="bad_words",
                 settings={"bad_words_ids": [[_G(0, 1)], [_G(1, 0), _G(1, 1)]]}),
        Scenario("sequence_bias", "greedy, sequence_bias of -100 on a token row 0 emits and on a 2-token sequence "
                 "row 1 emits (SequenceBiasLogitsProcessor)", feature="sequence_bias",
                 settings={"sequence_bias": [[[_G(0, 1)], -100.0], [[_G(1, 0), _G(1, 1)], -100.0]]}),
        Scenario("min_length", "greedy with the eos scenario's EOS, min_length = prompt + all new tokens but one "
                 "(MinLengthLogitsProcessor)", uses_eos=True, feature="min_length",
                 settings={"min_length": TotalLength(-1)}),
        Scenario("min_new_tokens", "greedy with the eos scenario's EOS, min_new_tokens = all but one "
                 "(MinNewTokensLengthLogitsProcessor)", uses_eos=True, feature="min_new_tokens",
                 settings={"min_new_tokens": NewTokens(-1)}),
        Scenario("forced_bos", "greedy from 1-token prompts, forced_bos_token_id (ForcedBOSTokenLogitsProcessor: "
                 "only a 1-token prompt is forced)", prompt_lengths=(1, 1), feature="forced_bos",
                 settings={"forced_bos_token_id": _G(0, 1)}),
        Scenario("forced_eos", "greedy, forced_eos_token_id: the last token is forced "
                 "(ForcedEOSTokenLogitsProcessor)", feature="forced_eos", settings={"forced_eos_token_id": _G(1, 0)}),
        Scenario("suppress_tokens", "greedy, suppress_tokens: two tokens the rows emit "
                 "(SuppressTokensLogitsProcessor)", feature="suppress_tokens",
                 settings={"suppress_tokens": [_G(0, 1), _G(1, 1)]}),
        Scenario("begin_suppress", "greedy, begin_suppress_tokens: the rows' first new tokens "
                 "(SuppressTokensAtBeginLogitsProcessor)", feature="begin_suppress_tokens",
                 settings={"begin_suppress_tokens": [_G(0, 0), _G(1, 0)]}),
        Scenario("length_decay", "greedy with the eos scenario's EOS, exponential_decay_length_penalty=(0, 8.0) "
                 "(ExponentialDecayLengthPenalty)", uses_eos=True, feature="exponential_decay_length_penalty",
                 settings={"exponential_decay_length_penalty": (0, 8.0)}),
        Scenario("remove_invalid", "greedy, remove_invalid_values=True (InfNanRemoveLogitsProcessor)",
                 feature="remove_invalid_values", settings={"remove_invalid_values": True},
                 inert="replaces inf and nan scores, which a healthy model never produces"),
        Scenario("renormalize", "sampling, renormalize_logits=True (LogitNormalization: log-softmax at the end)",
                 feature="renormalize_logits", context=NEUTRAL_SAMPLING,
                 settings={"renormalize_logits": True},
                 inert="log-softmax keeps the argmax and the sampling distribution"),
        Scenario("watermark", "greedy, watermarking_config with bias 10 (WatermarkLogitsProcessor: seeds a "
                 "generator from the previous token)", feature="watermarking",
                 settings={"watermarking_config": {"bias": 10.0, "greenlist_ratio": 0.25, "context_width": 1}}),
        Scenario("guidance", "greedy, guidance_scale=3 (UnbatchedClassifierFreeGuidanceLogitsProcessor: a second "
                 "forward on the unconditional prompt)", feature="classifier_free_guidance",
                 settings={"guidance_scale": 3.0}),
        Scenario("prefix_constrained", "greedy, prefix_allowed_tokens_fn allowing 16 ids "
                 "(PrefixConstrainedLogitsProcessor)", feature="prefix_allowed_tokens_fn",
                 generate_kwargs={"prefix_allowed_tokens_fn": allowed_prefix_tokens}),
        # sampling warpers, each alone
        *(_warper_alone(name, setting, value, warper) for name, setting, value, warper in (
            ("temperature", "temperature", 0.5, "TemperatureLogitsWarper"),
            ("top_k", "top_k", 5, "TopKLogitsWarper"),
            ("top_p", "top_p", 0.5, "TopPLogitsWarper"),
            ("min_p", "min_p", 0.8, "MinPLogitsWarper"),
            ("top_h", "top_h", 0.3, "TopHLogitsWarper"),
            ("typical_p", "typical_p", 0.5, "TypicalLogitsWarper"),
            ("epsilon", "epsilon_cutoff", 0.05, "EpsilonLogitsWarper"),
            ("eta", "eta_cutoff", 0.9, "EtaLogitsWarper"),
        )),
        # stopping criteria
        Scenario("eos_list", "greedy, eos_token_id a list: the eos scenario's EOS and a token row 1 emits",
                 uses_eos=True, feature="eos_list", settings={"eos_token_id": [EOS, _G(1, 1)]}),
        Scenario("max_length", "greedy, max_length = prompt + max_new_tokens - 1 instead of max_new_tokens "
                 "(MaxLengthCriteria)", feature="max_length", settings={"max_length": TotalLength(-1)}),
        Scenario("stop_strings", "greedy, stop_strings: the texts of the rows' second new tokens, with a tokenizer "
                 "of the tiny vocabulary (StopStringCriteria)", feature="stop_strings",
                 settings={"stop_strings": [_G(0, 1), _G(1, 1)]}, generate_kwargs={"tokenizer": TOKENIZER}),
        Scenario("max_time", "greedy, max_time=600 s (MaxTimeCriteria: a host clock)", feature="max_time",
                 settings={"max_time": 600.0}, inert="a limit no tiny generation reaches"),
        # sequence length
        Scenario("past_window", f"greedy, a left-padded batch of prompts of lengths {PAST_WINDOW_PROMPT} and "
                 f"{PAST_WINDOW_PROMPT - 6}: past a tiny config's sliding window ({SLIDING_WINDOW} tokens) in the "
                 "prompt of row 0 and while decoding row 1, where the basic scenarios' 12 tokens stay inside it; "
                 f"models with chunks are built with {VARIANTS[SHORT_CHUNKS]}",
                 prompt_lengths=(PAST_WINDOW_PROMPT, PAST_WINDOW_PROMPT - 6), feature="past_window",
                 model_variant=SHORT_CHUNKS),
        # prefill
        Scenario("prefill_chunk", "greedy, a left-padded batch of prompts of lengths 8 and 5 prefilled in chunks "
                 "of 3 tokens (prefill_chunk_size=3: chunks of 3, 3 and 2, each a forward on the cache)",
                 prompt_lengths=(8, 5), feature="prefill_chunk", settings={"prefill_chunk_size": 3},
                 context={"use_cache": True},
                 inert="the chunks compute what one forward over the prompt computes: more forwards, the same tokens"),
        # decoding modes
        Scenario("beam", "beam search, num_beams=3, no EOS (GenerationMode.BEAM_SEARCH: the cache reordered to "
                 "follow the beams each step)", feature="beam_search", settings={"num_beams": 3}),
        Scenario("beam_sample", "beam sampling, num_beams=3 with neutral sampling (GenerationMode.BEAM_SAMPLE: "
                 "candidates drawn without replacement)", feature="beam_sample", context=NEUTRAL_SAMPLING,
                 settings={"num_beams": 3}),
        Scenario("beam_eos", "beam search, num_beams=3, the eos scenario's EOS ending beams early, "
                 "num_return_sequences=2, length_penalty=0.5, early_stopping=True", uses_eos=True,
                 feature="beam_eos", settings={"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.5,
                                               "early_stopping": True}),
        Scenario("prompt_lookup", "prompt-lookup decoding, prompt_lookup_num_tokens=3, one prompt (assisted "
                 "generation drafting from the sequence's own n-grams: PromptLookupCandidateGenerator)",
                 prompt_lengths=(8,), feature="prompt_lookup", settings={"prompt_lookup_num_tokens": 3},
                 context=DRAFTING_CACHE,
                 inert="greedy acceptance keeps exactly greedy's tokens: drafting changes how many forwards run"),
        Scenario("assisted", "assisted decoding with a draft model (a one-layer llama of the model's vocabulary "
                 "drafting 3 tokens a step: AssistedCandidateGenerator), greedy, one prompt", prompt_lengths=(8,),
                 feature="assisted", generate_kwargs={"assistant_model": DRAFT}, context=DRAFTING_CACHE,
                 inert="greedy acceptance keeps exactly greedy's tokens: drafting changes how many forwards run"),
        Scenario("assisted_sample", "speculative sampling with the assisted scenario's draft model and neutral "
                 "sampling (each draft token kept with probability p/q, then a draw from the residual)",
                 prompt_lengths=(8,), feature="assisted_sample", context={**NEUTRAL_SAMPLING, **DRAFTING_CACHE},
                 generate_kwargs={"assistant_model": DRAFT}),
    )
}
#: The selection keyword for today's four scenarios, the default.
BASIC = tuple(name for name, scenario in SCENARIOS.items() if scenario.basic)


def select_scenarios(expression: str) -> tuple[str, ...]:
    """The scenario names a comma list of names (in any case), ``all``, ``basic`` and glob patterns selects, in
    table order; ``ValueError`` naming every entry that selects nothing, with close names."""
    return select_names(expression, list(SCENARIOS), {"all": SCENARIOS, "basic": BASIC}, "scenario",
                        f"all, basic (the default), globs such as top_*, or a name: {LIST_SCENARIOS} lists all "
                        f"{len(SCENARIOS)}")


def longest_prompt(names: Iterable[str]) -> int:
    """The longest prompt, in tokens, of the named scenarios: the batch's padded width, where positions end."""
    return max((max(SCENARIOS[name].prompt_lengths) for name in names), default=0)
