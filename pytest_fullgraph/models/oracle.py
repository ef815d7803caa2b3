"""A causal LM whose next-token scores are a known function of the prefix: the oracle that beam search's results
are computed against by hand (``beam_reference``), so a bug that ``generate`` and our loop share cannot hide.

The prefix reaches the scores only through the cache, as in a real decoder: each position stores the key
``token * (position + 1)`` (so the padding id 0 adds nothing, whatever form the attention mask takes: ``generate``
hands a static cache's forward a 4D mask, a dynamic cache's a 2D one), and the scores of the next token are a
table lookup at ``(5 * s + 3 * v) mod 11`` for the sum ``s`` of the stored keys and each token ``v``. Every
value is an integer or a table entry, exact in float32, so eager, compiled and by-hand runs see the same scores;
the table's irrational entries keep the sums of different paths apart (no ties for top-k to break).
A cache row that does not follow its beam changes ``s``, so a wrong reorder changes the tokens.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

#: the scores' table: distinct irrational values, so no two paths' sums tie
SCORE_TABLE = tuple(math.sqrt(2 + index) - 2.0 for index in range(11))


class OracleConfig(PreTrainedConfig):
    """One layer of one head of width one: the cache holds the keys the scores are a function of."""

    model_type = "fullgraph_oracle"

    vocab_size: int = 8
    hidden_size: int = 1
    num_hidden_layers: int = 1
    num_attention_heads: int = 1
    num_key_value_heads: int = 1
    head_dim: int = 1
    max_position_embeddings: int = 512
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None


def oracle_scores(prefix_sum: torch.Tensor, table: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The next-token scores (``... x vocab``) after a prefix whose keys sum to ``prefix_sum``; ``table`` is
    ``SCORE_TABLE`` as a tensor."""
    tokens = torch.arange(vocab_size, device=prefix_sum.device)
    slot = torch.remainder(5 * prefix_sum.long()[..., None] + 3 * tokens, len(SCORE_TABLE))
    return table[slot]


def oracle_key(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The key a position stores: ``token * (position + 1)``."""
    return tokens * (positions + 1)


class OracleForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = OracleConfig
    _supports_sdpa = True
    _can_compile_fullgraph = True

    def __init__(self, config: OracleConfig) -> None:
        super().__init__(config)
        # a model has parameters; the table is one, so it moves with the model and is not a constant in its graph
        self.table = torch.nn.Parameter(torch.tensor(SCORE_TABLE, dtype=torch.float32), requires_grad=False)
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: Cache | None = None, use_cache: bool | None = None,
                logits_to_keep: int = 0, **kwargs: Any) -> CausalLMOutputWithPast:
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        length = input_ids.shape[1]
        if position_ids is None:
            seen = cache.get_seq_length() if cache is not None else 0
            position_ids = (torch.arange(length, device=input_ids.device) + seen).unsqueeze(0)
        keys = oracle_key(input_ids, position_ids).to(torch.float32)[:, None, :, None]
        stored = keys if cache is None else cache.update(keys, keys, 0)[0]
        # each position's sum: everything stored, less the keys of this chunk that come after it
        after = keys.sum(dim=2, keepdim=True) - keys.cumsum(dim=2)
        sums = (stored.sum(dim=2, keepdim=True) - after)[:, 0, :, 0]
        logits = oracle_scores(sums, self.table, self.config.vocab_size)[:, -logits_to_keep:, :]
        return CausalLMOutputWithPast(logits=logits, cache=cache)


def build_oracle(vocab_size: int = 8) -> OracleForCausalLM:
    """The oracle, eval mode, float32."""
    return OracleForCausalLM(OracleConfig(vocab_size=vocab_size)).eval()
