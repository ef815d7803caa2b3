"""Tiny-config data: one generic shrink for every config, and one record per built-in model type.

Kept as data so that adding a model type is a table row (see ``pytest_fullgraph.models.build_tiny``). The
generic keys are applied only where the config class knows them (directly or through its ``attribute_map``),
which is what lets one table serve GPT-2-style and Llama-style configs alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: Special-token ids inside the tiny vocabulary. Prompts are drawn from ids >= FIRST_PROMPT_ID.
PAD_TOKEN_ID = 0
BOS_TOKEN_ID = 1
EOS_TOKEN_ID = 2
FIRST_PROMPT_ID = 3


class _Drop:
    """The type of ``DROP``."""

    _instance: _Drop | None = None

    def __new__(cls) -> _Drop:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DROP"


#: An override value meaning "do not pass this generic key at all", e.g. for a key the config class exposes
#: read-only (Falcon's ``head_dim`` property). ``None`` is a real value that is passed on (``sliding_window``).
DROP: Final = _Drop()

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
    # full attention everywhere unless a record says otherwise
    "sliding_window": None,
    "tie_word_embeddings": True,
    # Wide weights make random models emit varied tokens with clear top-1/top-2 logit gaps; with the
    # usual 0.02 they repeat one token, which would hide most mismatches.
    "initializer_range": 0.5,
}


@dataclass(frozen=True)
class TinyModel:
    """Everything the suite knows about one transformers model type."""

    model_type: str
    #: keys merged over ``GENERIC_SHRINK``; ``DROP`` removes a generic key
    overrides: Mapping[str, Any] = field(default_factory=dict)
    #: grouping in reports; the model type itself when empty
    family: str = ""
    tags: frozenset[str] = frozenset()
    #: the transformers class to build, by name; the type's ``AutoModelForCausalLM`` class when empty
    model_class: str = ""
    #: why this type cannot be checked (it is registered, and its checks say this), or "" when it can
    known_reason: str = ""

    @property
    def family_name(self) -> str:
        return self.family or self.model_type


def _record(model_type: str, family: str = "", tags: tuple[str, ...] = (), **overrides: Any) -> TinyModel:
    return TinyModel(model_type, overrides, family, frozenset({"popular", *tags}))


#: The built-in model types, in the order they are listed; all tagged ``popular``.
RECORDS: dict[str, TinyModel] = {record.model_type: record for record in (
    _record("llama"),
    _record("gemma"),
    _record("gemma2", family="gemma", sliding_window=16),
    _record("gemma3_text", family="gemma", sliding_window=16),
    _record("mistral"),
    _record("mixtral", family="mistral", tags=("moe",)),
    _record("qwen2"),
    _record("qwen2_moe", family="qwen2", tags=("moe",)),
    _record("qwen3", family="qwen2"),
    _record("qwen3_moe", family="qwen2", tags=("moe",)),
    _record("phi", partial_rotary_factor=0.5),
    _record("phi3", family="phi"),
    _record("gpt2", n_positions=256),
    _record("gpt_neox", family="gpt2"),
    _record("falcon", head_dim=DROP, new_decoder_architecture=False, multi_query=True),
    _record("opt", ffn_dim=64, word_embed_proj_dim=32),
    _record("olmo2", family="llama"),
    _record("starcoder2"),
    _record("granite", family="llama"),
    _record("cohere"),
    _record("stablelm", partial_rotary_factor=0.25),
    _record("gpt_oss", tags=("moe",), sliding_window=16,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    _record("mpt", d_model=32, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=256),
    _record("gpt_neo", family="gpt2", attention_types=[[["global", "local"], 1]], window_size=16),
    _record("mamba", tags=("ssm",), state_size=8, expand=2, conv_kernel=4, time_step_rank=4),
)}  # fmt: skip
