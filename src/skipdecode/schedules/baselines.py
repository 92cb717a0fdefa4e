"""Static layer plans that SkipDecode is compared with, in the same harness.

- :class:`FullSchedule`: every layer at every step (the ordinary model, the baseline).
- :class:`EarlyExitSchedule`: every generated token runs layers ``[0, k)`` then the final norm and
  the LM head (truncate the top).
- :class:`UnifiedSkipSchedule` (Liu et al. 2024, unified layer skipping): ``k`` evenly spaced
  layers including the bottom and the top, the same set at every position.
- :class:`PowerLawSchedule` (training-free position schedules such as D3): SkipDecode's warm-up +
  top-block layout with a budget that shrinks as a power of the position.

All are non-increasing, so their active sets are nested and KV caching needs no recomputation.
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import ScheduleError, StaticSchedule, require, round_half_up, setting
from .layout import check_budget_range, layout_layers
from .registry import register

__all__ = [
    "FullSchedule",
    "EarlyExitSchedule",
    "UnifiedSkipSchedule",
    "PowerLawSchedule",
    "layers_for_speedup",
    "power_law_for_speedup",
]


class FullSchedule(StaticSchedule):
    """Every layer at every step: the ordinary model."""

    name = "full"
    runs_every_layer = True

    def active_layers(self, step: int) -> tuple[int, ...]:
        return tuple(range(self.num_layers))


def layers_for_speedup(num_layers: int, target_speedup: float, key: str = "target_speedup") -> int:
    """``round(L / s)`` layers (at least 1) for a constant-depth plan."""
    require(
        isinstance(target_speedup, (int, float)) and target_speedup >= 1,
        key,
        target_speedup,
        "must be a number >= 1",
    )
    return max(1, round_half_up(num_layers / target_speedup))


class EarlyExitSchedule(StaticSchedule):
    """Static early exit: layers ``[0, exit_layers)`` for every generated token."""

    name = "early_exit"

    def __init__(self, num_layers: int, exit_layers: int):
        super().__init__(num_layers)
        require(
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


class UnifiedSkipSchedule(StaticSchedule):
    """``keep_layers`` evenly spaced layers (bottom and top included) at every position."""

    name = "unified"

    def __init__(self, num_layers: int, keep_layers: int):
        super().__init__(num_layers)
        require(
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
            kept = tuple(sorted({round_half_up(i * step) for i in range(keep_layers)}))
        self._kept = kept

    def active_layers(self, step: int) -> tuple[int, ...]:
        return self._kept

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "keep_layers": self.keep_layers,
            "layers": list(self._kept),
        }


class PowerLawSchedule(StaticSchedule):
    """``budget(g) = clamp(round(max * (1 + g) ** -alpha), min, max)`` with SkipDecode's layout."""

    name = "power_law"

    def __init__(
        self, num_layers: int, warmup_layers: int, max_layers: int, min_layers: int, alpha: float
    ):
        super().__init__(num_layers)
        check_budget_range(num_layers, warmup_layers, max_layers, min_layers)
        require(alpha >= 0, "alpha", alpha, "must be >= 0")
        self.warmup_layers, self.max_layers, self.min_layers = warmup_layers, max_layers, min_layers
        self.alpha = float(alpha)

    def budget(self, step: int) -> int:
        raw = round_half_up(self.max_layers * (1 + step) ** (-self.alpha))
        return min(self.max_layers, max(self.min_layers, raw))

    def active_layers(self, step: int) -> tuple[int, ...]:
        return layout_layers(self.num_layers, self.warmup_layers, self.budget(step))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "warmup_layers": self.warmup_layers,
            "max_layers": self.max_layers,
            "min_layers": self.min_layers,
            "alpha": self.alpha,
        }


def power_law_for_speedup(
    num_layers: int, target_speedup: float, expected_length: int, warmup_layers: int = 1
) -> PowerLawSchedule:
    """Start at every layer and fit ``alpha`` (bisection) so the mean budget over
    ``expected_length`` tokens is ``L / s`` (within 0.5 layer where the floor allows)."""
    L = num_layers
    target = L / float(target_speedup)
    floor = warmup_layers + 1
    require(
        target >= floor - 0.5,
        "target_speedup",
        target_speedup,
        f"cannot be met with warmup_layers={warmup_layers} on a {L}-layer model",
    )

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


@register("early_exit", method="early exit", settings=("exit_layers",))
def _build_early_exit(
    cfg: Mapping, num_layers: int, expected_length: int | None
) -> EarlyExitSchedule:
    k = setting(cfg, "exit_layers", int, "a layer count (an integer)", None)
    if k is None:  # unset: from the target speedup (0 is refused by the schedule, not ignored)
        k = layers_for_speedup(num_layers, cfg.get("target_speedup"))
    return EarlyExitSchedule(num_layers, k)


@register("unified", method="unified skip", settings=("keep_layers", "layers"))
def _build_unified(
    cfg: Mapping, num_layers: int, expected_length: int | None
) -> UnifiedSkipSchedule:
    k = setting(cfg, "keep_layers", int, "a layer count (an integer)", None)
    if k is None:  # unset: from the target speedup (0 is refused by the schedule, not ignored)
        k = layers_for_speedup(num_layers, cfg.get("target_speedup"))
    return UnifiedSkipSchedule(num_layers, k)


@register(
    "power_law",
    method="power law",
    settings=("warmup_layers", "alpha", "max_layers", "min_layers", "expected_length"),
)
def _build_power_law(
    cfg: Mapping, num_layers: int, expected_length: int | None
) -> PowerLawSchedule:
    L, w = num_layers, int(cfg.get("warmup_layers", 1))
    if cfg.get("alpha") is not None:
        max_layers, min_layers = int(cfg.get("max_layers", L)), int(cfg.get("min_layers", w + 1))
        return PowerLawSchedule(L, w, max_layers, min_layers, float(cfg["alpha"]))
    s, n = cfg.get("target_speedup"), cfg.get("expected_length") or expected_length
    if s is None or n is None:
        raise ScheduleError(
            "schedule.name=power_law needs alpha, or target_speedup and the expected length"
        )
    return power_law_for_speedup(L, float(s), int(n), w)


@register("full", method="full", settings=())
def _build_full(cfg: Mapping, num_layers: int, expected_length: int | None) -> FullSchedule:
    return FullSchedule(num_layers)
