"""Scenario helpers: prompts shared by the checks and the property suite, and moving a shared model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pytest_fullgraph.check.inputs import left_padded_prompts, pick_eos_token
from pytest_fullgraph.core.model_facts import moved_to
from pytest_fullgraph.models.tiny import FIRST_PROMPT_ID, PAD_TOKEN_ID


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


def _greedy(*rows: list[int], prompt: int = 2) -> torch.Tensor:
    return torch.tensor([[9] * prompt + row for row in rows])


def _stops_at(row: list[int], eos: int) -> int:
    return row.index(eos) if eos in row else len(row)


def test_the_picked_eos_is_row_zeros_first_new_token_the_other_rows_never_emit() -> None:
    assert pick_eos_token(_greedy([5, 6, 7, 8], [6, 6, 6, 6]), prompt_width=2) == 7


def test_a_row_zero_that_repeats_one_token_ends_at_once_while_another_row_goes_on() -> None:
    rows = [[5, 5, 5, 5], [3, 3, 4, 4]]
    eos = pick_eos_token(_greedy(*rows), prompt_width=2)
    assert eos == 5 and [_stops_at(row, eos) for row in rows] == [0, 4]


def test_rows_that_all_start_with_the_repeated_token_take_their_eos_from_a_later_step() -> None:
    rows = [[5, 5, 5, 5], [5, 7, 5, 5]]
    eos = pick_eos_token(_greedy(*rows), prompt_width=2)
    assert eos == 7 and max(_stops_at(row, eos) for row in rows) >= 1


def test_rows_that_each_repeat_one_shared_token_get_an_eos_that_never_fires_rather_than_one_ending_the_prefill(
) -> None:
    rows = [[1, 1, 1, 1], [1, 1, 1, 1]]
    eos = pick_eos_token(_greedy(*rows), prompt_width=2)
    assert eos == 0 and all(_stops_at(row, eos) == len(row) for row in rows)
