"""The draft model of the assisted-decoding scenarios: a one-layer llama of the target's vocabulary, seeded, on the
target's device and dtype, so any causal LM of the suite can be assisted without a tokenizer or a checkpoint.

Its generation config is what ``AssistedCandidateGenerator`` reads from an assistant: ``DRAFT_TOKENS`` per step,
the constant schedule, and no confidence threshold (a random draft is never confident: with ``generate``'s
default of 0.4 it would stop after one token every step and leave the rest of the draft buffer unexercised).
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from pytest_fullgraph.core.model_facts import model_device, vocab_size

#: tokens the draft model drafts per step (``num_assistant_tokens``)
DRAFT_TOKENS = 3
DRAFT_SEED = 0


def build_draft(target: PreTrainedModel) -> PreTrainedModel:
    """A draft model for ``target``: same vocabulary, one small layer, weights from ``DRAFT_SEED``."""
    config = LlamaConfig(vocab_size=vocab_size(target), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         tie_word_embeddings=False, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(DRAFT_SEED)
        draft = LlamaForCausalLM(config)
    torch.nn.Module.to(draft, device=model_device(target), dtype=target.dtype)  # in place
    draft.eval()
    draft.generation_config.num_assistant_tokens = DRAFT_TOKENS
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    return draft
