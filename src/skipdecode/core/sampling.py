"""Next-token selection: greedy by default, temperature / top-p sampling with a seed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SamplingConfig", "select_next", "probabilities"]


@dataclass(frozen=True)
class SamplingConfig:
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature!r} is not allowed: must be > 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p!r} is not allowed: must be in (0, 1]")

    def generator(self, device: torch.device) -> torch.Generator | None:
        if not self.do_sample:
            return None
        gen = torch.Generator(device=device)
        gen.manual_seed(0 if self.seed is None else int(self.seed))
        return gen


def select_next(
    logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None
) -> torch.Tensor:
    """Pick one token per row from ``(B, V)`` logits."""
    if not cfg.do_sample:
        return logits.argmax(dim=-1)
    return torch.multinomial(probabilities(logits, cfg), 1, generator=generator).squeeze(-1)


def probabilities(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """The distribution ``(..., V)`` sampling draws from: temperature, then top-p (float32)."""
    scores = logits.float() / cfg.temperature
    if cfg.top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        # Drop tokens once the mass before them already reaches top_p; always keep the best.
        drop = (cum - sorted_scores.softmax(-1)) >= cfg.top_p
        drop[..., 0] = False
        sorted_scores = sorted_scores.masked_fill(drop, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    return scores.softmax(-1)
