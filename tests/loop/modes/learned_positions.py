"""A model whose position table ends where its config says: the draft modes' fixed-width chunks near the end of
a generation that fills it.

Rotary models compute any position, so a chunk read past ``max_length`` goes unnoticed on them; gpt2 looks each
position up in a table of ``n_positions`` rows and fails with an index error one row past it."""

from __future__ import annotations

import torch
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

#: rows of the table; the prompt and the new tokens below fill it exactly
POSITIONS = 16
PROMPT = torch.tensor([[5, 9, 14, 3, 27, 8, 11, 6]])
FILLING = POSITIONS - PROMPT.shape[1]


def table_model(seed: int = 0) -> GPT2LMHeadModel:
    """A tiny random gpt2 with ``POSITIONS`` learned positions."""
    torch.manual_seed(seed)
    config = GPT2Config(n_positions=POSITIONS, n_embd=32, n_layer=2, n_head=2, vocab_size=64, bos_token_id=0,
                        eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


def filling(**settings: object) -> GenerationConfig:
    """Greedy generation of as many tokens as the table has rows left after ``PROMPT``."""
    return GenerationConfig(max_new_tokens=FILLING, do_sample=False, pad_token_id=0, eos_token_id=None, **settings)
