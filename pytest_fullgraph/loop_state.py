"""What the body of the ``while_loop`` form carries from step to step: the cache's tensors, and logits
processors that see a full-size sequence buffer with its valid length.

A ``while_loop`` body is traced once and may not mutate tensors it captured. So the cache is split in two: its
tensors are loop state, and its layer objects are templates. Each step copies the templates, gives the copies
clones of the carried tensors (which the layers' own ``update`` code then changes in place, as in eager
generation) and returns the updated tensors. Whatever a layer keeps in Python must not change between decode
steps: transformers' static sliding-window layer counts its fill in a Python int and rolls its buffer once
full, so before prefill it is replaced by a full-length layer of the same kind that lets the sliding-window
attention mask do the windowing (keys outside the window are masked out instead of evicted).

Processors are traced once too, on the loop's full-size sequence buffer: those that read only the scores run
unchanged, those that read which tokens occurred see the unused tail filled with the last valid token (a
token already present, so the set they read is unchanged), and those that read the sequence's length are
re-expressed with the loop's length tensor. Anything else raises ``UnsupportedGeneration`` naming it.
"""

from __future__ import annotations

import builtins
import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

# module-level: torch 2.11's dynamo refuses an import inside traced code (GB0022, "Bad import result"),
# and strict export traces the cache's construction
from transformers.cache_utils import LinearAttentionAndStaticFullAttentionLayer, StaticCache, StaticLayer

from pytest_fullgraph.generation import UnsupportedGeneration


def _length_when_asked(layer: Any) -> Any:
    """The sequence length as the sliding layer reports it: the value when asked, not a live counter.

    transformers' static sliding layer answers ``get_seq_length`` with a Python int, while the full static layer
    answers with its counter tensor, which its ``update`` then increments in place. A model that asks for the
    length before updating the cache and uses it after (inkling's query offset for its relative-position bias)
    sees the old length from the one and the new from the other, so the replacement must answer as the layer it
    replaces does: a copy, taken at the call.
    """
    if not layer.is_initialized:
        return 0
    return layer.cumulative_length.clone()


class WholeSlidingLayer(StaticLayer):
    """A sliding-window layer that keeps every position: the mask, not eviction, limits attention to the window.

    Its Python state is constant (no fill counter, no roll), so one traced ``while_loop`` body serves every step.
    """

    is_sliding = True
    get_seq_length = _length_when_asked


class WholeHybridSlidingLayer(LinearAttentionAndStaticFullAttentionLayer):
    """``WholeSlidingLayer`` for hybrid layers that carry linear-attention states beside sliding attention."""

    is_sliding = True
    get_seq_length = _length_when_asked


#: Replacements made before prefill, by the name of transformers' layer class.
WHOLE_LAYERS: dict[str, type] = {
    "StaticSlidingWindowLayer": WholeSlidingLayer,
    "LinearAttentionAndStaticSlidingWindowAttentionLayer": WholeHybridSlidingLayer,
}
#: Layer classes whose Python state stays constant across decode steps (what changes is in tensors).
CARRIED_LAYERS = frozenset({
    "StaticLayer", "StaticIndexedLayer", "LinearAttentionLayer", "LinearAttentionAndStaticFullAttentionLayer",
    "DummyLayer", *(whole.__name__ for whole in WHOLE_LAYERS.values()),
})


def loop_cache(model: Any, max_cache_len: int) -> Any:
    """The static cache ``generate`` would build, with each layer that keeps Python counters replaced (see
    ``WHOLE_LAYERS``); any layer class not known to be carriable raises ``UnsupportedGeneration``."""
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    layers = []
    for layer in cache.layers:
        name = type(layer).__name__
        if name in WHOLE_LAYERS:
            kwargs = {"number_of_states": layer.number_of_states} if hasattr(layer, "number_of_states") else {}
            layer = WHOLE_LAYERS[name](max_cache_len=max_cache_len, **kwargs)
        elif name not in CARRIED_LAYERS:
            raise UnsupportedGeneration(f"loop='while' cannot carry cache layer {name} of {type(model).__name__} "
                                        f"as loop state (carried: {', '.join(sorted(CARRIED_LAYERS))})")
        layers.append(layer)
    cache.layers = layers
    prepare_views(cache, *layers)  # the stand-ins CarriedCache.rebuild makes in each step
    return cache


def _kernel_routers(model: Any) -> dict[Any, Any]:
    """The classes (with their wrapped ``forward``) whose instances in ``model`` route kernel functions per call.

    transformers 5.25 decorates modules (attention, short convolutions) with the ``kernels`` package's
    ``use_kernelized_func``: the instance gets ``_kernel_funcs`` and the class a ``forward`` named ``new_forward``
    that sets a context variable (a global attribute while compiling) around the real forward.
    """
    routers: dict[Any, Any] = {}
    for module in model.modules():
        funcs = module.__dict__.get("_kernel_funcs")
        if funcs is None:
            continue
        owner = next(cls for cls in type(module).__mro__ if "forward" in cls.__dict__)
        if _unrouted(owner.__dict__["forward"]) is owner.__dict__["forward"]:
            continue
        kernelized = sorted(name for name, func in funcs.items() if "forward" in vars(func))
        if kernelized:
            raise UnsupportedGeneration(
                f"loop='while' cannot run {type(module).__name__} with kernels.kernelize()'d functions "
                f"({', '.join(kernelized)}): their per-call routing sets a context variable, a side effect a "
                "while_loop body cannot hold; use loop='unrolled'")
        routers[owner] = owner.__dict__["forward"]
    return routers


def _unrouted(forward: Any) -> Any:
    """``forward`` without the routing wrappers around it (one per decoration; they may stack)."""
    while getattr(forward, "__code__", None) is not None and forward.__code__.co_name == "new_forward" \
            and hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    return forward


class _IdleCollector:
    """transformers' output collector (``utils.output_capturing._active_collector``) for forwards that collect
    nothing, as the loop's always do (it refuses ``output_hidden_states`` and ``output_attentions``).

    Every decorated forward sets the collector and resets it after, which writes the attributes of a module-level
    object: a side effect torch 2.11's ``while_loop`` body refuses (GB0067, "Attempted to mutate
    CompileableContextVar"). With nothing to collect, the hooks read nothing, so the stand-in skips the writes;
    a forward that does ask for outputs still goes to the real collector (and its write is refused, by name).
    """

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    def get(self) -> Any:
        return None  # only empty collections were set here: the hooks have nothing to record

    def set(self, value: Any) -> Any:
        return self.collector.set(value) if value else _IDLE

    def reset(self, token: Any) -> None:
        if token is not _IDLE:
            self.collector.reset(token)


_IDLE = object()


@contextlib.contextmanager
def output_collector_idle(loop: str) -> Iterator[None]:
    """For the ``while`` form, transformers' output collector replaced by ``_IdleCollector``; restored on exit."""
    try:
        from transformers.utils import output_capturing
    except ImportError:  # a release without it has nothing to lift
        yield
        return
    collector = getattr(output_capturing, "_active_collector", None)
    if loop != "while" or collector is None:
        yield
        return
    output_capturing._active_collector = _IdleCollector(collector)  # type: ignore[assignment]
    try:
        yield
    finally:
        output_capturing._active_collector = collector


#: Python's own ``min`` and ``max``, as this module found them on import.
_PYTHON_MIN_MAX = (builtins.min, builtins.max)


@contextlib.contextmanager
def python_min_max() -> Iterator[None]:
    """Python's ``min`` and ``max`` while a ``while`` program is exported without strictness.

    Non-strict export replaces the builtins with a wrapper of its own that dynamo, tracing the loop's body,
    refuses: torch 2.9 as "marked as skipped" (``_tensor_min_max``), 2.15.0 as "op min not reachable in operator
    or builtins"; every processor that calls ``min`` (top-k) broke the exported ``while`` form. The body is
    traced, so dynamo handles the real builtins itself; when nothing replaced them (other releases, or strict
    export, where this runs under dynamo) nothing changes.
    """
    replaced = (builtins.min, builtins.max)
    if replaced == _PYTHON_MIN_MAX:
        yield
        return
    builtins.min, builtins.max = _PYTHON_MIN_MAX
    try:
        yield
    finally:
        builtins.min, builtins.max = replaced


@contextlib.contextmanager
def traceable_loop(model: Any, loop: str) -> Iterator[None]:
    """What the ``while`` form lifts while it is traced: the kernel routing wrapper and the output collector's
    writes (see both); nothing for the unrolled form."""
    with kernel_routing_lifted(model, loop), output_collector_idle(loop):
        yield


@contextlib.contextmanager
def kernel_routing_lifted(model: Any, loop: str) -> Iterator[None]:
    """For the ``while`` form, run modules' own ``forward`` instead of the ``kernels`` routing wrapper around it.

    The wrapper's context-variable write is a side effect that a ``while_loop`` body refuses (``HOP: Unsafe side
    effect``, GB0067), so on transformers 5.25 every model's while form broke in its attention. When no function
    was kernelized (checked: ``_kernel_routers`` refuses otherwise) the routing picks each function's reference
    implementation, which the wrapped forward calls anyway, so lifting the wrapper changes no token. The classes
    are restored on exit; the unrolled form, whose side effects dynamo replays, is left as it is.
    """
    routers = _kernel_routers(model) if loop == "while" else {}
    for owner, forward in routers.items():
        owner.forward = _unrouted(forward)
    try:
        yield
    finally:
        for owner, forward in routers.items():
            owner.forward = forward


class _View:
    """A stand-in for an object inside a traced step: attribute reads fall through to the original, writes stay
    on the stand-in. What ``copy.copy`` gives, in a form every supported dynamo traces: torch 2.11 marks
    ``copy.copy`` as skipped and cannot list an object's attributes (``vars(obj).items()``, GB0156)."""

    def __init__(self, original: Any) -> None:
        self._original = original

    def __getattr__(self, name: str) -> Any:
        if name == "_original":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._original, name)


#: The stand-in class of each class, made on the host: dynamo cannot create a class inside a graph.
_VIEW_CLASSES: dict[type, type] = {}


def prepare_views(*objects: Any) -> None:
    """Make the stand-in classes ``view`` will need for ``objects``, before tracing (on the host)."""
    for obj in objects:
        cls = type(obj)
        if cls not in _VIEW_CLASSES:
            # the same name: messages and name-keyed tables read the stand-in as the class it stands for
            _VIEW_CLASSES[cls] = type(cls.__name__, (_View, cls), {"__qualname__": cls.__qualname__,
                                                                    "__module__": cls.__module__})


def view(obj: Any) -> Any:
    """A write-isolated stand-in for ``obj`` (see ``_View``); its class must come from ``prepare_views``, which
    is called here too when run eagerly."""
    if type(obj) not in _VIEW_CLASSES:
        prepare_views(obj)
    return _VIEW_CLASSES[type(obj)](obj)


#: Attributes of transformers' cache layers that change while decoding, by name (older dynamo cannot list an
#: object's attributes): tensors, and dicts of per-state tensors (linear attention's conv and recurrent states).
#: ``tests/test_loop_state.py`` checks that these cover every tensor each carried layer class holds after prefill.
CARRIED_TENSORS = ("keys", "values", "cumulative_length", "indexer_keys", "indexer_cumulative_length",
                   "indexer_position_ids")
CARRIED_TENSOR_DICTS = ("conv_states", "recurrent_states")
#: Python dicts a layer may write into during a step (linear attention's per-state flags): each step gets copies,
#: so the template's stay as prefill left them.
STEP_DICTS = ("is_conv_states_initialized", "is_recurrent_states_initialized", "has_previous_state",
              "conv_kernel_size")


@dataclass(frozen=True)
class _Slot:
    """Where one carried tensor lives in a layer: ``layer.attribute``, or ``layer.attribute[key]`` for the
    dicts of linear-attention states."""

    layer: int
    attribute: str
    key: Any = None
    in_dict: bool = False


class CarriedCache:
    """A prefilled cache split into loop state (``tensors``) and templates that ``rebuild`` a cache from it."""

    def __init__(self, cache: Any) -> None:
        self.template = cache
        self.slots: list[_Slot] = []
        for index, layer in enumerate(cache.layers):
            for attribute in CARRIED_TENSORS:
                if isinstance(getattr(layer, attribute, None), torch.Tensor):
                    self.slots.append(_Slot(index, attribute))
            for attribute in CARRIED_TENSOR_DICTS:
                states = getattr(layer, attribute, None)
                if isinstance(states, dict):
                    self.slots.extend(_Slot(index, attribute, key, True) for key, item in states.items()
                                      if isinstance(item, torch.Tensor))

    def tensors(self, cache: Any | None = None) -> tuple[torch.Tensor, ...]:
        """The carried tensors of ``cache`` (default: the prefilled template), in slot order."""
        layers = (cache if cache is not None else self.template).layers
        return tuple(_read(layers[slot.layer], slot) for slot in self.slots)

    def rebuild(self, tensors: tuple[torch.Tensor, ...]) -> Any:
        """A cache for one step: stand-ins for the template layers holding clones of ``tensors`` (the layers
        update them in place; the clones belong to this step, so the loop's inputs stay untouched)."""
        layers = [view(layer) for layer in self.template.layers]
        for layer in layers:
            for attribute in (*CARRIED_TENSOR_DICTS, *STEP_DICTS):
                values = getattr(layer, attribute, None)
                if isinstance(values, dict):
                    setattr(layer, attribute, dict(values))  # the step must not write into the template's dict
        for slot, tensor in zip(self.slots, tensors, strict=True):
            if slot.in_dict:
                getattr(layers[slot.layer], slot.attribute)[slot.key] = tensor.clone()
            else:
                setattr(layers[slot.layer], slot.attribute, tensor.clone())
        cache = view(self.template)
        cache.layers = layers
        return cache


def _read(layer: Any, slot: _Slot) -> torch.Tensor:
    value = getattr(layer, slot.attribute)
    return value[slot.key] if slot.in_dict else value


#: Processors that read only the scores: traced once, they do in every step what they do in ``generate``.
SCORE_ONLY = frozenset({
    "TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "TopHLogitsWarper", "MinPLogitsWarper",
    "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper", "InfNanRemoveLogitsProcessor",
    "LogitNormalization", "SuppressTokensLogitsProcessor",
})
#: Processors that read which tokens the sequence holds, not its length or order.
TOKEN_SET = frozenset({"RepetitionPenaltyLogitsProcessor"})
#: Processors that read only the sequence's last tokens (transformers' tensorised sequence bias, of which bad
#: words are the -inf case): given a fixed-width window of them, as many as their longest prefix.
TAIL_WINDOW = frozenset({"SequenceBiasLogitsProcessor", "NoBadWordsLogitsProcessor"})


def _masked(scores: torch.Tensor, token_ids: torch.Tensor, when: torch.Tensor) -> torch.Tensor:
    """``scores`` with ``token_ids`` set to -inf where ``when`` holds (``generate``'s EOS suppression)."""
    vocab = torch.arange(scores.shape[-1], device=scores.device)
    return torch.where(torch.isin(vocab, token_ids.to(scores.device)) & when, -math.inf, scores)


def _forced(scores: torch.Tensor, token_ids: Any, when: torch.Tensor) -> torch.Tensor:
    """Every token -inf but ``token_ids`` (0) where ``when`` holds (``generate``'s forced BOS/EOS)."""
    forced = torch.full_like(scores, -math.inf)
    forced[:, token_ids] = 0
    return torch.where(when, forced, scores)


#: Processors that read the sequence's length, given the length (a 0-d tensor) instead of a sequence of it.
LENGTH_RULES: dict[str, Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "MinLengthLogitsProcessor": lambda p, length, scores: _masked(scores, p.eos_token_id, length < p.min_length),
    "MinNewTokensLengthLogitsProcessor": lambda p, length, scores: _masked(
        scores, p.eos_token_id, length - p.prompt_length_to_skip < p.min_new_tokens),
    "SuppressTokensAtBeginLogitsProcessor": lambda p, length, scores: _masked(
        scores, p.begin_suppress_tokens, length == p.begin_index),
    "ForcedEOSTokenLogitsProcessor": lambda p, length, scores: _forced(scores, p.eos_token_id,
                                                                       length == p.max_length - 1),
    "ForcedBOSTokenLogitsProcessor": lambda p, length, scores: _forced(scores, p.bos_token_id, length == 1),
    "ExponentialDecayLengthPenalty": lambda p, length, scores: _decay_penalty(p, length, scores),
}


def _decay_penalty(processor: Any, length: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """``ExponentialDecayLengthPenalty`` with the length a tensor: EOS scores raised by
    ``|score| * (factor ** (length - start) - 1)`` past the start. The power is taken in float64, as Python's
    ``pow`` takes it in ``generate``, then used at the scores' dtype as Python's float is."""
    eos = processor.eos_token_id.to(scores.device)
    steps = (length - processor.regulation_start).to(torch.float64)
    growth = (torch.tensor(processor.regulation_factor, dtype=torch.float64, device=scores.device) ** steps - 1)
    eos_scores = scores[:, eos]
    penalty = (eos_scores.abs() * growth.to(scores.dtype)).masked_fill(~torch.isfinite(eos_scores), 0.0)
    raised = scores.index_add(1, eos, penalty)
    return torch.where(length > processor.regulation_start, raised, scores)


def banned_ngrams(ngram_size: int, sequence: torch.Tensor, length: torch.Tensor | int,
                  scores: torch.Tensor) -> torch.Tensor:
    """``NoRepeatNGramLogitsProcessor`` on the device: every token that would complete an n-gram already in
    ``sequence[:, :length]`` is -inf. transformers builds a Python dict of n-grams per row on the host; here each
    earlier window is compared with the last n - 1 tokens at once, so the graph does not depend on the tokens."""
    width = sequence.shape[1]
    positions = torch.arange(width, device=sequence.device)
    if ngram_size == 1:
        seen = (positions < length).expand_as(sequence)
        return scores.masked_fill(_token_hits(scores, sequence, seen), -math.inf)
    if width < ngram_size:
        return scores  # no n-gram fits yet (a static shape: the branch is taken at trace time)
    prefix = ngram_size - 1
    starts = positions[: width - prefix]
    tail = (length - prefix + torch.arange(prefix, device=sequence.device)).reshape(-1).clamp(min=0)
    last = sequence.index_select(1, tail)
    windows = sequence.unfold(1, prefix, 1)[:, : width - prefix]  # (batch, starts, prefix)
    # an n-gram counts once its last token is inside the valid length; the window ending at the tail is the
    # current prefix itself and completes nothing yet
    valid = starts + prefix < length
    matches = (windows == last[:, None, :]).all(-1) & valid
    return scores.masked_fill(_token_hits(scores, sequence[:, prefix:], matches), -math.inf)


def _token_hits(scores: torch.Tensor, tokens: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """A vocabulary mask of the ``tokens`` at the positions ``where`` holds (counted, so repeats and the
    positions left out cannot overwrite each other)."""
    counts = torch.zeros(scores.shape, dtype=torch.long, device=scores.device)
    counts.scatter_add_(1, tokens, where.long())
    return counts > 0


def process_unrolled(processors: Any, sequence: torch.Tensor, scores: torch.Tensor,
                     isolated: bool = False) -> torch.Tensor:
    """``processors(sequence, scores)`` for the unrolled loop, whose sequence has its true length: transformers'
    own code, but for processors that cannot be one graph as written (the n-gram ban builds Python dicts of
    the tokens), which run their device form.

    ``isolated``: run copies, so attribute writes stay out of the processors (the ``while`` form's prefill: a
    processor that re-assigns ``self.eos_token_id = self.eos_token_id.to(device)`` would otherwise hand the loop
    body a second name for one tensor, which ``while_loop`` refuses as input aliasing).
    """
    for processor in processors:
        if type(processor).__name__ == NGRAM:
            scores = banned_ngrams(processor.ngram_size, sequence, sequence.shape[1], scores)
        else:
            scores = (view(processor) if isolated else processor)(sequence, scores)
    return scores


def check_processors(processors: Any) -> None:
    """Refuse, naming it, a processor the loop cannot trace once for every step."""
    for processor in processors:
        name = type(processor).__name__
        if name not in SCORE_ONLY | TOKEN_SET | TAIL_WINDOW | set(LENGTH_RULES) | {NGRAM}:
            raise UnsupportedGeneration(f"loop='while' does not support {name}: it reads the growing sequence in "
                                        "a way one traced step cannot repeat; use loop='unrolled'")


def process(processors: Any, buffer: torch.Tensor, length: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """``processors(sequence, scores)`` where the sequence is ``buffer[:, :length]``, without slicing to a
    data-dependent shape."""
    visible: torch.Tensor | None = None
    for processor in processors:
        name = type(processor).__name__
        if name in SCORE_ONLY:
            scores = processor(buffer, scores)
        elif name in TOKEN_SET:
            if visible is None:
                last = buffer.index_select(1, (length - 1).reshape(1))
                visible = torch.where(torch.arange(buffer.shape[1], device=buffer.device) < length, buffer, last)
            # a stand-in made in the step: the processor's no-op device moves (attribute writes) stay in it
            scores = view(processor)(visible, scores)
        elif name in TAIL_WINDOW:
            scores = view(processor)(tail(buffer, length, _longest_prefix(processor)), scores)
        elif name == NGRAM:
            scores = banned_ngrams(processor.ngram_size, buffer, length, scores)
        else:
            scores = LENGTH_RULES[name](processor, length, scores)
    return scores


NGRAM = "NoRepeatNGramLogitsProcessor"


def _longest_prefix(processor: Any) -> int:
    return max([len(sequence) - 1 for sequence in processor.sequence_bias] + [1])


def tail(buffer: torch.Tensor, length: torch.Tensor, width: int, filler: int = -1) -> torch.Tensor:
    """The last ``width`` valid tokens of each row of a buffer, ``filler`` (no token) before the sequence's
    start."""
    indices = (length - width + torch.arange(width, device=buffer.device)).reshape(-1)
    tokens = buffer.index_select(1, indices.clamp(min=0))
    return torch.where(indices >= 0, tokens, filler)
