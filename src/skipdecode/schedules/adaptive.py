"""Adaptive monotone SkipDecode: the batch's budget follows the model's confidence.

``budget(g+1) = min(budget(g), f(c_g))`` where ``c_g`` is the lowest top-1 probability among the
batch's live rows at step ``g`` and ``f(c) = min + round((max - min) * (1 - c) ** sharpness)``.
Budgets never increase and the batch shares one, so batching and KV caching need no
recomputation, exactly as in SkipDecode; the layout (warm-up + top layers) is SkipDecode's.

``sharpness`` sets how fast confidence buys layers back: 0 keeps ``max`` (no skipping beyond
it), large values drop to ``min`` at any confidence. Built from a target speedup, it is left
open and calibrated on validation prompts before decoding (``calibrate``, bisection on its log),
so ``adaptive_2x`` really costs about half the layers; the achieved speedup is recorded.

Training draws random non-increasing budget sequences of the expected generation length around
the target, a fresh draw per batch, so the model sees the budgets it will meet at decode time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..progress import progress
from .base import (
    PromptBatch,
    Schedule,
    ScheduleRun,
    StaticSchedule,
    batched_speedup,
    plan_loss_sums,
    require,
    round_half_up,
)
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
        sharpness: float | None = 1.0,
        target_speedup: float | None = None,
        expected_length: int | None = None,
    ):
        super().__init__(num_layers)
        check_budget_range(num_layers, warmup_layers, max_layers, min_layers)
        if sharpness is None:
            require(
                target_speedup is not None,
                "sharpness",
                sharpness,
                "must be >= 0, or null together with target_speedup (calibrated)",
            )
        else:
            require(
                isinstance(sharpness, (int, float)) and sharpness >= 0,
                "sharpness",
                sharpness,
                "must be a number >= 0 (0: always max_layers)",
            )
        self.warmup_layers, self.max_layers, self.min_layers = warmup_layers, max_layers, min_layers
        self.target_mean = (
            float(target_mean) if target_mean is not None else (max_layers + min_layers) / 2
        )
        self.sharpness = None if sharpness is None else float(sharpness)
        self.target_speedup = None if target_speedup is None else float(target_speedup)
        self.expected_length = None if expected_length is None else int(expected_length)

    def budget_for_confidence(self, confidence: float) -> int:
        c = min(1.0, max(0.0, confidence))
        share = (1.0 - c) ** self.sharpness if self.sharpness else 1.0
        return self.min_layers + round_half_up((self.max_layers - self.min_layers) * share)

    def start(self, batch_size: int) -> ScheduleRun:
        if self.sharpness is None:
            raise ValueError(
                "schedule.sharpness is null: calibrate it first (AdaptiveSchedule.calibrate; the "
                "evaluation stage does this on validation prompts)"
            )
        return _AdaptiveRun(self)

    @property
    def needs_calibration(self) -> bool:
        return self.sharpness is None

    def with_sharpness(self, sharpness: float) -> AdaptiveSchedule:
        return AdaptiveSchedule(
            self.num_layers,
            self.warmup_layers,
            self.max_layers,
            self.min_layers,
            self.target_mean,
            sharpness,
            self.target_speedup,
            self.expected_length,
        )

    def calibrate(
        self,
        decoder: SkipDecoder,
        batches: Sequence[PromptBatch],
        max_new_tokens: int,
        iterations: int = 8,
    ) -> tuple[AdaptiveSchedule, dict[str, Any]]:
        """Bisect ``log(sharpness)`` over [1e-3, 1e3] so the per-token theoretical speedup on
        these (validation) prompt batches is closest to ``target_speedup``."""
        if self.target_speedup is None:
            raise ValueError("schedule.target_speedup is not set: nothing to calibrate to")
        target = self.target_speedup

        def speedup(sharpness: float) -> float:
            return batched_speedup(decoder, self.with_sharpness(sharpness), batches, max_new_tokens)

        lo, hi = math.log(1e-3), math.log(1e3)  # speedup grows with sharpness
        best = (1.0, speedup(1.0))
        for _ in progress(range(iterations), "calibrating adaptive sharpness"):
            mid = math.exp((lo + hi) / 2)
            s = speedup(mid)
            if abs(s - target) < abs(best[1] - target):
                best = (mid, s)
            if s < target:
                lo = math.log(mid)
            else:
                hi = math.log(mid)
        info = {"sharpness": best[0], "theoretical_speedup": best[1], "target_speedup": target}
        return self.with_sharpness(best[0]), info

    def training_plan(
        self, generator: torch.Generator | None = None, length: int | None = None
    ) -> BudgetSchedule:
        """A random non-increasing budget sequence for one training batch, as long as the
        expected generation length (256 steps when the schedule was built without one)."""
        length = length or self.expected_length or 256
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
            "sharpness": self.sharpness,
            "target_speedup": self.target_speedup,
            "expected_length": self.expected_length,
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


def _sharpness(cfg: Mapping) -> float | None:
    """The config's sharpness; None (to be calibrated) with a target speedup and none given."""
    return cfg.get("sharpness", None if cfg.get("target_speedup") is not None else 1.0)


@register(
    "adaptive",
    method="adaptive skipdecode",
    settings=(
        "warmup_layers",
        "max_layers",
        "min_layers",
        "target_mean",
        "sharpness",
        "expected_length",
    ),
    calibrates=lambda cfg: _sharpness(cfg) is None,
)
def _build(cfg: Mapping, num_layers: int, expected_length: int | None) -> AdaptiveSchedule:
    """Explicit ``max_layers``/``min_layers``, or ``target_speedup`` (max/min from the linear
    target rule over the expected length, target mean ``L / s``)."""
    L, w, s = num_layers, int(cfg.get("warmup_layers", 1)), cfg.get("target_speedup")
    n = cfg.get("expected_length") or expected_length
    sharpness = _sharpness(cfg)
    if s is not None and cfg.get("max_layers") is None:
        lin = linear_for_speedup(L, float(s), int(n or 32), w)
        return AdaptiveSchedule(
            L,
            w,
            lin.max_layers,
            lin.min_layers,
            target_mean=L / float(s),
            sharpness=sharpness,
            target_speedup=float(s),
            expected_length=n,
        )
    return AdaptiveSchedule(
        L,
        w,
        int(cfg["max_layers"]),
        int(cfg["min_layers"]),
        cfg.get("target_mean"),
        sharpness=sharpness,
        target_speedup=None if s is None else float(s),
        expected_length=n,
    )
