"""Registers the repository's own model with pytest_fullgraph: every level and scenario then runs on it."""

from __future__ import annotations

import torch
from my_decoder import MyDecoderConfig, MyDecoderForCausalLM

from pytest_fullgraph import register_model


def build_my_decoder() -> MyDecoderForCausalLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # every xdist worker and CI shard builds the same weights
        return MyDecoderForCausalLM(MyDecoderConfig()).eval()


register_model("my_decoder", build_my_decoder, family="mine", tags=["mine"])
