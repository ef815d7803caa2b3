"""The generic shrink: the keys that make any transformers config tiny, applied only where the config class knows them
(directly or through its ``attribute_map``), which is what lets one table serve GPT-2-style and Llama-style configs
alike; ``SHRINK_RULES`` for what depends on the full-size config; the special-token ids of the tiny vocabulary.
Per-type overrides are ``tiny``'s records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from pytest_fullgraph.models.tags import config_value

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
    "ffn_dim": 64,
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
    # a window shorter than the slow tier's generations where the full-size config has one (see SLIDING_WINDOW),
    # else none
    "sliding_window": None,
    "tie_word_embeddings": True,
    # Wide weights make random models emit varied tokens with clear top-1/top-2 logit gaps; with the
    # usual 0.02 they repeat one token, which would hide most mismatches. (init_std: the bart family's name.)
    "initializer_range": 0.5,
    "init_std": 0.5,
    # decoders of encoder-decoder families (bart, marian, pegasus, whisper, trocr, ...), whose layer count is
    # not num_hidden_layers (that maps to the encoder's)
    "decoder_layers": 2,
    "decoder_attention_heads": 4,
    "decoder_ffn_dim": 64,
    "encoder_ffn_dim": 64,
    # a token forced at the last step would end every generation with it
    "forced_eos_token_id": None,
    # BERT-style causal LMs attend both ways unless they are told they are decoders
    "is_decoder": True,
    # sparse-attention indexers (DeepSeek sparse attention): a top-k below the generation length, so it selects
    "index_topk": 8,
    "index_head_dim": 16,
    "index_n_heads": 2,
}


@dataclass(frozen=True)
class ShrinkRule:
    """A generic shrink that depends on the full-size config: applied where ``applies`` says, as ``values``."""

    name: str
    applies: Callable[[Any], bool]
    values: Callable[[Any], dict[str, Any]]


def _int(config: Any, name: str) -> int:
    """An integer field, 0 when absent or unreadable; read past the guard of heterogeneous (per-layer) configs."""
    value = config_value(config, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


#: Rules over the generic keys, in order; each sees the full-size default config.
SHRINK_RULES: tuple[ShrinkRule, ...] = (
    # multi-head latent attention: small ranks, and as many key/value heads as query heads, since kv_b_proj
    # makes one per query head (q_lora_rank only where the model uses a low-rank query at all)
    ShrinkRule("latent attention", lambda config: _int(config, "kv_lora_rank") > 0, lambda config: {
        "num_key_value_heads": GENERIC_SHRINK["num_attention_heads"], "kv_lora_rank": 16, "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8, "v_head_dim": 8, **({"q_lora_rank": 16} if _int(config, "q_lora_rank") else {})}),
    # grouped expert routing: the default 8 groups cannot split 4 experts
    ShrinkRule("expert groups", lambda config: _int(config, "n_group") > 1,
               lambda config: {"n_group": 2, "topk_group": 1}),
    # a dense prefix as deep as the tiny model would leave no mixture-of-experts layer
    ShrinkRule("dense prefix", lambda config: _int(config, "first_k_dense_replace") > 1,
               lambda config: {"first_k_dense_replace": 1}),
    ShrinkRule("dense layers", lambda config: _int(config, "num_dense_layers") > 1,
               lambda config: {"num_dense_layers": 1}),
    # partial rotary embeddings sized for the full head (GPT-J, CodeGen: 64)
    ShrinkRule("rotary dims", lambda config: _int(config, "rotary_dim") > GENERIC_SHRINK["head_dim"],
               lambda config: {"rotary_dim": GENERIC_SHRINK["head_dim"] // 2}),
)


#: The window of a tiny model whose full-size config has a sliding window: short enough that the slow tier's
#: generations (prompt plus 16 new tokens) slide past it.
SLIDING_WINDOW = 16
