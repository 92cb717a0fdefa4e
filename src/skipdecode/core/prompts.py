"""A batch's inputs for generation: left-padded prompt ids, special token ids, output lengths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["prepare_inputs", "special_ids", "lengths_with_eos"]


def prepare_inputs(
    inputs: Sequence[str] | torch.Tensor,
    attention_mask: torch.Tensor | None,
    tokenizer: Any,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(input_ids, attention_mask)`` on ``device`` from prompt strings (tokenised
    here) or ids; clear errors for empty, right-padded or malformed batches."""
    if isinstance(inputs, torch.Tensor):
        if inputs.dim() != 2 or inputs.shape[0] == 0:
            raise ValueError(
                f"inputs has shape {tuple(inputs.shape)}; expected a non-empty (batch, "
                "prompt_length) tensor of token ids"
            )
        ids = inputs
        mask = torch.ones_like(ids) if attention_mask is None else attention_mask
        if mask.shape != ids.shape:
            raise ValueError(
                f"attention_mask shape {tuple(mask.shape)} != input_ids shape {tuple(ids.shape)}"
            )
        if bool((mask[:, -1] == 0).any()):
            raise ValueError(
                "prompts must be left-padded: attention_mask has padding in the last column"
            )
        if bool((mask.sum(-1) == 0).any()):
            raise ValueError("a prompt is empty (all padding); every row needs a real token")
        return ids.to(device), mask.to(device)
    prompts = list(inputs)
    if not prompts:
        raise ValueError("inputs is an empty batch: give at least one prompt")
    if tokenizer is None:
        raise ValueError("text prompts need a tokenizer: SkipDecoder(model, tokenizer)")
    if any(not isinstance(p, str) for p in prompts):
        raise TypeError("inputs must be a list of strings or a tensor of token ids")
    enc = _tokenize_left(tokenizer, prompts)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def special_ids(
    model: Any, tokenizer: Any, eos: int | Sequence[int] | None, pad: int | None
) -> tuple[list[int], int]:
    """EOS ids and the pad id: the arguments, else the generation config, the model config, the
    tokenizer (pad falls back to the first EOS, then 0)."""
    cfg = model.config
    gen_cfg = getattr(model, "generation_config", None)
    if eos is None:
        eos = getattr(gen_cfg, "eos_token_id", None) or getattr(cfg, "eos_token_id", None)
        if eos is None and tokenizer is not None:
            eos = tokenizer.eos_token_id
    eos_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])
    if pad is None:
        pad = getattr(gen_cfg, "pad_token_id", None) or getattr(cfg, "pad_token_id", None)
        if pad is None and tokenizer is not None:
            pad = tokenizer.pad_token_id
        if pad is None:
            pad = eos_ids[0] if eos_ids else 0
    return eos_ids, int(pad)


def lengths_with_eos(gen: torch.Tensor, eos_ids: Sequence[int]) -> list[int]:
    """Tokens per row up to and including the first EOS (all tokens if none)."""
    B, N = gen.shape
    if not eos_ids or N == 0:
        return [N] * B
    is_eos = torch.isin(gen, torch.tensor(list(eos_ids), device=gen.device))
    first = torch.where(
        is_eos.any(-1), is_eos.float().argmax(-1) + 1, torch.full((B,), N, device=gen.device)
    )
    return [int(x) for x in first.tolist()]


def _tokenize_left(tokenizer: Any, prompts: list[str]) -> dict[str, torch.Tensor]:
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        if tokenizer.pad_token_id is None:
            raise ValueError(
                "the tokenizer has no pad token; set tokenizer.pad_token (e.g. to the EOS token)"
            )
        return tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
