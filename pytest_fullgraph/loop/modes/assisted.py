"""Assisted decoding as one graph: ``generate``'s ``_assisted_decoding`` with an ``AssistedCandidateGenerator``
(a draft model, ``assistant_model``), greedy or sampling (speculative sampling, ``speculative``), with
``generate``'s tokens.

Each step ``generate`` calls ``assistant_model.generate`` for up to ``num_assistant_tokens`` tokens (its cache
cropped to all but the last two tokens, which it reads again), stopping early at an EOS or, with
``assistant_confidence_threshold``, after a token its model is unsure of; the target model then verifies the draft
as in every draft-and-verify mode (``drafting``). Here the draft model always runs the buffer's ``draft`` steps on
a static cache rolled back by its fill counter, and the draft's length is a tensor: the tokens it would not have
drafted are never kept. The ``heuristic_transient`` schedule is a 0-d tensor in the loop's state.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
from transformers import LogitsProcessorList

from pytest_fullgraph.core.generation import UnsupportedGeneration
from pytest_fullgraph.core.model_facts import forward_parameters
from pytest_fullgraph.loop import processors as loop_processors
from pytest_fullgraph.loop import tracing as loop_tracing
from pytest_fullgraph.loop.modes import drafting, speculative
from pytest_fullgraph.loop.modes.table import DecodePlan, PlanRequest
from pytest_fullgraph.loop.steps import cache_length, last_scores, new_cache

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: ``num_assistant_tokens_schedule`` values the loop follows: the budget stays, or it moves by the steps' outcomes
#: within the call ("heuristic" also writes the budget back to the assistant's config after the call, host state
#: a program cannot write, so it is refused)
SCHEDULES = ("constant", "heuristic_transient")
#: Draft models ``generate`` does not draft with through ``AssistedCandidateGenerator`` (class-name prefixes).
OTHER_CANDIDATE_GENERATORS = ("Gemma4Assistant", "Gemma4UnifiedAssistant")


@dataclass(frozen=True)
class AssistSettings(drafting.DraftSettings):
    """What ``generate``'s ``AssistedCandidateGenerator`` reads from the assistant model's generation config."""

    #: the draft model (``assistant_model``)
    assistant: Any = None
    #: ``num_assistant_tokens`` at the start
    first_budget: int = 20
    #: whether the budget follows the ``heuristic_transient`` schedule (+2 after a fully kept draft, else -1)
    heuristic: bool = False
    #: ``assistant_confidence_threshold``: the draft stops after a token its model gives less probability (0: off)
    threshold: float = 0.0
    #: whether the draft model's forward takes ``position_ids`` and ``logits_to_keep``
    accepts_position_ids: bool = True
    logits_to_keep: bool = True
    #: the logits processors the draft model's ``generate`` runs (``draft_processors``); empty without any
    processors: Any = ()


class Assisted(NamedTuple):
    """The loop's state: the sequence buffer, its valid length, whether it still generates (0-d), and the draft's
    budget (``num_assistant_tokens`` now, 0-d)."""

    sequence: torch.Tensor
    length: torch.Tensor
    running: torch.Tensor
    budget: torch.Tensor


def assist_settings(request: PlanRequest) -> AssistSettings | None:
    """For a plan with a draft model, the settings ``AssistedCandidateGenerator`` takes from the assistant's
    generation config (its defaults filled in as ``generate`` fills them); the draft buffer holds the most tokens a
    step can draft. The draft's processors are built from the target's (``draft_processors``)."""
    assistant, config, max_new_tokens, processors = (request.assistant, request.config, request.max_new_tokens,
                                                     request.processors)
    if assistant is None:
        return None
    own = assistant.generation_config
    defaults = own._get_default_generation_params()
    budget = int(own.num_assistant_tokens if own.num_assistant_tokens is not None
                 else defaults["num_assistant_tokens"])
    schedule = own.num_assistant_tokens_schedule or defaults["num_assistant_tokens_schedule"]
    threshold = own.assistant_confidence_threshold
    threshold = float(defaults["assistant_confidence_threshold"] if threshold is None else threshold)
    if schedule not in SCHEDULES:
        raise UnsupportedGeneration(f"assisted decoding with num_assistant_tokens_schedule={schedule!r}: "
                                    + ("it writes the budget back to the assistant's generation config after the "
                                       "call, host state one program cannot write" if schedule == "heuristic"
                                       else "a schedule this loop does not know")
                                    + f"; supported: {', '.join(SCHEDULES)}")
    # a step drafts at most the tokens left before max_length, less the one the target adds
    most = max_new_tokens - 1 if schedule != "constant" else min(budget, max_new_tokens - 1)
    parameters = forward_parameters(assistant)
    return AssistSettings(max(most, 1), int(config.max_length), assistant=assistant, first_budget=budget,
                          heuristic=schedule != "constant", threshold=threshold,
                          accepts_position_ids="position_ids" in parameters,
                          logits_to_keep="logits_to_keep" in parameters,
                          processors=draft_processors(assistant, config, processors, request.input_ids)
                          if len(processors) > 0 else ())


def check_candidates(config: Any, assistant: Any, mode: str) -> None:
    """Refuse a draft model that ``generate`` does not draft with through ``AssistedCandidateGenerator``."""
    if assistant is not None and type(assistant).__name__.startswith(OTHER_CANDIDATE_GENERATORS):
        raise UnsupportedGeneration(f"fullgraph_generate does not support assistant_model={type(assistant).__name__}"
                                    ": generate drafts with it from the target's shared key-value states "
                                    "(SinglePositionMultiTokenCandidateGenerator); supported: a causal LM draft")


def draft_processors(assistant: PreTrainedModel, config: Any, processors: Any, input_ids: torch.Tensor) -> Any:
    """The processors the draft model's ``generate`` runs, built by its own ``_get_logits_processor`` as
    ``AssistedCandidateGenerator`` has it build them: from the target's config without ``min_length``, handed the
    target's processors. transformers (5.24) merges those before it appends the warpers of the config, so the
    draft runs the target's warpers and then the same warpers again (a temperature of 0.7 twice: the draft samples
    at 0.49; docs/upstream/assisted_draft_warpers_twice.py); the loop runs what ``generate`` runs."""
    from transformers.utils import logging

    draft_config = copy.deepcopy(config)
    draft_config.min_length, draft_config.min_new_tokens = None, None
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # "a custom logits processor ... will take precedence": what the draft does too
    try:
        built = cast(Any, assistant)._get_logits_processor(
            generation_config=draft_config, input_ids_seq_length=int(input_ids.shape[1]), encoder_input_ids=input_ids,
            logits_processor=LogitsProcessorList(processors), device=input_ids.device, model_kwargs={})
    finally:
        logging.set_verbosity(verbosity)
    loop_tracing.prepare_views(*built)
    return built


def check_assisted(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, cache: Any, loop: str) -> None:
    """Refuse, naming it, what this loop does not do with a draft model (``generate`` refuses a batch too)."""
    settings = plan.settings(AssistSettings)
    if int(input_ids.shape[0]) != 1:
        raise UnsupportedGeneration(f"assisted decoding takes one prompt, as generate's does (got batch "
                                    f"{int(input_ids.shape[0])})")
    if plan.config.min_length:
        raise UnsupportedGeneration(f"assisted decoding with min_length={plan.config.min_length} (or min_new_tokens):"
                                    " generate hands the draft model's generate a min_new_tokens of its own each "
                                    "step; supported: every other logits processor the loop runs")
    loop_processors.check_processors([*plan.processors, *settings.processors], "assisted decoding", "")
    if settings.threshold > 0 and _sklearn_installed():
        raise UnsupportedGeneration("assisted decoding with assistant_confidence_threshold="
                                    f"{settings.threshold} where scikit-learn is installed: generate then moves "
                                    "the threshold by a ROC curve on the host after every step; set the assistant's "
                                    "assistant_confidence_threshold=0 or uninstall scikit-learn")
    drafting.check_rollback(model, cache, "assisted decoding")
    drafting.check_rollback(settings.assistant, draft_cache(plan, input_ids, loop),
                            "assisted decoding's draft model")


def _sklearn_installed() -> bool:
    from transformers.utils import is_sklearn_available

    return bool(is_sklearn_available())


class Draft(NamedTuple):
    """A step's draft: the buffer (``settings.draft`` tokens, those past ``length`` arbitrary), how many were
    drafted, and the draft model's scores for each (``draft x vocab``, float32), which speculative sampling reads."""

    tokens: torch.Tensor
    length: torch.Tensor
    scores: torch.Tensor


def draft(settings: AssistSettings, state: Assisted, eos: torch.Tensor | None, cache: Any, mask: torch.Tensor,
          pads: torch.Tensor, max_length: Any, prompt: torch.Tensor | None = None, sample: bool = False) -> Draft:
    """``AssistedCandidateGenerator.get_candidates``: the draft model's tokens, greedy or (``sample``) drawn as
    its ``generate`` draws them, one draw per token it drafts (``speculative.sample_draft_token``), from its
    scores after its processors (``settings.processors``: built from the target's, ``draft_processors``), each
    seeing the sequence and the tokens drafted so far. ``prompt`` on the first step, which reads
    the prompt; later steps read the sequence's last two tokens again, as ``generate``'s cropped cache makes it."""
    budget = torch.minimum(state.budget, max_length - state.length - 1).clamp(min=0)
    if prompt is not None:
        chunk, begin = prompt, torch.zeros((), dtype=torch.long, device=prompt.device)
    else:
        begin = state.length - 2
        drafting.roll_back(cache, begin)  # the crop: the draft's cache holds the tokens before the last two
        chunk = state.sequence.index_select(1, begin + torch.arange(2, device=begin.device))
    tokens, stops, all_scores = [], [], []
    active = (budget > 0) & state.running  # generate calls no draft model when nothing may be drafted
    processors = settings.processors
    sequence = state.sequence  # as the draft's generate sees it: the tokens drafted so far written after it
    for index in range(settings.draft):
        scores = _draft_scores(settings, chunk, begin, cache, mask, pads, max_length)
        if len(processors) > 0:
            scores = loop_processors.process(processors, sequence, state.length + index, scores)
        token = speculative.sample_draft_token(scores, active) if sample else torch.argmax(scores, dim=-1)
        stop = torch.zeros_like(token, dtype=torch.bool)
        if eos is not None:
            stop = stop | torch.isin(token, eos)
        if settings.threshold > 0:  # ConfidenceCriteria: the token's probability under the draft model
            stop = stop | (torch.softmax(scores, dim=-1).gather(1, token[:, None])[:, 0] < settings.threshold)
        if len(processors) > 0:
            sequence = sequence.index_copy(1, (state.length + index).reshape(1), token[:, None])
        tokens.append(token)
        stops.append(stop)
        all_scores.append(scores)
        active = active & ~stop[0] & (len(tokens) < budget)
        begin = begin + chunk.shape[1]
        chunk = token[:, None]
    stopped = torch.cat(stops)
    drafted = torch.where(stopped.any(), torch.argmax(stopped.long()) + 1, settings.draft)
    return Draft(torch.cat(tokens), torch.minimum(drafted, budget), torch.cat(all_scores))


def _draft_scores(settings: AssistSettings, chunk: torch.Tensor, begin: torch.Tensor, cache: Any,
                  mask: torch.Tensor, pads: torch.Tensor, max_length: Any) -> torch.Tensor:
    """The draft model's next-token scores after ``chunk`` (its first position at ``begin``; slots past
    ``max_length``, drafted but never kept, at the last position: ``drafting.chunk_positions``), in float32."""
    kwargs: dict[str, Any] = {"use_cache": True}
    if settings.accepts_position_ids:
        kwargs["position_ids"] = drafting.chunk_positions(begin, chunk, pads, max_length)
    if settings.logits_to_keep:
        kwargs["logits_to_keep"] = 1
    return last_scores(settings.assistant(input_ids=chunk, cache=cache, attention_mask=mask, **kwargs).logits)


def _step(model: PreTrainedModel, plan: DecodePlan, settings: AssistSettings, mask: torch.Tensor, pads: torch.Tensor,
          state: Assisted, caches: tuple[Any, ...], max_length: Any, prompt: torch.Tensor | None) -> Assisted:
    """One draft-and-verify step (a ``drafting.Step`` once the first five are bound): the draft model drafts, the
    target verifies and keeps (``drafting.verify``), and the schedule moves the budget by whether the whole draft
    was kept."""
    cache, draft_cache = caches
    drafted = draft(settings, state, plan.eos, draft_cache, mask, pads, max_length, prompt, plan.do_sample)
    tokens, count = drafted.tokens, drafted.length
    select = partial(speculative.speculative_selection, draft_scores=drafted.scores, running=state.running) \
        if plan.do_sample else drafting.greedy_selection
    kept = drafting.verify(model, plan, settings, drafting.State(state.sequence, state.length, state.running), tokens,
                           count, cache, mask, pads, max_length, prompt, select)
    budget = state.budget.clone()  # a while_loop body may not return its input itself
    if settings.heuristic:
        whole = kept.length - state.length - 1 == count
        budget = torch.where(state.running, torch.where(whole, budget + 2, (budget - 1).clamp(min=1)), budget)
    return Assisted(*kept, budget)


def initialize_before_draws(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor,
                            mask: torch.Tensor, pads: torch.Tensor, cache: Any) -> None:
    """Speculative sampling's draws sit in ``torch.cond``s, and dynamo (torch 2.13) loses an attribute first set
    after a ``cond`` on an object made before it in the traced frame: the target's cache layers, which set their
    sizes on their first update, after the first step's draft draws ("'StaticLayer' object has no attribute
    'batch_size'", strict export). Traced, the target reads the prompt once first, and the cache is rolled back;
    eager runs skip it."""
    if plan.do_sample and loop_tracing.traced():
        origin = torch.zeros_like(pads[0, 0])
        positions = drafting.chunk_positions(origin, input_ids, pads)
        drafting.verified_logits(model, plan, input_ids, positions, mask, cache, 1)
        drafting.roll_back(cache, origin)


def draft_cache(plan: DecodePlan, input_ids: torch.Tensor, loop: str) -> Any:
    """The draft model's own cache, made inside the loop (so an exported program makes its own), as long as the
    target's: the draft writes up to its buffer past the last kept token too."""
    return new_cache(plan.settings(AssistSettings).assistant, plan, cache_length(input_ids, plan), loop)


def _begin(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any,
           loop: str) -> tuple[drafting.Step, Assisted, tuple[Any, Any]]:
    """Either form's start: the step, the state before it (the budget at ``num_assistant_tokens``) and both caches."""
    settings = plan.settings(AssistSettings)
    state, mask, pads = drafting.start(settings, input_ids, attention_mask)
    budget = torch.full((), settings.first_budget, dtype=torch.long, device=input_ids.device)
    caches = (cache, draft_cache(plan, input_ids, loop))
    initialize_before_draws(model, plan, input_ids, mask, pads, cache)
    return partial(_step, model, plan, settings, mask, pads), Assisted(*state, budget), caches


def assisted_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Assisted decoding unrolled (``drafting.unrolled_loop``)."""
    step, state, caches = _begin(model, plan, input_ids, attention_mask, cache, "unrolled")
    max_length = plan.settings(AssistSettings).max_length
    return drafting.unrolled_loop(step, state, caches, input_ids, max_length, plan.max_new_tokens)


def assisted_while_loop(model: PreTrainedModel, plan: DecodePlan, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor, cache: Any,
                        limit: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Assisted decoding in the ``while`` form (``drafting.while_loop``), carrying both models' caches, ending at
    ``limit`` tokens when given."""
    step, state, caches = _begin(model, plan, input_ids, attention_mask, cache, "while")
    settings = plan.settings(AssistSettings)
    max_length = settings.max_length if limit is None else input_ids.shape[1] + limit
    return drafting.while_loop(step, state, caches, input_ids, max_length)


#: Assisted decoding's row in the mode table; an exported program holds the draft model (its weights are the
#: program's too).
MODE = drafting.row("assisted", "assisted decoding", plan=assist_settings, check=check_assisted,
                    check_config=check_candidates,
                    models=lambda plan: {"assistant": plan.settings(AssistSettings).assistant},
                    loops={"unrolled": assisted_loop, "while": assisted_while_loop})
