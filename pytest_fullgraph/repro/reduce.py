"""Shrinking a case while its script fails the same way, and running a script in this process to find out.

Each edit makes one thing smaller (fewer new tokens, no decode step, one layer, a narrower model, fewer heads, a
smaller vocabulary, one prompt row, shorter prompts); an edit is kept when the smaller script still meets the
recorded failure. Trying a script here is seconds (torch and transformers are imported already); only the script
that is written is run in a fresh process (``verify``).
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from pytest_fullgraph.core.timer import CheckTimeout, time_limit
from pytest_fullgraph.repro.case import Case, parameter_count, plain_config
from pytest_fullgraph.repro.source import parse_result

_ABSENT = object()
#: Config keys by what they size, as transformers' configs name them (top level and sub-configs alike).
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
WIDTH_KEYS = ("hidden_size", "d_model", "n_embd")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")
KV_HEAD_KEYS = ("num_key_value_heads",)
FEED_FORWARD_KEYS = ("intermediate_size", "dim_ff", "dff", "ffn_dim", "n_inner", "moe_intermediate_size",
                     "intermediate_size_mlp", "shared_expert_intermediate_size")
SMALL_VOCAB = 64
SMALL_FEED_FORWARD = 32


def _resized(values: Any, keys: tuple[str, ...], size: Callable[[int], int], lists: bool = False) -> Any:
    """``values`` with every int under ``keys`` resized, in sub-configs too; with ``lists``, the per-layer lists
    whose length was such a count cut to the new one (``layer_types``)."""
    if not isinstance(values, dict):
        return values
    result = {key: _resized(value, keys, size, lists) for key, value in values.items()}
    for key in keys:
        old = values.get(key)
        if isinstance(old, int) and not isinstance(old, bool) and size(old) != old:
            result[key] = size(old)
            if lists:
                for name, value in values.items():
                    if isinstance(value, list) and len(value) == old and name not in keys:
                        result[name] = value[: size(old)]
    return result


def _config_edit(name: str, keys: tuple[str, ...], size: Callable[[int], int], lists: bool = False,
                 also: tuple[tuple[str, ...], Callable[[int], int]] | None = None) -> Callable[[Case], Case | None]:
    def edit(case: Case) -> Case | None:
        config = _resized(case.config, keys, size, lists)
        if also is not None:
            config = _resized(config, *also)
        if config == case.config:
            return None
        before, after = _first(case.config, keys), _first(config, keys)
        return replace(case, config=config, reduced=(*case.reduced, f"{name} {before}→{after}"))

    return edit


def _first(values: Any, keys: tuple[str, ...]) -> Any:
    """The first of ``keys`` found, at the top or in a sub-config: what an edit's record names."""
    if not isinstance(values, dict):
        return None
    for key in keys:
        if key in values:
            return values[key]
    return next((found for value in values.values() if (found := _first(value, keys)) is not None), None)


def _fewer_tokens(case: Case) -> Case | None:
    fewest = 2 if case.decode_step else 1  # the decode step needs a cache slot after the prompt
    if "max_length" in case.generation or case.max_new_tokens <= fewest:
        return None
    return replace(case.with_tokens(fewest), reduced=(*case.reduced, f"tokens {case.max_new_tokens}→{fewest}"))


def _prefill_only(case: Case) -> Case | None:
    return replace(case, decode_step=False, reduced=(*case.reduced, "prefill only")) if case.decode_step else None


def _smaller_vocab(case: Case) -> Case | None:
    if case.vocab <= SMALL_VOCAB or (case.eos_token_id or 0) >= SMALL_VOCAB:
        return None
    config = _resized(case.config, ("vocab_size",), lambda size: SMALL_VOCAB if size == case.vocab else size)
    return replace(case, config=config, vocab=SMALL_VOCAB,
                   reduced=(*case.reduced, f"vocab {case.vocab}→{SMALL_VOCAB}"))


def _one_row(case: Case) -> Case | None:
    lengths = case.prompt_lengths
    if len(lengths) < 2 or len(set(lengths)) > 1:  # a padded batch needs its rows
        return None
    return replace(case, prompt_lengths=lengths[:1], reduced=(*case.reduced, f"batch {len(lengths)}→1"))


def _shorter_prompts(case: Case) -> Case | None:
    shorter = tuple(max(1, (length + 1) // 2) for length in case.prompt_lengths)
    if shorter == case.prompt_lengths:
        return None
    return replace(case, prompt_lengths=shorter, reduced=(*case.reduced, f"prompt {max(case.prompt_lengths)}"
                                                                         f"→{max(shorter)}"))


#: The edits in the order they are tried: those that make the script cheaper to run first.
EDITS: tuple[Callable[[Case], Case | None], ...] = (
    _prefill_only,
    _fewer_tokens,
    _config_edit("layers", LAYER_KEYS, lambda count: 1, lists=True),
    _config_edit("hidden", WIDTH_KEYS, lambda width: width // 2 if width >= 16 and width % 4 == 0 else width),
    _config_edit("heads", HEAD_KEYS, lambda heads: heads // 2 if heads % 2 == 0 else heads,
                 also=(KV_HEAD_KEYS, lambda heads: max(1, heads // 2))),
    _config_edit("feed-forward", FEED_FORWARD_KEYS, lambda size: min(size // 2, SMALL_FEED_FORWARD)
                 if size > SMALL_FEED_FORWARD else size),
    _smaller_vocab,
    _one_row,
    _shorter_prompts,
)


#: A config value by where it is: a top-level key, or a sub-config's key under it.
Path = tuple[str, ...]


def _without_keys(case: Case, paths: list[Path]) -> Case | None:
    """The case with the values at ``paths`` left to the config class (its defaults, or values it derives from the
    others, as a per-layer list from the layer count); None when the class refuses the config without them."""
    values = {key: dict(value) if isinstance(value, dict) else value for key, value in case.config.items()}
    for path in paths:
        holder = values if len(path) == 1 else values.get(path[0])
        if isinstance(holder, dict):
            holder.pop(path[-1], None)
    try:
        config = plain_config(case.config_class(**values))
    except Exception:  # a config that needs one of the values
        return None
    return replace(case, config=config)


def _differing(config: dict[str, Any], defaults: dict[str, Any]) -> list[Path]:
    """The values that differ from the defaults: a sub-config's by its own keys (the class fills in the rest)."""
    paths: list[Path] = []
    for key, value in config.items():
        default = defaults.get(key, _ABSENT)
        if isinstance(value, dict) and isinstance(default, dict):
            paths += [(key, name) for name, item in value.items() if item != default.get(name, _ABSENT)]
        elif value != default:
            paths.append((key,))
    return paths


def _no_larger(smaller: Case, case: Case) -> bool:
    """A reduction never grows the model: a sub-config put back at its defaults is a full-size model."""
    before, after = parameter_count(case), parameter_count(smaller)
    return after is not None and (before is None or after <= before)


def fewer_keys(case: Case, reproduces: Callable[[Case], bool], deadline: float) -> Case:
    """Config values put back to the class's defaults while the failure stays, halves first, then quarters, ...:
    the keys left are the ones the failure needs (or those the budget left untried)."""
    try:
        defaults = case.config_class().to_dict()
    except Exception:  # a config without defaults for everything: nothing to put back
        return case
    keys = _differing(case.config, defaults)
    size = max(1, len(keys) // 2)
    kept = list(keys)
    while size >= 1 and time.monotonic() < deadline:
        for start in range(0, len(kept), size):
            chunk = kept[start:start + size]
            smaller = _without_keys(case, chunk) if time.monotonic() < deadline else None
            if smaller is not None and _no_larger(smaller, case) and reproduces(smaller):
                case, kept = smaller, [key for key in kept if key not in chunk]
                break
        else:
            size //= 2
    dropped = len(keys) - len(kept)
    return replace(case, reduced=(*case.reduced, f"{dropped}/{len(keys)} values at defaults")) if dropped else case


def reduce(case: Case, template: str, reproduces: Callable[[Case], bool], budget_s: float,
           edits: tuple[Callable[[Case], Case | None], ...] = EDITS) -> Case:
    """The smallest case the edits reach that ``reproduces`` still accepts, within ``budget_s`` seconds; the
    decode step is the forward template's alone to drop."""
    started = time.monotonic()
    if template != "forward_compile":  # only the forward template runs a decode step of its own
        case = replace(case, decode_step=False)
    for edit in edits:
        if time.monotonic() - started > budget_s:
            break
        smaller = edit(case)
        if smaller is not None and _no_larger(smaller, case) and reproduces(smaller):
            case = smaller
    return fewer_keys(case, reproduces, started + budget_s)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers' and torch's warnings stay out of the command's output while scripts are tried."""
    loggers = [logging.getLogger(name) for name in ("transformers", "torch")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)  # dynamo logs the fake-tensor errors of a failing try at ERROR
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def run_here(source: str, name: str, timeout_s: float) -> tuple[int | None, dict[str, Any] | None, str]:
    """Run a script's text in this process as ``__main__``: (its exit status, its ``REPRO-RESULT``, its output).
    Dynamo starts from scratch and threads are restored, so one try does not leak into the next."""
    import torch

    try:
        code = compile(source, name, "exec")
    except SyntaxError as error:  # a template's fault: say it, do not stop the other scripts
        return None, None, f"the script does not compile: {error}"
    torch._dynamo.reset()
    threads = torch.get_num_threads()
    output = io.StringIO()
    status: int | None = None
    try:
        with quiet(), contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), time_limit(timeout_s):
            exec(code, {"__name__": "__main__", "__file__": name})
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 2
    except CheckTimeout:
        output.write(f"\ntimed out after {timeout_s:g} s")
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        gc.collect()  # the script's model and compiled code go with it
    return status, parse_result(output.getvalue()), output.getvalue()
