"""CALM-style confident early exit for one batched decode step (Schuster et al. 2022).

Each live token runs layers bottom-up; after every checked layer the shared head (final norm +
LM head) gives its softmax confidence, and a token whose top-1 probability reaches the threshold
exits there. An exited token's hidden state is frozen and copied upwards: layers the batch still
runs compute that token's KV from the frozen state, and once every token has exited the layers
above get their KV from it directly (``adapter.fill_kv``), without running. This is exactly a
teacher-forced pass in which the token's layers above its exit pass the state through, which is
what the exactness tests check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .cache import KVCache
    from .engine import SkipDecoder
    from .policies import CALMPolicy


def calm_decode_step(
    dec: SkipDecoder,
    token: torch.Tensor,
    position: torch.Tensor,
    cache_position: int,
    cache: KVCache,
    decode_mask: torch.Tensor,
    policy: CALMPolicy,
    live: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Logits ``(B, V)``, per-row depth (layers the token used, ``(B,)``), layers the batch ran."""
    adapter = dec.adapter
    L = adapter.num_layers
    hidden = adapter.embed(token[:, None], position)
    kwargs = adapter.layer_kwargs(hidden, position)
    attn = decode_mask[..., : cache_position + 1]
    cache.begin(cache_position)
    checks = set(policy.exit_checks())
    exited = ~live  # finished rows never hold the batch back
    depth = torch.full_like(token, L)
    ran = L
    for layer_idx, layer in enumerate(adapter.layers):
        out = layer(hidden, attention_mask=attn, past_key_values=cache, use_cache=True, **kwargs)
        hidden = torch.where(exited[:, None, None], hidden, out)
        if layer_idx not in checks:
            continue
        confidence = adapter.head(hidden)[:, 0].float().softmax(-1).amax(-1)
        newly = ~exited & (confidence >= policy.threshold)
        depth = torch.where(newly, torch.full_like(depth, layer_idx + 1), depth)
        exited = exited | newly
        if bool(exited.all()):  # the last live token has exited: fill the KV above and stop
            for upper in range(layer_idx + 1, L):
                adapter.fill_kv(upper, hidden, kwargs, cache)
            ran = layer_idx + 1
            break
    return adapter.head(hidden)[:, 0], depth, ran
