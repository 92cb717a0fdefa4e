"""Decode policies: one interface for every layer-skipping method.

A policy decides, per generate call, which layers the batch runs at each decode step:

- :class:`StaticPolicy` wraps a position-based :class:`~skipdecode.schedules.Schedule`
  (full, SkipDecode linear/target, early exit, unified skipping, power law).
- :class:`AdaptiveSkipPolicy` (adaptive monotone SkipDecode): ``budget(g+1) = min(budget(g),
  f(c_g))`` where ``c_g`` is the lowest top-1 probability among the batch's live rows at step
  ``g``, ``f(c) = floor + round((max - floor) * (1 - c))``. Budgets never increase and the batch
  shares one, so KV caching still needs no recomputation.
- :class:`CALMPolicy` (Schuster et al. 2022): each token exits at the first checked layer whose
  softmax confidence passes ``threshold``; its hidden state is copied upwards, so the layers
  above compute their KV from it. A batch runs until its last live token exits.

Training: ``training_schedule(generator)`` gives the layer plan for one training batch (the
schedule itself; random monotone budgets around the target for the adaptive policy; every layer
for CALM, whose loss instead weights the intermediate exits: ``intermediate_loss_weights``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import torch

from .baselines import (
    BudgetSchedule,
    EarlyExitSchedule,
    PowerLawSchedule,
    UnifiedSkipSchedule,
    layers_for_speedup,
    power_law_for_speedup,
    random_monotone_budgets,
)
from .schedules import (
    FullSchedule,
    Schedule,
    ScheduleError,
    _linear_active,
    _require,
    _round_half_up,
    build_schedule,
    check_budget_range,
    linear_for_speedup,
)

__all__ = [
    "DecodePolicy",
    "StaticPolicy",
    "AdaptiveSkipPolicy",
    "CALMPolicy",
    "PolicyRun",
    "as_policy",
    "build_policy",
    "POLICY_NAMES",
]


class PolicyRun(ABC):
    """The per-call state of a layer-set policy."""

    @abstractmethod
    def plan(self, step: int) -> tuple[int, ...]:
        """Layers the batch runs at ``step``."""

    def observe(self, step: int, logits: torch.Tensor, live: torch.Tensor) -> None:
        """See the logits ``(B, V)`` produced at ``step`` (``live``: rows not yet finished)."""


class DecodePolicy(ABC):
    name: str = "policy"
    per_token: bool = False  # True: tokens of one step may exit at different depths (CALM)
    batchable: bool = True  # False: batch > 1 needs an explicit opt-in

    def __init__(self, num_layers: int):
        self.num_layers = num_layers

    @abstractmethod
    def start(self, batch_size: int) -> PolicyRun | None:
        """Fresh state for one generate call (``None`` for per-token policies)."""

    @abstractmethod
    def training_schedule(self, generator: torch.Generator | None = None) -> Schedule:
        """Layer plan for one training batch."""

    def static_schedule(self) -> Schedule | None:
        """The schedule when the plan depends on the position only."""
        return None

    @abstractmethod
    def describe(self) -> dict:
        ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class _StaticRun(PolicyRun):
    def __init__(self, schedule: Schedule):
        self.schedule = schedule

    def plan(self, step: int) -> tuple[int, ...]:
        return self.schedule.active_layers(step)


class StaticPolicy(DecodePolicy):
    """A position-based schedule as a policy."""

    def __init__(self, schedule: Schedule):
        super().__init__(schedule.num_layers)
        self.schedule = schedule
        self.name = schedule.name

    def start(self, batch_size: int) -> PolicyRun:
        return _StaticRun(self.schedule)

    def training_schedule(self, generator: torch.Generator | None = None) -> Schedule:
        return self.schedule

    def static_schedule(self) -> Schedule:
        return self.schedule

    def describe(self) -> dict:
        return self.schedule.describe()


class _AdaptiveRun(PolicyRun):
    def __init__(self, policy: AdaptiveSkipPolicy):
        self.p = policy
        self.budget = policy.max_layers
        self.budgets: list[int] = []

    def plan(self, step: int) -> tuple[int, ...]:
        self.budgets.append(self.budget)
        return _linear_active(self.p.num_layers, self.p.warmup_layers, self.budget)

    def observe(self, step: int, logits: torch.Tensor, live: torch.Tensor) -> None:
        if not bool(live.any()):
            return
        conf = logits.float().softmax(-1).amax(-1)[live].min()  # a host sync, once per step
        self.budget = min(self.budget, self.p.budget_for_confidence(float(conf)))


class AdaptiveSkipPolicy(DecodePolicy):
    """Adaptive monotone SkipDecode (see module docstring)."""

    name = "adaptive"

    def __init__(self, num_layers: int, warmup_layers: int, max_layers: int, min_layers: int,
                 target_mean: float | None = None):
        super().__init__(num_layers)
        check_budget_range(num_layers, warmup_layers, max_layers, min_layers)
        self.warmup_layers, self.max_layers, self.min_layers = warmup_layers, max_layers, min_layers
        self.target_mean = float(target_mean) if target_mean is not None else (max_layers + min_layers) / 2

    def budget_for_confidence(self, confidence: float) -> int:
        c = min(1.0, max(0.0, confidence))
        return self.min_layers + _round_half_up((self.max_layers - self.min_layers) * (1.0 - c))

    def start(self, batch_size: int) -> PolicyRun:
        return _AdaptiveRun(self)

    def training_schedule(self, generator: torch.Generator | None = None, length: int = 256) -> Schedule:
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        budgets = random_monotone_budgets(length, self.max_layers, self.min_layers, self.target_mean, gen)
        return BudgetSchedule(self.num_layers, self.warmup_layers, budgets)

    def describe(self) -> dict:
        return {"name": self.name, "num_layers": self.num_layers, "warmup_layers": self.warmup_layers,
                "max_layers": self.max_layers, "min_layers": self.min_layers,
                "target_mean": self.target_mean}


class CALMPolicy(DecodePolicy):
    """CALM-style confident early exit with state copying (see module docstring)."""

    name = "calm"
    per_token = True
    batchable = False

    def __init__(self, num_layers: int, threshold: float | None, check_every: int = 1,
                 min_exit_layers: int = 1, allow_batching: bool = False,
                 target_speedup: float | None = None):
        super().__init__(num_layers)
        # threshold None: to be calibrated to ``target_speedup`` on held-out prompts before decoding
        # (skipdecode.calm.calibrate_calm_threshold); training does not need it.
        if threshold is None:
            _require(target_speedup is not None, "threshold", threshold,
                     "must be in (0, 1], or null together with target_speedup (calibrated)")
        else:
            _require(isinstance(threshold, (int, float)) and 0 < threshold <= 1, "threshold",
                     threshold, "must be in (0, 1] (a softmax confidence)")
        _require(isinstance(check_every, int) and 1 <= check_every <= num_layers, "check_every",
                 check_every, f"must be an integer in [1, {num_layers}]")
        _require(isinstance(min_exit_layers, int) and 1 <= min_exit_layers <= num_layers,
                 "min_exit_layers", min_exit_layers,
                 f"must be an integer in [1, {num_layers}] (an exit beyond the model is not allowed)")
        self.threshold = None if threshold is None else float(threshold)
        self.target_speedup = target_speedup
        self.check_every = check_every
        self.min_exit_layers = min_exit_layers
        self.allow_batching = bool(allow_batching)

    def exit_checks(self) -> list[int]:
        """Layer indices after which confidence is checked (the top layer is the last resort)."""
        L = self.num_layers
        return [n - 1 for n in range(self.min_exit_layers, L) if n % self.check_every == 0]

    def start(self, batch_size: int) -> None:
        if self.threshold is None:
            raise ValueError(
                "schedule.threshold is null: calibrate it first (skipdecode.calm."
                "calibrate_calm_threshold; the evaluation stage does this on validation prompts)"
            )
        if batch_size > 1 and not self.allow_batching:
            raise ValueError(
                f"policy.name=calm cannot batch tokens that exit at different layers (batch size "
                f"{batch_size}); set policy.allow_batching=true to run each step until its last "
                "token exits, or use batch size 1"
            )
        return None

    def training_schedule(self, generator: torch.Generator | None = None) -> Schedule:
        return FullSchedule(self.num_layers)

    def intermediate_loss_weights(self) -> dict[int, float]:
        """CALM's weighted loss: layer ``i`` (1-based depth) weighted ``i / sum(j)`` over exits."""
        depths = [i + 1 for i in self.exit_checks()] + [self.num_layers]
        total = float(sum(depths))
        return {d - 1: d / total for d in depths}

    def describe(self) -> dict:
        return {"name": self.name, "num_layers": self.num_layers, "threshold": self.threshold,
                "target_speedup": self.target_speedup, "check_every": self.check_every,
                "min_exit_layers": self.min_exit_layers, "allow_batching": self.allow_batching}

    def with_threshold(self, threshold: float) -> CALMPolicy:
        return CALMPolicy(self.num_layers, threshold, self.check_every, self.min_exit_layers,
                          self.allow_batching, self.target_speedup)


def as_policy(plan: Schedule | DecodePolicy) -> DecodePolicy:
    return plan if isinstance(plan, DecodePolicy) else StaticPolicy(plan)


POLICY_NAMES = ("full", "linear", "target", "early_exit", "unified", "power_law", "adaptive", "calm")


def build_policy(cfg: Mapping, num_layers: int, expected_length: int | None = None) -> DecodePolicy:
    """Any method from a config mapping with a ``name``; see README "Methods".

    Methods built from a target speedup take ``target_speedup`` (and the expected generation
    length where the plan depends on the position); explicit parameters override it.
    """
    cfg = dict(cfg)
    name = cfg.get("name")
    declared = cfg.get("num_layers")
    if declared is not None and int(declared) != num_layers:
        raise ScheduleError(
            f"schedule.num_layers={declared} does not match the model's {num_layers} layers"
        )
    s = cfg.get("target_speedup")
    L = num_layers
    if name in ("full", "linear", "target"):
        return StaticPolicy(build_schedule(cfg, L, expected_length))
    if name == "early_exit":
        k = cfg.get("exit_layers") or layers_for_speedup(L, s)
        return StaticPolicy(EarlyExitSchedule(L, int(k)))
    if name == "unified":
        k = cfg.get("keep_layers") or layers_for_speedup(L, s)
        return StaticPolicy(UnifiedSkipSchedule(L, int(k)))
    w = int(cfg.get("warmup_layers", 1))
    if name == "power_law":
        if cfg.get("alpha") is not None:
            return StaticPolicy(PowerLawSchedule(L, w, int(cfg.get("max_layers", L)),
                                                 int(cfg.get("min_layers", w + 1)), float(cfg["alpha"])))
        n = cfg.get("expected_length") or expected_length
        if s is None or n is None:
            raise ScheduleError("schedule.name=power_law needs alpha, or target_speedup and the expected length")
        return StaticPolicy(power_law_for_speedup(L, float(s), int(n), w))
    if name == "adaptive":
        if s is not None and cfg.get("max_layers") is None:
            n = cfg.get("expected_length") or expected_length or 32
            lin = linear_for_speedup(L, float(s), int(n), w)
            return AdaptiveSkipPolicy(L, w, lin.max_layers, lin.min_layers, target_mean=L / float(s))
        return AdaptiveSkipPolicy(L, w, int(cfg["max_layers"]), int(cfg["min_layers"]),
                                  cfg.get("target_mean"))
    if name == "calm":
        threshold = cfg.get("threshold")
        if threshold is None and s is None:
            raise ScheduleError(
                "schedule.threshold is not set: CALM needs a confidence threshold in (0, 1], or "
                "target_speedup to calibrate one on validation prompts")
        return CALMPolicy(L, None if threshold is None else float(threshold),
                          int(cfg.get("check_every", 1)), int(cfg.get("min_exit_layers", 1)),
                          bool(cfg.get("allow_batching", False)),
                          None if s is None else float(s))
    raise ScheduleError(f"schedule.name={name!r} is not known; choose one of {POLICY_NAMES}")
