"""How long a generation a model holds: the positions its config declares, and the most new tokens that leaves
after a prompt.

``--fullgraph-max-new-tokens`` past that limit is refused by name: a model with a learned position table (gpt2,
opt, mpt) fails with an index error there, and one without runs past what transformers itself calls "the model's
predefined maximum length" (the field it warns with). Read from configs only, so start-up needs no built model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_fullgraph.models import Registry
from pytest_fullgraph.models.tags import config_value

#: The config fields that bound a causal LM's positions, first found wins: transformers' own name (which
#: ``attribute_map`` gives gpt2's ``n_positions``), mpt's, and the decoder's of encoder-decoder families (whisper).
POSITION_FIELDS = ("max_position_embeddings", "max_seq_len", "max_target_positions")
#: Models named after the tightest one in a refusal, so that the line stays one line.
MORE_NAMED = 5


@dataclass(frozen=True)
class Positions:
    """A model's declared positions and the config field that declares them."""

    model: str
    count: int
    field: str

    def most_new_tokens(self, prompt: int) -> int:
        """The most new tokens that fit after a ``prompt``-token prompt (the prompt and every new token)."""
        return max(self.count - prompt, 0)


def declared_positions(model: str, config: Any) -> Positions | None:
    """The positions ``config`` (of ``model``) declares, from its decoder's text config where it has one; None
    where it declares none (mamba, bloom: nothing in the config bounds the length)."""
    getter = getattr(config, "get_text_config", None)
    try:
        text = getter(decoder=True) if getter is not None else config
    except Exception:  # a composite config whose text part is unreadable: look at the config itself
        text = config
    for field in POSITION_FIELDS:
        value = config_value(text, field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:  # xlnet's -1: no limit
            return Positions(model, value, field)
    return None


def too_long(limits: Sequence[Positions], prompt: int, new_tokens: int) -> str:
    """Why ``new_tokens`` after a ``prompt``-token prompt do not fit every model of ``limits``, in one line
    naming the tightest model; "" when they fit."""
    over = sorted((limit for limit in limits if prompt + new_tokens > limit.count),
                  key=lambda limit: (limit.count, limit.model))
    if not over:
        return ""
    tightest, others = over[0], [limit.model for limit in over[1:]]
    line = (f"{tightest.model} holds at most {tightest.count} positions ({tightest.field}), and its prompts take "
            f"{prompt}, so at most {tightest.most_new_tokens(prompt)} new tokens")
    if others:
        named = ", ".join(others[:MORE_NAMED]) + (f" and {len(others) - MORE_NAMED} more"
                                                  if len(others) > MORE_NAMED else "")
        line += f" (too many for {named} too)"
    return line


def selection_too_long(registry: Registry, names: Sequence[str], prompt: int, new_tokens: int) -> str:
    """``too_long`` over the models ``names`` whose configs are known without a build; models known only once
    built are held to it when their checks run (``FullgraphSession.too_long``)."""
    return too_long([found for name in names if (found := startup_positions(registry, name)) is not None], prompt,
                    new_tokens)


def startup_positions(registry: Registry, name: str) -> Positions | None:
    """The positions model ``name``'s config declares, read without building it; None where the config is known
    only once built, cannot be read (its build will say why), or the model is never built."""
    spec = registry[name]
    if spec.config is None or spec.known_reason:
        return None
    try:
        config = spec.config()
    except Exception:  # an unbuildable type: its checks report the error in the build's own words
        return None
    return declared_positions(name, config)
