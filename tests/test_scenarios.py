"""Scenario helpers: prompts shared by the checks and the property suite, and moving a shared model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pytest_fullgraph.models.tiny import FIRST_PROMPT_ID, PAD_TOKEN_ID
from pytest_fullgraph.scenarios import left_padded_prompts, moved_to


class Movable:
    """Records where it is moved, as a model's ``to`` would move its parameters."""

    def __init__(self) -> None:
        self.device = "cpu"
        self.moves: list[str] = []

    def parameters(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(device=self.device)]

    def to(self, device: str) -> Movable:
        self.moves.append(device)
        self.device = device
        return self


def test_moved_to_brings_the_shared_model_back_even_when_the_block_fails() -> None:
    model = Movable()
    with pytest.raises(AssertionError), moved_to(model, "cuda"):
        assert model.device == "cuda"
        raise AssertionError("the compiled tokens differ")
    assert model.moves == ["cuda", "cpu"] and model.device == "cpu"


def test_left_padded_prompts_are_seeded_padded_and_masked() -> None:
    prompts = left_padded_prompts([3, 5], seed=7, vocab=50)
    ids, mask = prompts["input_ids"], prompts["attention_mask"]
    assert ids.shape == (2, 5) and torch.equal(mask, torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]))
    assert bool((ids[mask == 0] == PAD_TOKEN_ID).all()) and bool((ids[mask == 1] >= FIRST_PROMPT_ID).all())
    assert torch.equal(ids, left_padded_prompts([3, 5], seed=7, vocab=50)["input_ids"])
