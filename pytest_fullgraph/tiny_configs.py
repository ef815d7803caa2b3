"""Tiny-config data: a generic shrink applied to every config, plus per-model-type overrides.

Kept as plain tables so that adding a model type is a data change (see ``registry.build_tiny``).
The generic keys are applied only where the config class knows them (directly or through its
``attribute_map``), which is what lets one table serve GPT-2-style and Llama-style configs alike.
"""

from __future__ import annotations

from typing import Any

#: Special-token ids inside the tiny vocabulary. Prompts are drawn from ids >= FIRST_PROMPT_ID.
PAD_TOKEN_ID = 0
BOS_TOKEN_ID = 1
EOS_TOKEN_ID = 2
FIRST_PROMPT_ID = 3

GENERIC_SHRINK: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 256,
    "pad_token_id": PAD_TOKEN_ID,
    "bos_token_id": BOS_TOKEN_ID,
    "eos_token_id": EOS_TOKEN_ID,
    # mixture-of-experts models
    "num_local_experts": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    # full attention everywhere unless an override says otherwise
    "sliding_window": None,
    "tie_word_embeddings": True,
    # Wide weights make random models emit varied tokens with clear top-1/top-2 logit gaps; with the
    # usual 0.02 they repeat one token, which would hide most mismatches.
    "initializer_range": 0.5,
}

#: Per model type: keys merged over the generic shrink. ``None`` as a value drops a generic key
#: that the config class exposes read-only (e.g. Falcon's ``head_dim`` property).
OVERRIDES: dict[str, dict[str, Any]] = {
    "falcon": {"head_dim": None, "new_decoder_architecture": False, "multi_query": True},
    "gemma2": {"sliding_window": 16},
    "gemma3_text": {"sliding_window": 16},
    "gpt2": {"n_positions": 256},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]], "window_size": 16},
    "gpt_oss": {"sliding_window": 16, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "mamba": {"state_size": 8, "expand": 2, "conv_kernel": 4, "time_step_rank": 4},
    "mpt": {"d_model": 32, "n_heads": 4, "n_layers": 2, "expansion_ratio": 2, "max_seq_len": 256},
    "opt": {"ffn_dim": 64, "word_embed_proj_dim": 32},
    "phi": {"partial_rotary_factor": 0.5},
    "stablelm": {"partial_rotary_factor": 0.25},
}

#: Model types built into the registry, all tagged ``popular``.
POPULAR_MODEL_TYPES: tuple[str, ...] = (
    "llama", "gemma", "gemma2", "gemma3_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
    "qwen3_moe", "phi", "phi3", "gpt2", "gpt_neox", "falcon", "opt", "olmo2", "starcoder2", "granite",
    "cohere", "stablelm", "gpt_oss", "mpt", "gpt_neo", "mamba",
)  # fmt: skip

#: Family of each built-in type (for grouping in reports); a type missing here is its own family.
FAMILIES: dict[str, str] = {
    "gemma2": "gemma", "gemma3_text": "gemma", "qwen2_moe": "qwen2", "qwen3": "qwen2", "qwen3_moe": "qwen2",
    "phi3": "phi", "mixtral": "mistral", "gpt_neo": "gpt2", "gpt_neox": "gpt2", "olmo2": "llama",
    "granite": "llama",
}  # fmt: skip

#: Extra tags per built-in type, beside ``popular``.
EXTRA_TAGS: dict[str, tuple[str, ...]] = {
    "mixtral": ("moe",), "qwen2_moe": ("moe",), "qwen3_moe": ("moe",), "gpt_oss": ("moe",),
    "mamba": ("ssm",),
}  # fmt: skip
