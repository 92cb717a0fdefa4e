"""The state a speculative decode carries between rounds: the live rows, what a round leaves
behind for inspection, and the clock that splits a round's time into its parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .clock import now

__all__ = ["PhaseClock", "RoundView", "Rows"]


@dataclass(frozen=True)
class RoundView:
    """The state after a round: ``cache`` (live rows only), which original row each cache row
    is, each row's visible cache columns ``(n, columns)`` and its generated length (its last
    token is not in the cache yet)."""

    cache: Any
    rows: torch.Tensor
    visible: torch.Tensor
    lengths: torch.Tensor


@dataclass
class Rows:
    """The live rows' state (original row index, lengths, positions, key visibility)."""

    rows: torch.Tensor  # (n,) index into the original batch
    token: torch.Tensor  # (n,) last chosen token, not yet in the cache
    lengths: torch.Tensor  # (n,) tokens generated so far
    valid: torch.Tensor  # (n,) real prompt tokens
    visible: torch.Tensor  # (n, capacity) bool: cache columns this row may attend to
    finished: torch.Tensor  # (n,) bool
    eos: torch.Tensor
    new_tokens: torch.Tensor | None = None  # (n, m + 1) this round's emitted tokens
    new_counts: torch.Tensor | None = None  # (n,)

    @classmethod
    def start(cls, input_ids, attention_mask, token, eos) -> Rows:
        B, P = input_ids.shape
        visible = torch.zeros(B, P, dtype=torch.bool, device=input_ids.device)
        visible[:, :P] = attention_mask.bool()
        return cls(
            rows=torch.arange(B, device=input_ids.device),
            token=token,
            lengths=torch.ones(B, dtype=torch.long, device=input_ids.device),
            valid=attention_mask.long().sum(-1),
            visible=visible,
            finished=torch.isin(token, eos),
            eos=eos,
        )

    def select(self, keep: torch.Tensor) -> Rows:
        return Rows(
            rows=self.rows[keep],
            token=self.token[keep],
            lengths=self.lengths[keep],
            valid=self.valid[keep],
            visible=self.visible[keep],
            finished=self.finished[keep],
            eos=self.eos,
        )

    def reserve(self, columns: int) -> None:
        extra = columns - self.visible.shape[1]
        if extra > 0:
            self.visible = torch.cat(
                [self.visible, self.visible.new_zeros(len(self.rows), extra)], 1
            )


class PhaseClock:
    """Adds the time since its last lap to a named phase (a no-op without a ``seconds`` dict)."""

    def __init__(self, device: torch.device, seconds: dict[str, float] | None):
        self.device, self.seconds = device, seconds
        self.last = now(device) if seconds is not None else 0.0

    def lap(self, phase: str) -> None:
        if self.seconds is None:
            return
        t = now(self.device)
        self.seconds[phase] = self.seconds.get(phase, 0.0) + t - self.last
        self.last = t
