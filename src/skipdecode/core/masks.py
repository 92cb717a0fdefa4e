"""Position ids and additive attention masks for left- or right-padded batches."""

from __future__ import annotations

import torch

__all__ = [
    "active_prefixes",
    "position_ids_from_mask",
    "causal_attention_mask",
    "decode_attention_mask",
    "block_attention_mask",
]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` positions counting only real tokens (padding gets -1), as transformers does."""
    mask = attention_mask.long()
    return mask.cumsum(-1) * mask - 1


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # Additive masks with finfo.min (not -inf) as transformers uses: never NaN.
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def causal_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(B, 1, T, T)`` additive mask: causal, padding keys hidden.

    A padding query may always see itself, so no row is fully masked; padding outputs are
    garbage by design and never read by a real token.
    """
    B, T = attention_mask.shape
    idx = torch.arange(T, device=attention_mask.device)
    causal = idx[None, :] <= idx[:, None]  # (T_q, T_k)
    allowed = causal[None] & attention_mask.bool()[:, None, :]
    allowed = allowed | torch.eye(T, dtype=torch.bool, device=attention_mask.device)[None]
    return _additive(allowed[:, None], dtype)


def decode_attention_mask(
    prompt_mask: torch.Tensor, capacity: int, dtype: torch.dtype
) -> torch.Tensor:
    """``(B, 1, 1, capacity)`` additive mask for one-token decode steps.

    Keys are the prompt (padding hidden) followed by generated tokens (always visible). A step
    at cache length ``n`` uses the view ``[..., :n]``: no allocation per step.
    """
    B, P = prompt_mask.shape
    keys = torch.ones(B, capacity, dtype=torch.bool, device=prompt_mask.device)
    keys[:, :P] = prompt_mask.bool()
    return _additive(keys[:, None, None, :], dtype)


def block_attention_mask(
    visible: torch.Tensor, column: int, T: int, dtype: torch.dtype
) -> torch.Tensor:
    """``(n, 1, T, column + T)`` additive mask for a block of ``T`` positions written at cache
    column ``column``: each row sees its own ``visible`` ``(n, >= column)`` columns before the
    block (a speculative batch has per-row holes there), then the block causally."""
    n = visible.shape[0]
    before = visible[:, None, :column].expand(n, T, column)
    causal = torch.ones(T, T, dtype=torch.bool, device=visible.device).tril()
    allowed = torch.cat([before, causal[None].expand(n, T, T)], dim=-1)
    return _additive(allowed[:, None], dtype)


def active_prefixes(layer_mask: torch.Tensor | None, L: int, T: int) -> list[int]:
    """Per layer: 1 + the last position active in any row (0 if the layer never runs)."""
    if layer_mask is None:
        return [T] * L
    any_row = layer_mask.any(dim=0)  # (L, T)
    idx = torch.arange(1, T + 1, device=layer_mask.device)
    return (any_row * idx).amax(dim=-1).tolist()
