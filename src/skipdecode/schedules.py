"""Skip schedules: which decoder layers run at each generation step.

Step ``g = 0`` is the first generated token *as an input position*. The prompt always runs all
layers (its last position predicts token 0); the forward pass over token ``g`` runs the layers
of step ``g``. In a teacher-forced batch (prompt + target), target token ``g`` sits at step ``g``.

A SkipDecode schedule gives step ``g`` a *budget* ``b(g)`` that never increases with ``g``. The
token runs the bottom ``w`` warm-up layers and the top ``b(g) - w`` layers; everything between is
bypassed (the residual stream passes through). Because budgets only shrink, the active sets are
nested, ``S(g+1) ⊆ S(g)``: a layer skipped once is skipped for good, so it writes no KV and
nothing ever needs to read KV it does not have.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

__all__ = [
    "Schedule",
    "FullSchedule",
    "LinearSchedule",
    "ScheduleError",
    "linear_for_speedup",
    "build_schedule",
    "position_layer_mask",
    "SCHEDULE_NAMES",
]


class ScheduleError(ValueError):
    """A schedule setting is out of its allowed range."""


def _round_half_up(x: float) -> int:
    # Python's round() rounds half to even; half-up keeps a decreasing function non-increasing
    # and is what one computes by hand.
    return int(math.floor(x + 0.5))


def _require(ok: bool, key: str, value: object, allowed: str) -> None:
    if not ok:
        raise ScheduleError(f"schedule.{key}={value!r} is not allowed: {allowed}")


def check_budget_range(num_layers: int, warmup_layers: int, max_layers: int, min_layers: int) -> None:
    """Validate SkipDecode's layout parameters (budgets include the warm-up layers)."""
    L = num_layers
    _require(
        isinstance(warmup_layers, int) and 0 <= warmup_layers < L,
        "warmup_layers",
        warmup_layers,
        f"must be an integer in [0, {L - 1}] for a {L}-layer model",
    )
    _require(
        isinstance(max_layers, int) and 1 <= max_layers <= L,
        "max_layers",
        max_layers,
        f"must be an integer in [1, {L}] for a {L}-layer model",
    )
    _require(
        isinstance(min_layers, int) and min_layers <= max_layers,
        "min_layers",
        min_layers,
        f"must be an integer <= max_layers={max_layers}",
    )
    # The token always leaves through the top layer, so every budget keeps at least one layer
    # above the warm-up block.
    _require(
        min_layers >= warmup_layers + 1,
        "min_layers",
        min_layers,
        f"must be >= warmup_layers + 1 = {warmup_layers + 1} "
        "(budgets include the warm-up layers and always keep the top layer)",
    )


class Schedule(ABC):
    """A static, position-based layer plan for an ``num_layers``-layer model."""

    name: str = "schedule"

    def __init__(self, num_layers: int):
        _require(
            isinstance(num_layers, int) and num_layers >= 1,
            "num_layers",
            num_layers,
            "must be an integer >= 1",
        )
        self.num_layers = num_layers

    # -- the one thing a subclass defines ---------------------------------------------------
    @abstractmethod
    def active_layers(self, step: int) -> tuple[int, ...]:
        """Sorted indices of the layers that run at generation step ``step`` (>= 0)."""

    # -- derived views ----------------------------------------------------------------------
    def budget(self, step: int) -> int:
        """Number of layers run at ``step``."""
        return len(self.active_layers(step))

    def budgets(self, steps: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Per-step budgets, shape ``(len(steps),)``."""
        return torch.tensor([self.budget(int(s)) for s in _as_list(steps)], dtype=torch.long)

    def layer_mask(self, steps: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Boolean active-layer mask, shape ``(len(steps), num_layers)``."""
        steps = _as_list(steps)
        mask = torch.zeros(len(steps), self.num_layers, dtype=torch.bool)
        for i, s in enumerate(steps):
            mask[i, list(self.active_layers(int(s)))] = True
        return mask

    def mean_layers(self, lengths: Sequence[int]) -> float:
        """Mean layers run per generated token over sequences of the given lengths."""
        lengths = [int(n) for n in lengths]
        _require(
            len(lengths) > 0 and all(n >= 0 for n in lengths) and sum(lengths) > 0,
            "lengths",
            lengths,
            "need at least one generated token and no negative lengths",
        )
        longest = max(lengths)
        per_step = self.budgets(range(longest)).tolist()
        prefix = [0]
        for b in per_step:
            prefix.append(prefix[-1] + b)
        return sum(prefix[n] for n in lengths) / sum(lengths)

    def theoretical_speedup(self, lengths: Sequence[int]) -> float:
        """``num_layers / mean layers per generated token`` (the paper's speedup)."""
        return self.num_layers / self.mean_layers(lengths)

    def describe(self) -> dict:
        """Plain-data description, recorded with every result."""
        return {"name": self.name, "num_layers": self.num_layers}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.describe().items() if k != "name")
        return f"{type(self).__name__}({args})"


class FullSchedule(Schedule):
    """Every layer at every step: the ordinary model."""

    name = "full"

    def active_layers(self, step: int) -> tuple[int, ...]:
        return tuple(range(self.num_layers))


class LinearSchedule(Schedule):
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
        _require(
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
        _require(step >= 0, "step", step, "must be >= 0")
        T = self.decay_tokens
        frac = min(step, T) / T
        return _round_half_up(self.max_layers - (self.max_layers - self.min_layers) * frac)

    def active_layers(self, step: int) -> tuple[int, ...]:
        return _linear_active(self.num_layers, self.warmup_layers, self.budget(step))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "warmup_layers": self.warmup_layers,
            "max_layers": self.max_layers,
            "min_layers": self.min_layers,
            "decay_tokens": self.decay_tokens,
        }


@lru_cache(maxsize=4096)
def _linear_active(num_layers: int, warmup: int, budget: int) -> tuple[int, ...]:
    return tuple(range(warmup)) + tuple(range(num_layers - budget + warmup, num_layers))


def _as_list(steps: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(steps, torch.Tensor):
        return [int(s) for s in steps.flatten().tolist()]
    return [int(s) for s in steps]


# --------------------------------------------------------------------------------------------
# Construction from a target speedup
# --------------------------------------------------------------------------------------------


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
) -> LinearSchedule:
    """Build a linear schedule whose mean budget over ``expected_length`` steps is ``L / s``.

    The rule (documented in README):
      1. target mean budget ``B = L / s``; decay over the expected length, ``T = N``;
      2. start high: ``max = min(L, round(B * (1 + spread)))``;
      3. choose ``min`` (>= w + 1, <= max) whose exact mean budget over N steps, with the
         schedule's own rounding, is closest to ``B``;
      4. if even ``min = w + 1`` leaves the mean above ``B + 0.5``, lower ``max`` one at a time.
    The result's mean budget is within 0.5 layer of ``B`` (rounding); otherwise an error says
    the target cannot be met with ``w`` warm-up layers.
    """
    L = num_layers
    _require(
        isinstance(target_speedup, (int, float)) and target_speedup >= 1,
        "target_speedup",
        target_speedup,
        "must be a number >= 1",
    )
    _require(
        isinstance(expected_length, int) and expected_length >= 1,
        "expected_length",
        expected_length,
        "must be an integer >= 1 (e.g. the median target length in tokens)",
    )
    _require(spread >= 0, "spread", spread, "must be >= 0")
    _require(
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
    best: _Fit | None = None
    top = max(lowest, min(L, _round_half_up(target * (1 + spread))))
    for max_layers in range(top, lowest - 1, -1):
        for min_layers in range(lowest, max_layers + 1):
            sched = LinearSchedule(L, warmup_layers, max_layers, min_layers, N)
            mean = sched.mean_layers([N])
            if best is None or abs(mean - target) < abs(best.mean_budget - target) - 1e-12:
                best = _Fit(sched, mean)
        if best is not None and abs(best.mean_budget - target) <= 0.5:
            return best.schedule
    assert best is not None
    raise ScheduleError(
        f"schedule.target_speedup={target_speedup!r} cannot be met within rounding on a "
        f"{L}-layer model with warmup_layers={warmup_layers} over {N} tokens "
        f"(closest mean budget {best.mean_budget:.2f} vs target {target:.2f})"
    )


# --------------------------------------------------------------------------------------------
# From config
# --------------------------------------------------------------------------------------------

SCHEDULE_NAMES = ("full", "linear", "target")


def build_schedule(
    cfg: Mapping, num_layers: int, expected_length: int | None = None
) -> Schedule:
    """Build a schedule from a config mapping with a ``name`` key.

    - ``{name: full}``
    - ``{name: linear, warmup_layers, max_layers, min_layers, decay_tokens, num_layers?}``
    - ``{name: target, target_speedup, warmup_layers?, spread?, expected_length?}``: built for
      the model at hand with :func:`linear_for_speedup`; ``expected_length`` defaults to the
      caller's (the dataset's median target length).

    A ``num_layers`` key, when present, must match the model's layer count.
    """
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    declared = cfg.pop("num_layers", None)
    if declared is not None and int(declared) != num_layers:
        raise ScheduleError(
            f"schedule.num_layers={declared} does not match the model's {num_layers} layers; "
            "use a preset built for this model or schedule=target_<s>x, which adapts to it"
        )
    cfg.pop("description", None)
    if name == "full":
        return FullSchedule(num_layers)
    if name == "linear":
        return LinearSchedule(
            num_layers,
            warmup_layers=int(cfg["warmup_layers"]),
            max_layers=int(cfg["max_layers"]),
            min_layers=int(cfg["min_layers"]),
            decay_tokens=int(cfg["decay_tokens"]),
        )
    if name == "target":
        n = cfg.get("expected_length") or expected_length
        if n is None:
            raise ScheduleError(
                "schedule.expected_length is not set: a target-speedup schedule needs the "
                "expected generation length (the dataset's median target length in tokens)"
            )
        return linear_for_speedup(
            num_layers,
            target_speedup=float(cfg["target_speedup"]),
            expected_length=int(n),
            warmup_layers=int(cfg.get("warmup_layers", 1)),
            spread=float(cfg.get("spread", 0.5)),
        )
    raise ScheduleError(f"schedule.name={name!r} is not known; choose one of {SCHEDULE_NAMES}")


# --------------------------------------------------------------------------------------------
# Teacher-forced view
# --------------------------------------------------------------------------------------------


def position_layer_mask(
    schedule: Schedule, prompt_lengths: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Active-layer mask for a right-padded teacher-forced batch, shape ``(B, L, T)``.

    Row ``b`` holds ``prompt_lengths[b]`` prompt tokens (all layers), then target tokens: the
    token at position ``t >= P_b`` is generation step ``t - P_b``. Padding positions follow the
    schedule too; their outputs are ignored by the loss.
    """
    prompt_lengths = prompt_lengths.to("cpu", torch.long)
    steps = torch.arange(seq_len)[None, :] - prompt_lengths[:, None]  # (B, T)
    step_mask = schedule.layer_mask(range(max(seq_len, 1)))  # (T, L): row g = step g
    mask = step_mask[steps.clamp(min=0)]  # (B, T, L)
    mask[steps < 0] = True
    return mask.transpose(1, 2).contiguous()  # (B, L, T)
