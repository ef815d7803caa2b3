"""A causal LM that is not in transformers: a config and a ``PreTrainedModel`` of your own.

Written as a model author would write one for transformers 5: a dataclass config, a cache passed as ``cache``,
the causal mask from ``create_causal_mask``, attention through transformers' attention interface (so sdpa,
eager and static caches work), and ``GenerationMixin`` for ``generate``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


class MyDecoderConfig(PreTrainedConfig):
    """Learned absolute positions, pre-norm blocks, one fused query/key/value projection."""

    model_type = "my_decoder"

    vocab_size: int = 128
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    max_position_embeddings: int = 256
    initializer_range: float = 0.5
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = True


class MyAttention(nn.Module):
    is_causal = True

    def __init__(self, config: MyDecoderConfig, layer_idx: int) -> None:
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = 1
        self.scaling = self.head_dim**-0.5
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor, mask: Any, cache: Cache | None, **kwargs: Any) -> torch.Tensor:
        batch, length, _ = hidden.shape
        query, key, value = self.qkv(hidden).view(batch, length, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        attention = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        output, _ = attention(self, query, key, value, mask, scaling=self.scaling, dropout=0.0)
        return self.out(output.reshape(batch, length, -1))


class MyBlock(nn.Module):
    def __init__(self, config: MyDecoderConfig, layer_idx: int) -> None:
        super().__init__()
        self.attention_norm, self.mlp_norm = nn.LayerNorm(config.hidden_size), nn.LayerNorm(config.hidden_size)
        self.attention = MyAttention(config, layer_idx)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU(),
                                 nn.Linear(config.intermediate_size, config.hidden_size))

    def forward(self, hidden: torch.Tensor, mask: Any, cache: Cache | None) -> torch.Tensor:
        hidden = hidden + self.attention(self.attention_norm(hidden), mask, cache)
        return hidden + self.mlp(self.mlp_norm(hidden))


class MyDecoderForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = MyDecoderConfig
    _supports_sdpa = True
    _can_compile_fullgraph = True  # transformers compiles the forward inside generate only when this is set
    _tied_weights_keys = {"lm_head.weight": "embed.weight"}

    def __init__(self, config: MyDecoderConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.blocks = nn.ModuleList(MyBlock(config, index) for index in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: Cache | None = None, use_cache: bool | None = None,
                logits_to_keep: int = 0, **kwargs: Any) -> CausalLMOutputWithPast:
        hidden = self.embed(input_ids)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        if position_ids is None:
            seen = cache.get_seq_length() if cache is not None else 0
            position_ids = (torch.arange(input_ids.shape[1], device=input_ids.device) + seen).unsqueeze(0)
        mask = create_causal_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask,
                                  cache=cache, position_ids=position_ids)
        hidden = hidden + self.positions(position_ids)
        for block in self.blocks:
            hidden = block(hidden, mask, cache)
        logits = self.lm_head(self.norm(hidden)[:, -logits_to_keep:, :])
        return CausalLMOutputWithPast(logits=logits, cache=cache)
