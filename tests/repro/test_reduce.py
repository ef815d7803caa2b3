"""How a reproducer is shrunk (``repro.reduce``): the edits that still fail are kept, unneeded values are put
back at their defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pytest_fullgraph.repro.case import Case
from pytest_fullgraph.repro.reduce import EDITS, fewer_keys, reduce


@dataclass
class TinyConfig:
    """A config class as transformers' behave for the reduction: defaults, ``to_dict`` and derived lists."""

    num_hidden_layers: int = 4
    hidden_size: int = 64
    rope_theta: float = 10000.0
    layer_types: list[str] | None = None

    def __post_init__(self) -> None:
        self.layer_types = self.layer_types or ["full"] * self.num_hidden_layers

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class TinyModel(torch.nn.Module):
    """Its size grows with the layers and the width, as a model's does: a reduction may never grow it."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(config.hidden_size, config.hidden_size)
                                          for _ in range(config.num_hidden_layers))


def test_reduction_keeps_the_edits_that_still_fail_and_puts_unneeded_values_back_at_their_defaults() -> None:
    config = TinyConfig(2, 32, 5.0).to_dict()
    case = Case(TinyModel, TinyConfig, config, 128, (8, 8), 1234, {"max_new_tokens": 4}, None, 4, "float32", True, True)
    # the failure needs two layers, and nothing else
    smaller = reduce(case, "static_error", lambda c: c.config["num_hidden_layers"] == 2, budget_s=60)
    assert smaller.config["num_hidden_layers"] == 2 and smaller.config["hidden_size"] == 16
    assert smaller.config["rope_theta"] == 10000.0 and smaller.prompt_lengths == (4,)
    assert smaller.max_new_tokens == 1 and smaller.generation["max_new_tokens"] == 1
    assert "hidden 32→16" in smaller.reduced and not any("layers" in text for text in smaller.reduced)
    assert fewer_keys(case, lambda c: True, deadline=0).config == case.config  # no time: nothing tried
    assert len(EDITS) >= 8
