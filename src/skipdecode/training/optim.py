"""Learning-rate schedule for fine-tuning: linear warm-up, then cosine / linear decay (or constant).

Built from ``conf/train.yaml``'s ``scheduler`` node (``_partial_: true``) inside the module.
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

__all__ = ["warmup_decay_schedule"]


def warmup_decay_schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int = 0,
    decay: str = "cosine",
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Linear warm-up over ``warmup_steps``, then ``cosine``/``linear`` decay to
    ``min_lr_ratio * lr`` at ``total_steps`` (or ``constant``)."""
    if decay not in ("cosine", "linear", "constant"):
        raise ValueError(
            f"scheduler.decay={decay!r} is not allowed; choose cosine, linear or constant"
        )
    if warmup_steps < 0 or not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(
            f"scheduler.warmup_steps={warmup_steps} must be >= 0 and "
            f"scheduler.min_lr_ratio={min_lr_ratio} in [0, 1]"
        )
    total = max(1, int(total_steps))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if decay == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total - warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if decay == "cosine" else 1 - progress
        return min_lr_ratio + (1 - min_lr_ratio) * shape

    return LambdaLR(optimizer, factor)
