"""SkipDecode's layer layout and its linear decay (Del Corro et al., 2023).

A step ``g`` gets a *budget* ``b(g)`` that never increases with ``g``. The token runs the bottom
``w`` warm-up layers and the top ``b(g) - w`` layers; everything between is bypassed (the
residual stream passes through). Because budgets only shrink, the active sets are nested: a
layer skipped once is skipped for good, so it writes no KV and nothing reads KV it lacks.

- :class:`LinearSchedule`: the paper's linear decay from ``max_layers`` to ``min_layers``.
- :func:`linear_for_speedup`: the target-speedup rule that builds one for any model.
- :class:`BudgetSchedule`: the same layout with explicit budgets (what an adaptive run
  recorded, or a random monotone draw for training).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .base import ScheduleError, StaticSchedule, require, round_half_up, setting
from .registry import register

__all__ = [
    "LinearSchedule",
    "BudgetSchedule",
    "check_budget_range",
    "layout_layers",
    "linear_for_speedup",
]


@lru_cache(maxsize=4096)
def layout_layers(num_layers: int, warmup_layers: int, budget: int) -> tuple[int, ...]:
    """The active layers of a ``budget``: warm-up ``[0, w)`` plus the top ``budget - w``."""
    return tuple(range(warmup_layers)) + tuple(
        range(num_layers - budget + warmup_layers, num_layers)
    )


def check_budget_range(
    num_layers: int, warmup_layers: int, max_layers: int, min_layers: int
) -> None:
    """Validate SkipDecode's layout parameters (budgets include the warm-up layers)."""
    L = num_layers
    require(
        isinstance(warmup_layers, int) and 0 <= warmup_layers < L,
        "warmup_layers",
        warmup_layers,
        f"must be an integer in [0, {L - 1}] for a {L}-layer model",
    )
    require(
        isinstance(max_layers, int) and 1 <= max_layers <= L,
        "max_layers",
        max_layers,
        f"must be an integer in [1, {L}] for a {L}-layer model",
    )
    require(
        isinstance(min_layers, int) and min_layers <= max_layers,
        "min_layers",
        min_layers,
        f"must be an integer <= max_layers={max_layers}",
    )
    # The token always leaves through the top layer, so every budget keeps at least one layer
    # above the warm-up block.
    require(
        min_layers >= warmup_layers + 1,
        "min_layers",
        min_layers,
        f"must be >= warmup_layers + 1 = {warmup_layers + 1} "
        "(budgets include the warm-up layers and always keep the top layer)",
    )


class LinearSchedule(StaticSchedule):
    """SkipDecode's linear decay.

    ``budget(g) = round(max - (max - min) * min(g, T) / T)``; active layers at step ``g`` are the
    warm-up layers ``[0, w)`` plus the top ``budget(g) - w`` layers ``[L - budget(g) + w, L)``.
    Budgets include the warm-up layers.
    """

    name = "linear"

    def __init__(
        self,
        num_layers: int,
        warmup_layers: int,
        max_layers: int,
        min_layers: int,
        decay_tokens: int,
    ):
        super().__init__(num_layers)
        check_budget_range(num_layers, warmup_layers, max_layers, min_layers)
        require(
            isinstance(decay_tokens, int) and decay_tokens >= 1,
            "decay_tokens",
            decay_tokens,
            "must be an integer >= 1",
        )
        self.warmup_layers = warmup_layers
        self.max_layers = max_layers
        self.min_layers = min_layers
        self.decay_tokens = decay_tokens

    def budget(self, step: int) -> int:
        require(step >= 0, "step", step, "must be >= 0")
        T = self.decay_tokens
        frac = min(step, T) / T
        return round_half_up(self.max_layers - (self.max_layers - self.min_layers) * frac)

    def active_layers(self, step: int) -> tuple[int, ...]:
        return layout_layers(self.num_layers, self.warmup_layers, self.budget(step))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "warmup_layers": self.warmup_layers,
            "max_layers": self.max_layers,
            "min_layers": self.min_layers,
            "decay_tokens": self.decay_tokens,
        }


class BudgetSchedule(StaticSchedule):
    """SkipDecode's layout with explicit per-step budgets; the last budget holds afterwards."""

    name = "budgets"

    def __init__(self, num_layers: int, warmup_layers: int, budgets: Sequence[int]):
        super().__init__(num_layers)
        budgets = [int(b) for b in budgets]
        require(len(budgets) > 0, "budgets", budgets, "needs at least one step")
        require(
            all(b2 <= b1 for b1, b2 in zip(budgets, budgets[1:], strict=False)),
            "budgets",
            budgets,
            "must never increase",
        )
        require(
            warmup_layers + 1 <= budgets[-1] and budgets[0] <= num_layers,
            "budgets",
            budgets,
            f"must lie in [warmup_layers + 1, {num_layers}]",
        )
        self.warmup_layers = warmup_layers
        self._budgets = budgets

    def budget(self, step: int) -> int:
        return self._budgets[min(step, len(self._budgets) - 1)]

    def active_layers(self, step: int) -> tuple[int, ...]:
        return layout_layers(self.num_layers, self.warmup_layers, self.budget(step))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "warmup_layers": self.warmup_layers,
            "budgets": list(self._budgets),
        }


@dataclass(frozen=True)
class _Fit:
    schedule: LinearSchedule
    mean_budget: float


def linear_for_speedup(
    num_layers: int,
    target_speedup: float,
    expected_length: int,
    warmup_layers: int = 1,
    spread: float = 0.5,
    lengths: Sequence[int] | None = None,
) -> LinearSchedule:
    """Build a linear schedule whose mean budget over ``expected_length`` steps is ``L / s``.

    The rule (documented in docs/SCHEDULES.md):
      1. target mean budget ``B = L / s``; decay over the expected length, ``T = N``;
      2. start high: ``max = min(L, round(B * (1 + spread)))``;
      3. choose ``min`` (>= w + 1, <= max) whose exact mean budget over N steps, with the
         schedule's own rounding, is closest to ``B``;
      4. if even ``min = w + 1`` leaves the mean above ``B + 0.5``, lower ``max`` one at a time.
    The result's mean budget is within 0.5 layer of ``B`` (rounding); otherwise an error says
    the target cannot be met with ``w`` warm-up layers. With ``lengths`` (e.g. every target
    length of the validation split), steps 3-4 fit the mean budget per generated token over
    sequences of those lengths instead of one sequence of ``N`` tokens.
    """
    L = num_layers
    require(
        isinstance(target_speedup, (int, float)) and target_speedup >= 1,
        "target_speedup",
        target_speedup,
        "must be a number >= 1",
    )
    require(
        isinstance(expected_length, int) and expected_length >= 1,
        "expected_length",
        expected_length,
        "must be an integer >= 1 (e.g. the median target length in tokens)",
    )
    require(spread >= 0, "spread", spread, "must be >= 0")
    require(
        isinstance(warmup_layers, int) and 0 <= warmup_layers < L,
        "warmup_layers",
        warmup_layers,
        f"must be an integer in [0, {L - 1}] for a {L}-layer model",
    )
    target = L / float(target_speedup)
    lowest = warmup_layers + 1
    if target < lowest - 0.5:
        raise ScheduleError(
            f"schedule.target_speedup={target_speedup!r} cannot be met with "
            f"warmup_layers={warmup_layers} on a {L}-layer model: the smallest budget is "
            f"{lowest} layers (speedup at most {L / lowest:.2f}x); lower the speedup or the "
            "warm-up layers"
        )
    if target_speedup == 1:
        return LinearSchedule(L, warmup_layers, L, L, expected_length)

    N = expected_length
    fitted = [N] if lengths is None else [int(n) for n in lengths]
    best: _Fit | None = None
    top = max(lowest, min(L, round_half_up(target * (1 + spread))))
    for max_layers in range(top, lowest - 1, -1):
        for min_layers in range(lowest, max_layers + 1):
            sched = LinearSchedule(L, warmup_layers, max_layers, min_layers, N)
            mean = sched.mean_layers(fitted)
            if best is None or abs(mean - target) < abs(best.mean_budget - target) - 1e-12:
                best = _Fit(sched, mean)
        if best is not None and abs(best.mean_budget - target) <= 0.5:
            return best.schedule
    assert best is not None
    raise ScheduleError(
        f"schedule.target_speedup={target_speedup!r} cannot be met within rounding on a "
        f"{L}-layer model with warmup_layers={warmup_layers} over "
        f"{f'{N} tokens' if lengths is None else f'{len(fitted)} sequences'} "
        f"(closest mean budget {best.mean_budget:.2f} vs target {target:.2f})"
    )


@register(
    "linear",
    method="skipdecode",
    settings=("warmup_layers", "max_layers", "min_layers", "decay_tokens"),
)
def _build_linear(cfg: Mapping, num_layers: int, expected_length: int | None) -> LinearSchedule:
    """``{name: linear, warmup_layers, max_layers, min_layers, decay_tokens}``."""
    layers = "a layer count (an integer)"
    return LinearSchedule(
        num_layers,
        warmup_layers=setting(cfg, "warmup_layers", int, layers),
        max_layers=setting(cfg, "max_layers", int, layers),
        min_layers=setting(cfg, "min_layers", int, layers),
        decay_tokens=setting(cfg, "decay_tokens", int, "a number of generated tokens"),
    )


@register("budgets", method="skipdecode", settings=("budgets", "warmup_layers"))
def _build_budgets(cfg: Mapping, num_layers: int, expected_length: int | None) -> BudgetSchedule:
    """``{name: budgets, budgets: [b0, b1, ...], warmup_layers?}``: explicit per-step budgets,
    the last one held; ``budgets: [b]`` is a constant budget (e.g. a lossless-mode draft)."""
    budgets = cfg.get("budgets")
    require(
        isinstance(budgets, Sequence) and not isinstance(budgets, str) and len(budgets) > 0,
        "budgets",
        budgets,
        "a non-empty list of layer counts, e.g. [8]",
    )
    warmup = setting(cfg, "warmup_layers", int, "a layer count (an integer)", 1)
    return BudgetSchedule(num_layers, warmup, list(budgets))


@register("target", method="skipdecode", settings=("warmup_layers", "spread", "expected_length"))
def _build_target(cfg: Mapping, num_layers: int, expected_length: int | None) -> LinearSchedule:
    """``{name: target, target_speedup, warmup_layers?, spread?, expected_length?, lengths?}``:
    built for the model at hand; ``expected_length`` defaults to the caller's (the dataset's
    median); ``lengths`` is the fitting rule (:data:`LENGTH_RULES`), which ``build_schedule``
    replaces by the lengths themselves for ``validation``."""
    fitted = cfg.get("lengths")
    n = cfg.get("expected_length") or expected_length
    if n is None:
        raise ScheduleError(
            "schedule.expected_length is not set: a target-speedup schedule needs the "
            "expected generation length (the dataset's median target length in tokens)"
        )
    return linear_for_speedup(
        num_layers,
        target_speedup=setting(cfg, "target_speedup", float, "a number >= 1, e.g. 2"),
        expected_length=int(n),
        warmup_layers=setting(cfg, "warmup_layers", int, "a layer count (an integer)", 1),
        spread=setting(cfg, "spread", float, "a number in [0, 1]", 0.5),
        lengths=fitted if isinstance(fitted, (list, tuple)) else None,
    )
