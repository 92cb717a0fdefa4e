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
        max_position_embeddings=128,
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
