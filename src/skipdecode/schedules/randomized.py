"""Budget-randomized fine-tuning: one model for every speedup.

The paper fine-tunes one model per speedup under one fixed schedule. Here each training batch
draws its plan from a stated distribution over static schedules (full, SkipDecode at several
target speedups, other shapes), and the whole batch shares it, as a batch shares its plan at
decode time; the model is then decoded under any of them (``schedule=target_2x`` at evaluation),
or under a plan searched after training. The draw of step ``s`` comes from the training step's
own seeded generator (``SkipDecodeLitModule.training_step``), so a resumed run draws the same
sequence.

Optionally a self-distillation term pulls the drawn plan's next-token distribution toward the
same model's full-depth pass on the same batch (``distill_weight`` x KL(full || drawn), summed
over target tokens like the cross-entropy; the full pass runs without gradient). It costs one
extra forward pass a step (no backward): roughly a third more compute than a full-depth step, and
nothing when the full plan is the one drawn.

Config::

    name: randomized
    draws: [{name: full}, {name: target, target_speedup: 2}, ...]   # static schedules
    weights: null          # the draw probabilities (normalised); null: uniform
    distill_weight: 0.0    # the self-distillation term's weight (0: cross-entropy only)
    validation: {name: target, target_speedup: 2}   # the plan validation (and decoding) uses
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..core.loss import distill_loss_sums, token_loss_sums
from .base import Schedule, ScheduleRun, StaticSchedule, plan_logits, require
from .baselines import FullSchedule
from .registry import build_schedule, register

if TYPE_CHECKING:
    from ..core.engine import SkipDecoder

__all__ = ["RandomizedSchedule"]


class RandomizedSchedule(Schedule):
    """Trains under a plan drawn per batch; decodes under its validation plan (module docstring)."""

    name = "randomized"

    def __init__(
        self,
        num_layers: int,
        draws: Sequence[StaticSchedule],
        weights: Sequence[float] | None = None,
        distill_weight: float = 0.0,
        validation: StaticSchedule | None = None,
    ):
        super().__init__(num_layers)
        require(len(draws) >= 1, "draws", list(draws), "a non-empty list of static schedules")
        if weights is None:
            weights = [1.0] * len(draws)
        require(
            len(weights) == len(draws) and all(float(w) >= 0 for w in weights) and sum(weights) > 0,
            "weights",
            list(weights),
            f"null (uniform) or {len(draws)} numbers >= 0, one per draw, not all 0",
        )
        require(
            isinstance(distill_weight, (int, float)) and distill_weight >= 0,
            "distill_weight",
            distill_weight,
            "a number >= 0 (0: cross-entropy only)",
        )
        self.draws = tuple(draws)
        total = float(sum(weights))
        self.probabilities = torch.tensor([float(w) / total for w in weights], dtype=torch.float64)
        self.distill_weight = float(distill_weight)
        self._validation = validation or self.draws[int(self.probabilities.argmax())]
        self.full = next((d for d in self.draws if d.runs_every_layer), None) or FullSchedule(
            num_layers
        )
        self.last_draw: int | None = None  # the index drawn for the latest batch (logged)

    # -- decoding: the validation plan -------------------------------------------------------
    def start(self, batch_size: int) -> ScheduleRun:
        return self._validation.start(batch_size)

    def static(self) -> StaticSchedule:
        return self._validation

    def validation_plan(self, expected_length: int | None = None) -> StaticSchedule:
        return self._validation

    # -- training ----------------------------------------------------------------------------
    def draw(self, generator: torch.Generator | None = None) -> int:
        """The index of the plan one batch trains under, drawn from ``generator``."""
        return int(torch.multinomial(self.probabilities, 1, generator=generator))

    def loss_sums(
        self,
        decoder: SkipDecoder,
        batch: Mapping[str, torch.Tensor],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        index = self.draw(generator)
        self.last_draw = index
        plan = self.draws[index]
        logits = plan_logits(decoder, batch, plan)
        loss, count = token_loss_sums(logits, batch["labels"])
        if self.distill_weight > 0 and not plan.runs_every_layer:
            with torch.no_grad():
                teacher = plan_logits(decoder, batch, self.full)
            divergence, _ = distill_loss_sums(logits, teacher, batch["labels"])
            loss = loss + self.distill_weight * divergence
        return loss, count

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "draws": [d.describe() for d in self.draws],
            "weights": [round(float(p), 12) for p in self.probabilities],
            "distill_weight": self.distill_weight,
            "validation": self._validation.describe(),
        }


@register(
    "randomized",
    method="budget-randomized",
    settings=("draws", "weights", "distill_weight", "validation"),
)
def _build(cfg: Mapping, num_layers: int, expected_length: int | None) -> RandomizedSchedule:
    configs = cfg.get("draws")
    require(
        isinstance(configs, Sequence) and not isinstance(configs, str) and len(configs) > 0,
        "draws",
        configs,
        "a non-empty list of schedule configs, e.g. [{name: full}, {name: target, "
        "target_speedup: 2}]",
    )
    draws = [_static(c, num_layers, expected_length, "draws") for c in configs]
    validation_cfg = cfg.get("validation")
    validation = (
        _static(validation_cfg, num_layers, expected_length, "validation")
        if validation_cfg
        else None
    )
    weights = cfg.get("weights")
    return RandomizedSchedule(
        num_layers,
        draws,
        None if weights is None else list(weights),
        cfg.get("distill_weight") or 0.0,
        validation,
    )


def _static(cfg: Any, num_layers: int, expected_length: int | None, key: str) -> StaticSchedule:
    """A static schedule from one ``schedule.<key>`` entry (a batch shares a position plan)."""
    require(isinstance(cfg, Mapping), key, cfg, "schedule configs (mappings with a name)")
    schedule = build_schedule(dict(cfg), num_layers, expected_length)
    static = schedule.static()
    require(
        static is schedule,
        key,
        dict(cfg),
        "static (position-only) schedules: full, target, linear, budgets, early_exit, "
        "unified, power_law",
    )
    return static
