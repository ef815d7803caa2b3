"""Tiny-config records: one per built-in model type that the generic shrink (``shrink``) does not fit as it is, or
that the curated ``popular`` list names, or that cannot be checked (with why).

Kept as data so that adding a model type is a table row (see ``pytest_fullgraph.models.build_tiny``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_fullgraph.models.shrink import BOS_TOKEN_ID, DROP, EOS_TOKEN_ID, FIRST_PROMPT_ID, PAD_TOKEN_ID

#: The records, and the tiny vocabulary's ids (``shrink``'s), which prompts and scenarios import from here.
__all__ = ["BOS_TOKEN_ID", "EOS_TOKEN_ID", "FIRST_PROMPT_ID", "FIXES", "PAD_TOKEN_ID", "POPULAR", "REASONS", "RECORDS",
           "TinyModel"]


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


def _popular(model_type: str, family: str = "", **overrides: Any) -> TinyModel:
    """A type of the curated ``popular`` list (widely used families), with its overrides."""
    return TinyModel(model_type, overrides, family, frozenset({"popular"}))


def _fix(model_type: str, family: str = "", model_class: str = "", **overrides: Any) -> TinyModel:
    """A type the generic shrink and its rules do not fit: the overrides that make it build and generate."""
    return TinyModel(model_type, overrides, family, model_class=model_class)


def _reason(model_type: str, reason: str) -> TinyModel:
    """A type that cannot be checked: registered anyway, skipped with ``reason`` (which says what would fix it)."""
    return TinyModel(model_type, known_reason=reason)


#: The curated ``popular`` list: widely used families, the default of broad runs (``--fullgraph-models=popular``).
POPULAR: tuple[TinyModel, ...] = (
    _popular("llama"),
    _popular("gemma"),
    _popular("gemma2", family="gemma"),
    _popular("gemma3_text", family="gemma"),
    _popular("mistral", sliding_window=None),  # Mistral v0.3 on has no window; ministral keeps one
    _popular("mixtral", family="mistral"),
    _popular("qwen2"),
    _popular("qwen2_moe", family="qwen2"),
    _popular("qwen3", family="qwen2"),
    _popular("qwen3_moe", family="qwen2"),
    _popular("phi", partial_rotary_factor=0.5),
    _popular("phi3", family="phi"),
    _popular("gpt2", n_positions=256),
    _popular("gpt_neox", family="gpt2"),
    _popular("falcon", head_dim=DROP, new_decoder_architecture=False, multi_query=True),
    _popular("opt", ffn_dim=64, word_embed_proj_dim=32),
    _popular("olmo2", family="llama"),
    _popular("starcoder2"),
    _popular("granite", family="llama"),
    _popular("cohere"),
    _popular("stablelm", partial_rotary_factor=0.25),
    _popular("gpt_oss", rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    _popular("mpt", d_model=32, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=256),
    _popular("gpt_neo", family="gpt2", attention_types=[[["global", "local"], 1]], window_size=16),
    _popular("mamba", state_size=8, expand=2, conv_kernel=4, time_step_rank=4),
)  # fmt: skip

#: Types the generic shrink and ``SHRINK_RULES`` leave unbuildable, too large, or degenerate, each with the
#: smallest overrides that keep its characteristic structure (MoE keeps experts, hybrids one layer of each kind).
FIXES: tuple[TinyModel, ...] = (
    # sliding layers use RoPE, the full one none; the default rope_parameters ({}) name neither (a bug in 5.24)
    _fix("cohere_compass_text", layer_types=["sliding_attention", "full_attention"],
         rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                          "full_attention": None}),
    _fix("dots1", n_shared_experts=1),
    _fix("lfm2_moe", layer_types=["conv", "full_attention"]),
    _fix("qwen4_exp_text", indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=8, indexer_budget=8,
         indexer_compress_ratio=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
         linear_num_value_heads=4, hc_lowrank=8, ple_layer_ids=[1], ple_embed_dim=16, heads_per_ngram=2,
         ngram_vocab_size_base=64),
    _fix("qwen4_exp", text_config={
        "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 8, "indexer_budget": 8,
        "indexer_compress_ratio": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "hc_lowrank": 8, "ple_layer_ids": [1], "ple_embed_dim": 16,
        "heads_per_ngram": 2, "ngram_vocab_size_base": 64,
        "number_of_conv_states": DROP}),  # derived from the layer list; the copied full-size count overrides it
    _fix("longcat_flash", zero_expert_num=2),
    _fix("kimi_linear", linear_head_dim=8, linear_num_heads=4),
    # its num_hidden_layers setter raises: the decoder and encoder depths are set instead
    _fix("prophetnet", num_hidden_layers=DROP, num_encoder_layers=2, num_decoder_layers=2,
         num_decoder_attention_heads=4),
    # the layer count comes from attn_layers; the axial position factors must multiply to the positions and their
    # widths add up to the hidden size; short chunks so that chunking happens within the suite's generations
    _fix("reformer", attn_layers=["local", "lsh"], attention_head_size=8, feed_forward_size=64,
         axial_pos_shape=[16, 16], axial_pos_embds_dim=[16, 16], local_attn_chunk_length=8,
         lsh_attn_chunk_length=8, num_buckets=4),
    # no sequence limit, so no max_position_embeddings; d_head is derived before hidden_size is mapped
    _fix("xlnet", max_position_embeddings=DROP, d_head=8, d_inner=64),
    _fix("xmod", default_language="en_XX"),
    # full-size side tables: shape and pronunciation embeddings, audio and vision towers, feed-forward width
    _fix("roc_bert", shape_vocab_size=128, shape_embed_dim=32, pronunciation_vocab_size=128,
         pronunciation_embed_dim=32),
    _fix("phi4_multimodal", audio_config={"num_blocks": 2, "ext_pw_out_channel": 32,
                                          "depthwise_separable_out_channel": 32, "nemo_conv_channels": 32}),
    _fix("got_ocr2", vision_config={"output_channels": 16, "mlp_dim": 64, "image_size": 128, "window_size": 4,
                                    "global_attn_indexes": [1]}, image_seq_length=4),
    _fix("cpmant", dim_ff=64, dim_head=8),
    # hybrids whose layer list derives from other fields: set those so that an attention layer survives the cut
    _fix("bamba", attn_layer_indices=[1], mamba_n_heads=4),
    _fix("falcon_h1", mamba_d_ssm=64, mamba_n_heads=4),
    _fix("recurrent_gemma", block_types=["recurrent", "attention"]),
    _fix("granitemoehybrid", layer_types=["linear_attention", "full_attention"], mamba_n_heads=4,
         shared_intermediate_size=32),
    _fix("jamba", attn_layer_period=2, attn_layer_offset=1),
    _fix("mamba2", num_heads=8),
    # its weight-tying pattern needs two hybrid layers
    _fix("zamba", num_hidden_layers=3, layers_block_type=["linear_attention", "hybrid", "hybrid"]),
    _fix("zaya", num_experts_per_tok=1),  # "ZAYA currently supports num_experts_per_tok=1 only"
    # 5.24's modeling reads attn_config.rope_theta, which its config no longer has, and clamps by clip_qkv
    # even when it is None; untied embeddings are its only kind
    _fix("dbrx", tie_word_embeddings=False, attn_config={"rope_theta": 10000.0, "clip_qkv": 8, "kv_n_heads": 2},
         ffn_config={"ffn_hidden_size": 64, "moe_top_k": 2}),
    # the cache rounds the q/k/v widths up to multiples of 64 and the layers do not: make them multiples
    _fix("xlstm", qk_dim_factor=2.0, v_dim_factor=2.0),
    # per-layer inputs and their vocabulary, sized down; one sparse-activation value per (kv-shared) layer
    _fix("gemma3n_text", vocab_size_per_layer_input=128, hidden_size_per_layer_input=8, laurel_rank=8,
         activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0]),
    _fix("gemma4_text", vocab_size_per_layer_input=128, hidden_size_per_layer_input=8, global_head_dim=16),
    _fix("gemma4", text_config={"vocab_size_per_layer_input": 128, "hidden_size_per_layer_input": 8,
                                "global_head_dim": 16}),
    _fix("gemma4_unified_text", vocab_size_per_layer_input=128, hidden_size_per_layer_input=8, global_head_dim=16),
    _fix("gemma4_unified", text_config={"vocab_size_per_layer_input": 128, "hidden_size_per_layer_input": 8,
                                        "global_head_dim": 16}),
    # heterogeneous layers: the sliding-window layers' own head counts and latent ranks
    _fix("dots3_note_text", swa_num_attention_heads=2, swa_num_key_value_heads=2, swa_q_lora_rank=16,
         swa_kv_lora_rank=16, swa_head_dim=8, swa_qk_nope_head_dim=4),
    _fix("dots3_note", text_config={
        "swa_num_attention_heads": 2, "swa_num_key_value_heads": 2, "swa_q_lora_rank": 16, "swa_kv_lora_rank": 16,
        "swa_head_dim": 8, "swa_qk_nope_head_dim": 4}, vision_config={"adapter_in_dim": 32, "adapter_out_dim": 32},
        audio_config={"adapter_input_size": 32, "adapter_out_dim": 32}),
    # the output layer has unpadded_vocab_size rows (200058 by default)
    _fix("inkling2_text", unpadded_vocab_size=128, swa_num_attention_heads=4, swa_num_key_value_heads=2,
         swa_head_dim=8),
    _fix("inkling2_loop_text", unpadded_vocab_size=128, swa_num_attention_heads=4, swa_num_key_value_heads=2,
         swa_head_dim=8, n_layers_per_attn_res_block=1, loop_layer_index_start=1, loop_layer_index_end=2,
         loop_num_passes=2, loop_gate_rank=8),
    # no num_hidden_layers of its own (the cache needs one); the global width its decoder projects to
    _fix("blt", num_hidden_layers=2, encoder_hash_byte_group_vocab=64, local_attention_window_len=16,
         decoder_config={"hidden_size_global": 32}),
)  # fmt: skip

#: Types that cannot be checked, with why and what would fix it.
REASONS: tuple[TinyModel, ...] = (
    _reason("gemma3n", "its vision tower is a timm model (TimmWrapperModel, architecture mobilenetv5_300m_enc, "
                       "about 300M parameters whatever the config says), which needs timm and pillow: check "
                       "gemma3n_text, its language model, instead"),
    _reason("gemma4_assistant", "a drafter: its forward needs the target model's inputs_embeds and shared_kv_states, "
                                "so it only runs as generate(..., assistant_model=) beside a gemma4 target (and "
                                "its default config fails its own validation in transformers 5.24)"),
    _reason("gemma4_unified_assistant", "a drafter: its forward needs the target model's inputs_embeds and "
                                        "shared_kv_states, so it only runs as generate(..., assistant_model=) "
                                        "beside a gemma4_unified target"),
    _reason("musicgen", "the causal-LM class (MusicgenForCausalLM) needs the decoder config, not the composite "
                        "MusicgenConfig the type maps to (modeling_musicgen.py config.dropout), and its generate "
                        "returns codebook streams with the delay pattern applied, not prompt plus continuation"),
    _reason("musicgen_melody", "as musicgen: MusicgenMelodyForCausalLM needs the decoder config, and its generate "
                               "returns codebook streams, not prompt plus continuation"),
)


def _index(*groups: tuple[TinyModel, ...]) -> dict[str, TinyModel]:
    records: dict[str, TinyModel] = {}
    for record in (record for group in groups for record in group):
        if record.model_type in records:
            raise ValueError(f"model type {record.model_type!r} has two records")
        records[record.model_type] = record
    return records


#: Every record by model type. Installed types without one get the generic shrink (and ``SHRINK_RULES``).
RECORDS: dict[str, TinyModel] = _index(POPULAR, FIXES, REASONS)
