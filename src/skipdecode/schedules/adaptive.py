"""Adaptive monotone SkipDecode: the batch's budget follows the model's confidence.

``budget(g+1) = min(budget(g), f(c_g))`` where ``c_g`` is the lowest top-1 probability among the
batch's live rows at step ``g`` and ``f(c) = min + round((max - min) * (1 - c))``. Budgets never
increase and the batch shares one, so batching and KV caching need no recomputation, exactly as
in SkipDecode; the layout (warm-up + top layers) is SkipDecode's.

Training draws random non-increasing budget sequences around the target, a fresh draw per batch,
so the model sees the budgets it will meet at decode time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from .base import Schedule, ScheduleRun, StaticSchedule, plan_loss_sums, round_half_up
from .layout import (
    BudgetSchedule,
    LinearSchedule,
    check_budget_range,
    layout_layers,
    linear_for_speedup,
)
from .registry import register

if TYPE_CHECKING:
    from ..core.engine import SkipDecoder

__all__ = ["AdaptiveSchedule", "random_monotone_budgets"]


class _AdaptiveRun(ScheduleRun):
    def __init__(self, schedule: AdaptiveSchedule):
        self.schedule = schedule
        self.budget = schedule.max_layers

    def plan(self, step: int) -> tuple[int, ...]:
        s = self.schedule
        return layout_layers(s.num_layers, s.warmup_layers, self.budget)

    def observe(self, step: int, logits: torch.Tensor, live: torch.Tensor) -> None:
        if not bool(live.any()):
            return
        conf = logits.float().softmax(-1).amax(-1)[live].min()  # a host sync, once per step
        self.budget = min(self.budget, self.schedule.budget_for_confidence(float(conf)))


class AdaptiveSchedule(Schedule):
    """Adaptive monotone SkipDecode (see module docstring)."""

    name = "adaptive"

    def __init__(
        self,
        num_layers: int,
        warmup_layers: int,
        max_layers: int,
        min_layers: int,
        target_mean: float | None = None,
    ):
        super().__init__(num_layers)
        check_budget_range(num_layers, warmup_layers, max_layers, min_layers)
        self.warmup_layers, self.max_layers, self.min_layers = warmup_layers, max_layers, min_layers
        self.target_mean = (
            float(target_mean) if target_mean is not None else (max_layers + min_layers) / 2
        )

    def budget_for_confidence(self, confidence: float) -> int:
        c = min(1.0, max(0.0, confidence))
        return self.min_layers + round_half_up((self.max_layers - self.min_layers) * (1.0 - c))

    def start(self, batch_size: int) -> ScheduleRun:
        return _AdaptiveRun(self)

    def training_plan(
        self, generator: torch.Generator | None = None, length: int = 256
    ) -> BudgetSchedule:
        """A random non-increasing budget sequence for one training batch."""
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        budgets = random_monotone_budgets(
            length, self.max_layers, self.min_layers, self.target_mean, gen
        )
        return BudgetSchedule(self.num_layers, self.warmup_layers, budgets)

    def loss_sums(
        self,
        decoder: SkipDecoder,
        batch: Mapping[str, torch.Tensor],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return plan_loss_sums(decoder, batch, self.training_plan(generator))

    def validation_plan(self, expected_length: int | None = None) -> StaticSchedule:
        """A fixed linear proxy from ``max_layers`` to ``min_layers`` over the expected length."""
        return LinearSchedule(
            self.num_layers,
            self.warmup_layers,
            self.max_layers,
            self.min_layers,
            int(expected_length or 32),
        )

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "warmup_layers": self.warmup_layers,
            "max_layers": self.max_layers,
            "min_layers": self.min_layers,
            "target_mean": self.target_mean,
        }


def random_monotone_budgets(
    length: int, max_layers: int, min_layers: int, target: float, generator: torch.Generator
) -> list[int]:
    """A random non-increasing budget sequence whose mean is drawn around ``target``.

    Start in ``[target, max]``, drop by a random amount at random steps, never below
    ``min_layers``: the kinds of sequences the adaptive schedule produces at decode time.
    """

    def uniform(a: float, b: float) -> float:
        return a + (b - a) * float(torch.rand((), generator=generator))

    start = round_half_up(uniform(max(min_layers, target), max_layers))
    drops = max(1, int(math.ceil(uniform(0.5, 2.0) * (start - min_layers + 1))))
    budgets, b = [], start
    drop_p = min(1.0, drops / max(1, length))
    for _ in range(length):
        budgets.append(b)
        if float(torch.rand((), generator=generator)) < drop_p:
            b = max(min_layers, b - round_half_up(uniform(1, 3)))
    return budgets


@register("adaptive", method="adaptive skipdecode")
def _build(cfg: Mapping, num_layers: int, expected_length: int | None) -> AdaptiveSchedule:
    """Explicit ``max_layers``/``min_layers``, or ``target_speedup`` (max/min from the linear
    target rule over the expected length, target mean ``L / s``)."""
    L, w, s = num_layers, int(cfg.get("warmup_layers", 1)), cfg.get("target_speedup")
    if s is not None and cfg.get("max_layers") is None:
        n = cfg.get("expected_length") or expected_length or 32
        lin = linear_for_speedup(L, float(s), int(n), w)
        return AdaptiveSchedule(L, w, lin.max_layers, lin.min_layers, target_mean=L / float(s))
    return AdaptiveSchedule(
        L, w, int(cfg["max_layers"]), int(cfg["min_layers"]), cfg.get("target_mean")
    )
