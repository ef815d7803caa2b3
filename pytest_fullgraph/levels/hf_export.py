"""A reference host loop for programs transformers' own export paths produce, and those paths' runs.

transformers' exporters (``transformers.exporters``) export a model's forward as a ``prefill`` and a ``decode``
program; the caller writes the loop. ``host_loop`` is that loop, written once so every path is judged alike: it
feeds each forward what ``generate`` fed it at that step (``GenerateSteps``: the masks, positions and cache
``generate`` built, recorded from a run with a static cache), with the token chosen from the previous step's
logits. Greedy only: the programs return logits, and sampling would be the host's, not the export's. Driven
with the eager forward it must give ``generate``'s tokens (the loop is right); driven with a path's programs,
any difference is the path's.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.generation import UnsupportedGeneration, generate_fn
from pytest_fullgraph.core.model_facts import cache_taking_parameters
from pytest_fullgraph.core.results import add_note

if TYPE_CHECKING:
    import torch
    from torch.utils._pytree import TreeSpec
    from transformers import GenerationConfig, PreTrainedModel

#: A forward the host loop calls: keyword arguments as ``generate`` passes them; the model's output back.
Forward = Callable[..., Any]


@dataclass
class GenerateSteps:
    """What ``generate`` fed the forward at each step (tensors and the cache only), and its tokens."""

    steps: list[dict[str, Any]]
    sequences: torch.Tensor
    pad_token_id: int
    eos_token_ids: tuple[int, ...]
    #: the cache as ``generate`` handed it to the first forward, before anything filled it
    initial_cache: Any = None

    @property
    def prompt(self) -> torch.Tensor:
        return self.sequences[:, :self.steps[0]["input_ids"].shape[1]]


def refuse_unless_greedy(config: GenerationConfig, path: str) -> None:
    """The host loop picks the top logit and nothing else: other decoding is refused by name (a skip)."""
    from transformers.generation.configuration_utils import GenerationMode

    mode = config.get_generation_mode()
    if mode != GenerationMode.GREEDY_SEARCH:
        raise UnsupportedGeneration(f"{path} is checked with greedy decoding (its programs return logits; "
                                    f"{mode.value} would be the host's work), not {mode.value}")
    processors = [name for name in ("repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "sequence_bias",
                                    "min_length", "min_new_tokens", "suppress_tokens", "begin_suppress_tokens",
                                    "forced_bos_token_id", "forced_eos_token_id", "exponential_decay_length_penalty",
                                    "guidance_scale", "watermarking_config", "renormalize_logits",
                                    "remove_invalid_values", "stop_strings", "max_time")
                  if getattr(config, name, None) not in (None, False, 1.0, 0, [])]
    if processors:
        raise UnsupportedGeneration(f"{path} is checked with plain greedy decoding; {', '.join(processors)} would "
                                    "be the host loop's logits processing, not the exported program's")


@contextmanager
def _recorded_forwards(model: PreTrainedModel) -> Iterator[list[dict[str, Any]]]:
    """Every forward call's keyword arguments while the block runs (positional ones bound to their names)."""
    original = model.forward
    signature = inspect.signature(original)
    calls: list[dict[str, Any]] = []

    @functools.wraps(original)  # generate reads the forward's signature to decide what to pass
    def recording(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs).arguments
        call = {**{k: v for k, v in bound.items() if k != "kwargs"}, **bound.get("kwargs", {})}
        if not calls:  # unfilled yet: the cache a host loop starts from
            call["initial_cache"] = copy.deepcopy(call.get("cache"))
        calls.append(call)
        return original(*args, **kwargs)

    own = vars(model).get("forward")
    model.forward = recording
    try:
        yield calls
    finally:
        if own is None:
            del model.forward  # the class's forward again
        else:
            model.forward = own


def generate_steps(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig) -> GenerateSteps:
    """Run ``generate`` with ``config`` (a static cache) and record what it fed each step. A model whose forward
    takes no cache has no prefill and decode to export: refused by name, as our loop refuses it."""
    import torch

    cache_taking_parameters(model)
    with torch.no_grad(), _recorded_forwards(model) as calls:
        sequences = generate_fn(model)(**inputs, generation_config=config)
    initial_cache = calls[0].pop("initial_cache") if calls else None
    steps = [{name: value for name, value in call.items() if name == "cache" or _holds_tensors(value)}
             for call in calls]
    eos = config.eos_token_id
    eos_ids = tuple(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return GenerateSteps(steps, sequences, int(config.pad_token_id or 0), eos_ids, initial_cache)


def _holds_tensors(value: Any) -> bool:
    """A forward input the programs take: a tensor, or a container (hybrid models' masks by layer type, whose
    entries may be None where a layer type needs none); Python values (``use_cache``, ``logits_to_keep``) are
    constants of the exported programs."""
    return value is not None and not isinstance(value, (bool, int, float, str))


def host_loop(prefill: Forward, decode: Forward, recorded: GenerateSteps, cache: Any) -> torch.Tensor:
    """Greedy generation as ``generate`` drives the forward: step ``k`` gets what ``generate`` passed at step
    ``k``, with this loop's own token and ``cache`` (a fresh one, shaped as the programs were exported with).
    Rows that emit an EOS get the pad token after it, as ``generate`` pads them."""
    import torch

    prompt = recorded.prompt
    running = torch.ones(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    chosen: list[torch.Tensor] = []
    output: Any = None
    for index, recorded_step in enumerate(recorded.steps):
        carried = output is not None and getattr(output, "cache", None) is not None
        step = {**recorded_step, "cache": output.cache if carried else cache}
        if index:
            step["input_ids"] = chosen[-1][:, None]
        try:
            output = (decode if index else prefill)(**step)
        except Exception as error:
            if index and not carried:
                add_note(error, "the previous step's outputs hold no cache, so the loop passed on the cache it started "
                                "with, as generate does (the eager forward fills it in place)")
            raise
        token = output.logits[:, -1].argmax(-1)
        token = torch.where(running, token, torch.full_like(token, recorded.pad_token_id))
        running &= ~torch.isin(token, torch.tensor(recorded.eos_token_ids, dtype=token.dtype))
        chosen.append(token)
    return torch.cat([prompt, torch.stack(chosen, dim=1)], dim=1)


def fresh_cache(recorded: GenerateSteps) -> Any:
    """A copy of the cache ``generate`` started from, unfilled, as the programs were exported with it."""
    return copy.deepcopy(recorded.initial_cache)


#: how many of the cache's differing values a refusal's note names
_SHOWN = 3


@dataclass
class CheckedRunner:
    """A back end's runner as the host loop calls it. A runner refusing the loop's cache gets a note naming the
    Python values of the cache that differ from the program's input spec (recorded at export); with ``refit`` the
    cache's tensors are fed under the exported spec instead, as ONNX's and ExecuTorch's programs take them (leaves
    only): the cross-check of their programs against torch.export's."""

    runner: Any
    name: str
    refit: bool = False

    def __call__(self, **kwargs: Any) -> Any:
        import torch.utils._pytree as pytree

        cache = kwargs.get("cache")
        if self.refit and self.exported_cache is not None and cache is not None:
            kwargs["cache"] = pytree.tree_unflatten(pytree.tree_leaves(cache), self.exported_cache)
        try:
            return self.runner(**kwargs)
        except Exception as error:
            exported = self.exported_cache
            differences = (spec_differences(exported, pytree.tree_flatten(cache)[1])
                           if exported is not None and cache is not None else [])
            if differences:
                more = f"; and {len(differences) - _SHOWN} more" if len(differences) > _SHOWN else ""
                add_note(error, f"the {self.name} program's input spec holds the cache's Python values as they were "
                                f"at export, and the cache the loop passes differs: "
                                f"{'; '.join(differences[:_SHOWN])}{more}")
            raise

    @functools.cached_property
    def exported_cache(self) -> TreeSpec | None:
        """Read once, when needed: a timed loop (``bench/export_paths.py``) pays nothing for it."""
        return _exported_cache_spec(self.runner)


def _exported_cache_spec(runner: Any) -> TreeSpec | None:
    """The cache's part of a runner's input spec (transformers' export metadata); None when it has none."""
    from transformers.exporters.metadata import load_treespec

    metadata = getattr(runner, "metadata", None)
    if metadata is None or not getattr(metadata, "in_spec", None):
        return None
    kwargs_spec = load_treespec(metadata.in_spec).children_specs[1]
    names = list(kwargs_spec.context or ())
    return kwargs_spec.children_specs[names.index("cache")] if "cache" in names else None


def spec_differences(exported: TreeSpec, given: TreeSpec) -> list[str]:
    """What differs between two pytree specs, as "StaticSlidingWindowLayer.cumulative_length_int 8 at export, 9
    now" (each difference once, however many layers share it)."""
    found: list[str] = []
    if _type_name(exported.type) != _type_name(given.type):  # by name: reading a spec back may make its own class
        found.append(f"{getattr(given.type, '__name__', given.type)} where "
                     f"{getattr(exported.type, '__name__', exported.type)} was exported")
        return found
    if exported.context != given.context:
        found += _context_differences(exported.context, given.context, getattr(exported.type, "__name__", ""))
    if len(exported.children_specs) == len(given.children_specs):
        for ours, theirs in zip(exported.children_specs, given.children_specs, strict=True):
            found += spec_differences(ours, theirs)
    else:
        found.append(f"{len(given.children_specs)} children where {len(exported.children_specs)} were exported")
    return list(dict.fromkeys(found))


def _type_name(kind: Any) -> str:
    return f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', kind)}"


def _context_differences(exported: Any, given: Any, path: str) -> Iterator[str]:
    """transformers' exporter writes an object's context as ``{"p": "module:Class", "s": {field: value}}``: a
    difference is named by the class and field that hold it."""
    if isinstance(exported, dict) and isinstance(given, dict):
        kind = exported.get("p")
        if isinstance(kind, str) and kind == given.get("p"):
            yield from _context_differences(exported.get("s"), given.get("s"), kind.rpartition(":")[2])
            return
        for key in dict.fromkeys([*exported, *given]):
            yield from _context_differences(exported.get(key), given.get(key), f"{path}.{key}" if path else str(key))
    elif isinstance(exported, list) and isinstance(given, list) and len(exported) == len(given):
        for ours, theirs in zip(exported, given, strict=True):
            yield from _context_differences(ours, theirs, path)
    elif exported != given:
        yield f"{path} {exported!r} at export, {given!r} now"
