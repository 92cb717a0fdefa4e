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

import math
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
    decode_mask: torch.Tensor | None,
    policy: CALMPolicy,
    live: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Logits ``(B, V)``, per-row depth (layers the token used, ``(B,)``), layers the batch ran."""
    adapter = dec.adapter
    L = adapter.num_layers
    hidden = adapter.embed(token[:, None], position)
    kwargs = adapter.layer_kwargs(hidden, position)
    attn = None if decode_mask is None else decode_mask[..., : cache_position + 1]
    cache.begin(cache_position)
    checks = set(policy.exit_checks())
    exited = ~live  # finished rows never hold the batch back
    depth = torch.full_like(token, L)
    ran = L
    for layer_idx in range(L):
        out = adapter.run_layer(layer_idx, hidden, attn, kwargs, cache)
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


def calibrate_calm_threshold(
    dec: SkipDecoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    target_speedup: float,
    max_new_tokens: int,
    *,
    check_every: int = 1,
    min_exit_layers: int = 1,
    iterations: int = 10,
    **generate_kwargs,
) -> tuple[float, float]:
    """Bisect the confidence threshold so CALM's per-token theoretical speedup on these prompts
    is about ``target_speedup`` (a lower threshold exits earlier). Returns (threshold, speedup).

    Use held-out prompts (e.g. the validation split), never the test prompts being scored.
    """
    from .policies import CALMPolicy

    if not target_speedup >= 1:
        raise ValueError(f"schedule.target_speedup={target_speedup!r} is not allowed: must be >= 1")
    L = dec.num_layers

    def speedup(threshold: float) -> float:
        policy = CALMPolicy(L, threshold, check_every, min_exit_layers, allow_batching=True)
        out = dec.generate(input_ids, policy, max_new_tokens, attention_mask, decode_texts=False,
                           **generate_kwargs)
        return out.stats.theoretical_speedup

    # Bisect log(threshold) over [1e-4, 1]: confidences span orders of magnitude (a vocabulary
    # of 50k gives top-1 probabilities far below 0.1 on uncertain tokens).
    lo, hi = math.log(1e-4), 0.0  # speedup at lo is the largest, at hi (threshold 1) the smallest
    best = (1.0, speedup(1.0))
    for _ in range(iterations):
        mid = math.exp((lo + hi) / 2)
        s = speedup(mid)
        if abs(s - target_speedup) < abs(best[1] - target_speedup):
            best = (mid, s)
        if s > target_speedup:
            lo = math.log(mid)
        else:
            hi = math.log(mid)
    return best
