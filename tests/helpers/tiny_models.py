"""Tiny random models of each supported family, for exactness tests."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

VOCAB = 97
PAD, EOS, BOS = 1, 2, 0


def tiny_opt(num_layers: int = 6, seed: int = 0, **overrides) -> OPTForCausalLM:
    torch.manual_seed(seed)
    cfg = OPTConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=num_layers,
        ffn_dim=64,
        num_attention_heads=4,
        max_position_embeddings=overrides.pop("max_position_embeddings", 128),
        word_embed_proj_dim=overrides.pop("word_embed_proj_dim", 32),
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        dropout=0.0,
        attention_dropout=0.0,
        **overrides,
    )
    cfg._attn_implementation = "sdpa"
    return OPTForCausalLM(cfg).eval()


def tiny_llama(num_layers: int = 6, seed: int = 0, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention
        max_position_embeddings=128,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        tie_word_embeddings=False,
        **overrides,
    )
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg).eval()


FAMILIES = {"opt": tiny_opt, "llama": tiny_llama}


def left_padded_batch(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Random prompts of the given lengths, left-padded: (input_ids, attention_mask)."""
    g = torch.Generator().manual_seed(seed)
    P = max(lengths)
    ids = torch.full((len(lengths), P), PAD, dtype=torch.long)
    mask = torch.zeros(len(lengths), P, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, P - n :] = torch.randint(3, VOCAB, (n,), generator=g)
        mask[i, P - n :] = 1
    return ids, mask


#: Tiny random configs of every supported family (AutoConfig.for_model keyword arguments).
_COMMON = dict(
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    tie_word_embeddings=False,
)
ARCHS: dict[str, dict] = {
    "llama": dict(
        _COMMON,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "qwen2": dict(_COMMON),
    "qwen3": dict(_COMMON, head_dim=8),
    "mistral": dict(_COMMON, sliding_window=24),
    "mixtral": dict(_COMMON, num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": dict(
        _COMMON, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32
    ),
    "gemma": dict(_COMMON, head_dim=8),
    "gemma2": dict(
        _COMMON,
        head_dim=8,
        sliding_window=24,
        final_logit_softcapping=5.0,
        attn_logit_softcapping=10.0,
    ),
    "gemma3_text": dict(
        _COMMON,
        head_dim=8,
        sliding_window=24,
        sliding_window_pattern=2,
        final_logit_softcapping=5.0,
    ),
    "phi3": dict(_COMMON),
    "olmo2": dict(_COMMON),
    "gpt_neox": dict(
        {k: v for k, v in _COMMON.items() if k != "num_key_value_heads"}, rotary_pct=0.5
    ),
    "gpt2": dict(
        n_embd=32,
        n_layer=4,
        n_head=4,
        vocab_size=VOCAB,
        n_positions=128,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    ),
    "granite": dict(
        _COMMON,
        embedding_multiplier=3.0,
        residual_multiplier=0.5,
        attention_multiplier=0.2,
        logits_scaling=4.0,
    ),
    "opt": dict(
        hidden_size=32,
        ffn_dim=64,
        num_attention_heads=4,
        word_embed_proj_dim=32,
        vocab_size=VOCAB,
        max_position_embeddings=128,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        dropout=0.0,
    ),
}


def tiny_family(model_type: str, num_layers: int = 4, seed: int = 0):
    """A tiny random ``*ForCausalLM`` of ``model_type`` in eval mode (its default attention)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(ARCHS[model_type])
    kwargs["n_layer" if model_type == "gpt2" else "num_hidden_layers"] = num_layers
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # visible logits: random init at 0.02 makes every family near-uniform
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(8.0)
    return model
