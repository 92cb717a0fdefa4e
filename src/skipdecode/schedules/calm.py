"""CALM confident early exit with state copying (Schuster et al. 2022).

Each live token runs layers bottom-up; after every checked layer the shared head (final norm +
LM head) gives its softmax confidence, and a token whose top-1 probability reaches the threshold
exits there. An exited token's hidden state is frozen and copied upwards: layers the batch still
runs compute that token's KV from the frozen state, and once every token has exited the layers
above get their KV from it directly (``fill_kv``), without running. This is exactly a
teacher-forced pass in which the token's layers above its exit pass the state through, which is
what the exactness tests check. A batch runs each step until its last live token exits, so
batch > 1 needs an explicit opt-in (``allow_batching``).

Training: every layer runs, and the loss is CALM's weighted sum of the cross-entropies read out
after each exit through the shared head (weights proportional to depth). The threshold is
calibrated on held-out prompts to a target speedup (``calibrate``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from ..core.loss import next_token_targets
from ..core.step import DecodeStep, StepResult
from ..progress import progress
from .base import (
    PromptBatch,
    Schedule,
    ScheduleError,
    ScheduleRun,
    StaticSchedule,
    batched_speedup,
    require,
    setting_flag,
)
from .baselines import FullSchedule
from .registry import register

if TYPE_CHECKING:
    from ..core.engine import SkipDecoder

__all__ = ["CALMSchedule", "calibrate_calm_threshold"]


class _CALMRun(ScheduleRun):
    def __init__(self, schedule: CALMSchedule):
        self.schedule = schedule
        self.checks = set(schedule.exit_checks())

    def decode(self, step: DecodeStep) -> StepResult:
        """Logits ``(B, V)``, each row's depth and the layers the batch ran."""
        L = self.schedule.num_layers
        threshold = self.schedule.threshold
        hidden, kwargs = step.embed()
        exited = ~step.live  # finished rows never hold the batch back
        depth = torch.full_like(step.token, L)
        ran = L
        for layer_idx in range(L):
            out = step.layer(layer_idx, hidden, kwargs)
            hidden = torch.where(exited[:, None, None], hidden, out)
            if layer_idx not in self.checks:
                continue
            confidence = step.head(hidden).float().softmax(-1).amax(-1)
            newly = ~exited & (confidence >= threshold)
            depth = torch.where(newly, torch.full_like(depth, layer_idx + 1), depth)
            exited = exited | newly
            if bool(exited.all()):  # the last live token has exited: fill the KV above, stop
                for upper in range(layer_idx + 1, L):
                    step.fill_kv(upper, hidden, kwargs)
                ran = layer_idx + 1
                break
        return StepResult(step.head(hidden), tuple(range(ran)), token_layers=depth)


class CALMSchedule(Schedule):
    """CALM-style confident early exit with state copying (see module docstring)."""

    name = "calm"

    def __init__(
        self,
        num_layers: int,
        threshold: float | None,
        check_every: int = 1,
        min_exit_layers: int = 1,
        allow_batching: bool = False,
        target_speedup: float | None = None,
    ):
        super().__init__(num_layers)
        # threshold None: calibrated to ``target_speedup`` on held-out prompts before decoding
        # (``calibrate``); training does not need it.
        if threshold is None:
            require(
                target_speedup is not None,
                "threshold",
                threshold,
                "must be in (0, 1], or null together with target_speedup (calibrated)",
            )
        else:
            require(
                isinstance(threshold, (int, float)) and 0 < threshold <= 1,
                "threshold",
                threshold,
                "must be in (0, 1] (a softmax confidence)",
            )
        require(
            isinstance(check_every, int) and 1 <= check_every <= num_layers,
            "check_every",
            check_every,
            f"must be an integer in [1, {num_layers}]",
        )
        require(
            isinstance(min_exit_layers, int) and 1 <= min_exit_layers <= num_layers,
            "min_exit_layers",
            min_exit_layers,
            f"must be an integer in [1, {num_layers}] (an exit beyond the model is not allowed)",
        )
        self.threshold = None if threshold is None else float(threshold)
        self.target_speedup = target_speedup
        self.check_every = check_every
        self.min_exit_layers = min_exit_layers
        self.allow_batching = bool(allow_batching)

    def exit_checks(self) -> list[int]:
        """Layer indices after which confidence is checked (the top layer is the last resort)."""
        L = self.num_layers
        return [n - 1 for n in range(self.min_exit_layers, L) if n % self.check_every == 0]

    # -- decoding -------------------------------------------------------------------------------
    def start(self, batch_size: int) -> ScheduleRun:
        if self.threshold is None:
            raise ValueError(
                "schedule.threshold is null: calibrate it first (CALMSchedule.calibrate; the "
                "evaluation stage does this on validation prompts)"
            )
        if batch_size > 1 and not self.allow_batching:
            raise ValueError(
                f"schedule.name=calm cannot batch tokens that exit at different layers (batch "
                f"size {batch_size}); set schedule.allow_batching=true to run each step until "
                "its last token exits, or use batch size 1"
            )
        return _CALMRun(self)

    @property
    def needs_calibration(self) -> bool:
        return self.threshold is None

    def calibrate(
        self,
        decoder: SkipDecoder,
        batches: Sequence[PromptBatch],
        max_new_tokens: int,
        iterations: int = 8,
    ) -> tuple[CALMSchedule, dict[str, Any]]:
        if self.target_speedup is None:
            raise ValueError("schedule.target_speedup is not set: nothing to calibrate CALM to")
        threshold, achieved = calibrate_calm_threshold(
            decoder,
            batches,
            float(self.target_speedup),
            max_new_tokens,
            check_every=self.check_every,
            min_exit_layers=self.min_exit_layers,
            iterations=iterations,
        )
        info = {
            "threshold": threshold,
            "theoretical_speedup": achieved,
            "target_speedup": self.target_speedup,
        }
        return self.with_threshold(threshold), info

    def with_threshold(self, threshold: float) -> CALMSchedule:
        return CALMSchedule(
            self.num_layers,
            threshold,
            self.check_every,
            self.min_exit_layers,
            self.allow_batching,
            self.target_speedup,
        )

    # -- training -------------------------------------------------------------------------------
    def intermediate_loss_weights(self) -> dict[int, float]:
        """CALM's weighted loss: layer ``i`` (1-based depth) weighted ``i / sum(j)`` over exits."""
        depths = [i + 1 for i in self.exit_checks()] + [self.num_layers]
        total = float(sum(depths))
        return {d - 1: d / total for d in depths}

    def loss_sums(
        self,
        decoder: SkipDecoder,
        batch: Mapping[str, torch.Tensor],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy at every exit through the shared head, weighted by depth."""
        weights = self.intermediate_loss_weights()
        positions, targets = next_token_targets(batch["labels"])
        exits = decoder.forward_exits(
            batch["input_ids"], batch["attention_mask"], list(weights), positions
        )
        total = torch.stack(
            [
                w * F.cross_entropy(exits[layer_idx].float(), targets, reduction="sum")
                for layer_idx, w in weights.items()
            ]
        ).sum()
        return total, torch.tensor(targets.numel(), device=targets.device)

    def validation_plan(self, expected_length: int | None = None) -> StaticSchedule:
        return FullSchedule(self.num_layers)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "threshold": self.threshold,
            "target_speedup": self.target_speedup,
            "check_every": self.check_every,
            "min_exit_layers": self.min_exit_layers,
            "allow_batching": self.allow_batching,
        }


def calibrate_calm_threshold(
    dec: SkipDecoder,
    batches: Sequence[PromptBatch],
    target_speedup: float,
    max_new_tokens: int,
    *,
    check_every: int = 1,
    min_exit_layers: int = 1,
    iterations: int = 10,
    **generate_kwargs,
) -> tuple[float, float]:
    """Bisect the confidence threshold so CALM's per-token theoretical speedup on these prompt
    batches is about ``target_speedup`` (a lower threshold exits earlier). Returns (threshold,
    speedup).

    Use held-out prompts (e.g. the validation split), never the test prompts being scored.
    """
    if not target_speedup >= 1:
        raise ValueError(f"schedule.target_speedup={target_speedup!r} is not allowed: must be >= 1")
    L = dec.num_layers

    def speedup(threshold: float) -> float:
        schedule = CALMSchedule(L, threshold, check_every, min_exit_layers, allow_batching=True)
        return batched_speedup(dec, schedule, batches, max_new_tokens, **generate_kwargs)

    # Bisect log(threshold) over [1e-4, 1]: confidences span orders of magnitude (a vocabulary
    # of 50k gives top-1 probabilities far below 0.1 on uncertain tokens).
    lo, hi = math.log(1e-4), 0.0  # speedup at lo is the largest, at hi (threshold 1) the smallest
    best = (1.0, speedup(1.0))
    for _ in progress(range(iterations), "calibrating CALM threshold"):
        mid = math.exp((lo + hi) / 2)
        s = speedup(mid)
        if abs(s - target_speedup) < abs(best[1] - target_speedup):
            best = (mid, s)
        if s > target_speedup:
            lo = math.log(mid)
        else:
            hi = math.log(mid)
    return best


@register(
    "calm",
    method="CALM",
    settings=("threshold", "check_every", "min_exit_layers", "allow_batching"),
    calibrates=lambda cfg: cfg.get("threshold") is None,  # from target_speedup
)
def _build(cfg: Mapping, num_layers: int, expected_length: int | None) -> CALMSchedule:
    threshold, s = cfg.get("threshold"), cfg.get("target_speedup")
    if threshold is None and s is None:
        raise ScheduleError(
            "schedule.threshold is not set: CALM needs a confidence threshold in (0, 1], or "
            "target_speedup to calibrate one on validation prompts"
        )
    return CALMSchedule(
        num_layers,
        None if threshold is None else float(threshold),
        int(cfg.get("check_every", 1)),
        int(cfg.get("min_exit_layers", 1)),
        setting_flag(cfg, "allow_batching", False),
        None if s is None else float(s),
    )
