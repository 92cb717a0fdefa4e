"""The device clock every timing in the engine reads, and the eval mode a generation runs in."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["eval_mode", "now"]


def now(device: torch.device) -> float:
    """Seconds on a monotonic clock after the device's queued work (a GPU is synchronised)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode for the block, then back to the mode it had."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
