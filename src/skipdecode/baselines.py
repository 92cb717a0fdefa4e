"""Static layer plans that SkipDecode is compared with, in the same harness.

- :class:`EarlyExitSchedule`: every generated token runs layers ``[0, k)`` then the final norm and
  the LM head (truncate the top).
- :class:`UnifiedSkipSchedule` (Liu et al. 2024, unified layer skipping): ``k`` evenly spaced
  layers including the bottom and the top, the same set at every position.
- :class:`PowerLawSchedule` (training-free position schedules such as D3): SkipDecode's warm-up +
  top-block layout with a budget that shrinks as a power of the position.
- :class:`BudgetSchedule`: SkipDecode's layout with an explicit non-increasing budget list (what an
  adaptive run recorded, or a random monotone draw for training).

All are non-increasing, so their active sets are nested and KV caching needs no recomputation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .schedules import Schedule, _linear_active, _require, _round_half_up, check_budget_range

__all__ = [
    "EarlyExitSchedule",
    "UnifiedSkipSchedule",
    "PowerLawSchedule",
    "BudgetSchedule",
    "layers_for_speedup",
    "power_law_for_speedup",
    "random_monotone_budgets",
]


def layers_for_speedup(num_layers: int, target_speedup: float, key: str = "target_speedup") -> int:
    """``round(L / s)`` layers (at least 1) for a constant-depth plan."""
    _require(
        isinstance(target_speedup, (int, float)) and target_speedup >= 1,
        key,
        target_speedup,
        "must be a number >= 1",
    )
    return max(1, _round_half_up(num_layers / target_speedup))


class EarlyExitSchedule(Schedule):
    """Static early exit: layers ``[0, exit_layers)`` for every generated token."""

    name = "early_exit"

    def __init__(self, num_layers: int, exit_layers: int):
        super().__init__(num_layers)
        _require(
            isinstance(exit_layers, int) and 1 <= exit_layers <= num_layers,
            "exit_layers",
            exit_layers,
            f"must be an integer in [1, {num_layers}] (the exit layer cannot be beyond the model)",
        )
        self.exit_layers = exit_layers

    def active_layers(self, step: int) -> tuple[int, ...]:
        return tuple(range(self.exit_layers))

    def describe(self) -> dict:
        return {"name": self.name, "num_layers": self.num_layers, "exit_layers": self.exit_layers}


class UnifiedSkipSchedule(Schedule):
    """``keep_layers`` evenly spaced layers (bottom and top included) at every position."""

    name = "unified"

    def __init__(self, num_layers: int, keep_layers: int):
        super().__init__(num_layers)
        _require(
            isinstance(keep_layers, int) and 1 <= keep_layers <= num_layers,
            "keep_layers",
            keep_layers,
            f"must be an integer in [1, {num_layers}]",
        )
        self.keep_layers = keep_layers
        if keep_layers == 1:
            kept = (num_layers - 1,)
        else:
            step = (num_layers - 1) / (keep_layers - 1)
            kept = tuple(sorted({_round_half_up(i * step) for i in range(keep_layers)}))
        self._kept = kept

    def active_layers(self, step: int) -> tuple[int, ...]:
        return self._kept

    def describe(self) -> dict:
        return {"name": self.name, "num_layers": self.num_layers, "keep_layers": self.keep_layers,
                "layers": list(self._kept)}


class PowerLawSchedule(Schedule):
    """``budget(g) = clamp(round(max * (1 + g) ** -alpha), min, max)`` with SkipDecode's layout."""

    name = "power_law"

    def __init__(self, num_layers: int, warmup_layers: int, max_layers: int, min_layers: int, alpha: float):
        super().__init__(num_layers)
        check_budget_range(num_layers, warmup_layers, max_layers, min_layers)
        _require(alpha >= 0, "alpha", alpha, "must be >= 0")
        self.warmup_layers, self.max_layers, self.min_layers = warmup_layers, max_layers, min_layers
        self.alpha = float(alpha)

    def budget(self, step: int) -> int:
        raw = _round_half_up(self.max_layers * (1 + step) ** (-self.alpha))
        return min(self.max_layers, max(self.min_layers, raw))

    def active_layers(self, step: int) -> tuple[int, ...]:
        return _linear_active(self.num_layers, self.warmup_layers, self.budget(step))

    def describe(self) -> dict:
        return {"name": self.name, "num_layers": self.num_layers, "warmup_layers": self.warmup_layers,
                "max_layers": self.max_layers, "min_layers": self.min_layers, "alpha": self.alpha}


def power_law_for_speedup(num_layers: int, target_speedup: float, expected_length: int,
                          warmup_layers: int = 1) -> PowerLawSchedule:
    """Start at every layer and fit ``alpha`` (bisection) so the mean budget over
    ``expected_length`` tokens is ``L / s`` (within 0.5 layer where the floor allows)."""
    L = num_layers
    target = L / float(target_speedup)
    floor = warmup_layers + 1
    _require(target >= floor - 0.5, "target_speedup", target_speedup,
             f"cannot be met with warmup_layers={warmup_layers} on a {L}-layer model")

    def make(alpha: float) -> PowerLawSchedule:
        return PowerLawSchedule(L, warmup_layers, L, floor, alpha)

    lo, hi = 0.0, 16.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if make(mid).mean_layers([expected_length]) > target:
            lo = mid
        else:
            hi = mid
    best = min((make(lo), make(hi)), key=lambda s: abs(s.mean_layers([expected_length]) - target))
    return best


class BudgetSchedule(Schedule):
    """SkipDecode's layout with explicit per-step budgets; the last budget holds afterwards."""

    name = "budgets"

    def __init__(self, num_layers: int, warmup_layers: int, budgets: Sequence[int]):
        super().__init__(num_layers)
        budgets = [int(b) for b in budgets]
        _require(len(budgets) > 0, "budgets", budgets, "needs at least one step")
        _require(all(b2 <= b1 for b1, b2 in zip(budgets, budgets[1:], strict=False)), "budgets",
                 budgets, "must never increase")
        _require(warmup_layers + 1 <= budgets[-1] and budgets[0] <= num_layers, "budgets", budgets,
                 f"must lie in [warmup_layers + 1, {num_layers}]")
        self.warmup_layers = warmup_layers
        self._budgets = budgets

    def budget(self, step: int) -> int:
        return self._budgets[min(step, len(self._budgets) - 1)]

    def active_layers(self, step: int) -> tuple[int, ...]:
        return _linear_active(self.num_layers, self.warmup_layers, self.budget(step))

    def describe(self) -> dict:
        return {"name": self.name, "num_layers": self.num_layers, "warmup_layers": self.warmup_layers,
                "budgets": list(self._budgets)}


def random_monotone_budgets(
    length: int, max_layers: int, min_layers: int, target: float, generator: torch.Generator
) -> list[int]:
    """A random non-increasing budget sequence whose mean is drawn around ``target``.

    Start in ``[target, max]``, drop by a random amount at random steps, never below
    ``min_layers``: the kinds of sequences an adaptive policy produces at decode time.
    """
    def uniform(a: float, b: float) -> float:
        return a + (b - a) * float(torch.rand((), generator=generator))

    start = _round_half_up(uniform(max(min_layers, target), max_layers))
    drops = max(1, int(math.ceil(uniform(0.5, 2.0) * (start - min_layers + 1))))
    budgets, b = [], start
    drop_p = min(1.0, drops / max(1, length))
    for _ in range(length):
        budgets.append(b)
        if float(torch.rand((), generator=generator)) < drop_p:
            b = max(min_layers, b - _round_half_up(uniform(1, 3)))
    return budgets
