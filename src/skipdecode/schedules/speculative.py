"""Lossless SkipDecode: a static skip plan drafts, the full model verifies (self-speculative).

The output is the full model's, token for token when greedy and in distribution when sampling
(``core.speculative`` decodes it, batched); the skip plan only decides how fast. Config::

    name: speculative
    draft: {name: target, target_speedup: 2}   # any static schedule but the full model
    k: 4                                       # proposals per round (at most)
    threshold: null                            # or a probability: stop proposing after a
                                               # token drafted below it (that one is kept);
                                               # or calibrate: chosen on validation prompts
    recipe: joint                              # training: joint | full | draft
    draft_weight: 1.0                          # joint: loss = full-plan + draft_weight * draft
    draft_target: labels                       # or full: the draft learns the full plan's
                                               # next-token distribution (distilled)
    draft_vocab: null                          # or N: drafts score only the N tokens most
                                               # frequent in the training targets (exact still)
    auto_off: false                            # or true: a batch times a plain step and its
                                               # first rounds, and decodes plainly once
                                               # speculating is slower (exact still)

Training. A model fine-tuned only under its skip plan degrades with all layers, and the full
model is the verifier. ``recipe: joint`` trains both paths on every batch (the mean target-token
loss of the full plan plus ``draft_weight`` times that of the draft plan); ``full`` trains the
full plan only (a plain fine-tune, the draft untrained), ``draft`` the draft plan only (what
SkipDecode itself trains). Validation loss is the full plan's: it is what the output follows.
``draft_target: full`` replaces the draft plan's cross-entropy against the labels with its
KL divergence from the full plan's next-token distribution on the same batch (the full plan's
logits are a target, no gradient flows through them): a draft token is accepted when it is the
full model's, not the reference's, so the draft learns what it is verified against
(self-distillation, as DistillSpec does for a separate drafter). With ``recipe: draft`` the full
plan runs without gradient, only to give the target.

Calibration. ``threshold: calibrate`` leaves the threshold to the evaluation stage, which decodes
the validation prompts (in the evaluation's batches) with each threshold of
:data:`THRESHOLDS` (``None``: always draft ``k``) and keeps the one with the highest layer-count
speedup (``L`` x tokens / layer passes of draft and verify; the first in grid order on a tie).
That count is what weight-bound decoding pays; it does not see that a verify pass over ``k + 1``
positions costs more than one step on a CPU, so it leans towards drafting more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..core.loss import distill_loss_sums, token_loss_sums
from ..core.step import Speculation
from .base import (
    PromptBatch,
    Schedule,
    ScheduleError,
    ScheduleRun,
    StaticSchedule,
    batched_speedup,
    plan_logits,
    plan_loss_sums,
    require,
)
from .baselines import FullSchedule
from .registry import build_schedule, register

if TYPE_CHECKING:
    from ..core.engine import SkipDecoder

__all__ = ["SpeculativeSchedule", "DRAFT_TARGETS", "RECIPES", "THRESHOLDS"]

RECIPES = ("joint", "full", "draft")
#: what the draft plan learns to predict: the labels, or the full plan's distribution
DRAFT_TARGETS = ("labels", "full")
#: the thresholds ``threshold: calibrate`` chooses from (None: always draft k tokens)
THRESHOLDS: tuple[float | None, ...] = (None, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: how far ahead the draft plan is checked to be cheaper than the full model somewhere
_HORIZON = 4096


class SpeculativeSchedule(Schedule):
    """Draft with ``draft`` (a static skip plan), verify with every layer."""

    name = "speculative"

    def __init__(
        self,
        draft: StaticSchedule,
        k: int = 4,
        threshold: float | str | None = None,
        recipe: str = "joint",
        draft_weight: float = 1.0,
        draft_vocab: int | Sequence[int] | None = None,
        auto_off: bool = False,
        draft_target: str = "labels",
    ):
        super().__init__(draft.num_layers)
        require(
            isinstance(draft, StaticSchedule) and not isinstance(draft, SpeculativeSchedule),
            "draft",
            getattr(draft, "name", draft),
            "a static schedule (target, linear, budgets, early_exit, unified, power_law)",
        )
        require(
            any(draft.budget(g) < self.num_layers for g in range(_HORIZON)),
            "draft",
            draft.describe(),
            "a plan that skips layers somewhere; the full model cannot draft for itself",
        )
        require(recipe in RECIPES, "recipe", recipe, f"one of {RECIPES}")
        require(
            isinstance(draft_weight, (int, float)) and draft_weight >= 0,
            "draft_weight",
            draft_weight,
            "a number >= 0",
        )
        require(
            draft_target in DRAFT_TARGETS, "draft_target", draft_target, f"one of {DRAFT_TARGETS}"
        )
        require(
            draft_target == "labels" or recipe != "full",
            "draft_target",
            draft_target,
            "labels with recipe=full (the full recipe trains no draft to distil)",
        )
        ids = None
        if draft_vocab is not None and not isinstance(draft_vocab, int):
            ids = [int(t) for t in draft_vocab]
        size = len(ids) if ids is not None else draft_vocab
        require(
            size is None or (not isinstance(size, bool) and isinstance(size, int) and size >= 1),
            "draft_vocab",
            draft_vocab,
            "null, a number of tokens >= 1, or a list of token ids",
        )
        self.draft_vocab_size: int | None = size
        self.draft_vocab: list[int] | None = ids
        calibrating = threshold == "calibrate"
        # checks k, threshold and auto_off
        self._speculation = Speculation(draft, k, None if calibrating else threshold, ids, auto_off)
        self._calibrating = calibrating
        self.draft = draft
        self.k = k
        self.threshold = threshold
        self.recipe = recipe
        self.draft_weight = float(draft_weight)
        self.draft_target = draft_target
        self.auto_off = auto_off

    @property
    def draft_plan(self) -> StaticSchedule:
        return self.draft

    @property
    def needs_calibration(self) -> bool:
        return self._calibrating

    def start(self, batch_size: int) -> ScheduleRun:
        raise TypeError("a speculative schedule decodes through SkipDecoder.generate only")

    def speculation(self) -> Speculation:
        if self.needs_calibration:
            raise ScheduleError(
                "schedule.threshold=calibrate is chosen on validation prompts: the evaluation "
                "stage calibrates it, or call SpeculativeSchedule.calibrate(decoder, batches, "
                "max_new_tokens) first"
            )
        if self.draft_vocab_size is not None and self.draft_vocab is None:
            raise ScheduleError(
                f"schedule.draft_vocab={self.draft_vocab_size} names a size; the token ids come "
                "from the training targets (an evaluation ranks them), or pass "
                "schedule.with_draft_vocab(ids) to SkipDecoder.generate"
            )
        return self._speculation

    def with_draft_vocab(self, ids: Sequence[int]) -> SpeculativeSchedule:
        """This schedule, drafting over the token ``ids`` (e.g. :func:`~skipdecode.core.
        subset_head.frequency_ranked_vocab` of the training targets)."""
        return self._with(draft_vocab=list(ids))

    def _with(self, **changes: Any) -> SpeculativeSchedule:
        settings: dict[str, Any] = {
            "k": self.k,
            "threshold": self.threshold,
            "recipe": self.recipe,
            "draft_weight": self.draft_weight,
            "draft_vocab": self.draft_vocab if self.draft_vocab is not None
            else self.draft_vocab_size,
            "auto_off": self.auto_off,
            "draft_target": self.draft_target,
        }  # fmt: skip
        return SpeculativeSchedule(self.draft, **{**settings, **changes})

    def calibrate(
        self,
        decoder: SkipDecoder,
        batches: Sequence[PromptBatch],
        max_new_tokens: int,
        iterations: int = 8,
    ) -> tuple[SpeculativeSchedule, dict[str, Any]]:
        """The threshold of :data:`THRESHOLDS` with the highest layer-count speedup on these
        (validation) prompt batches (``iterations`` is unused: the grid is fixed)."""
        if not self.needs_calibration:
            return self, {}
        found = {
            t: batched_speedup(decoder, self._with(threshold=t), batches, max_new_tokens)
            for t in THRESHOLDS
        }
        best = max(THRESHOLDS, key=lambda t: found[t])  # max keeps the first on a tie
        info = {
            "threshold": best,
            "theoretical_speedup": found[best],
            "speedup_by_threshold": {str(t): v for t, v in found.items()},
        }
        return self._with(threshold=best), info

    def loss_sums(
        self,
        decoder: SkipDecoder,
        batch: Mapping[str, torch.Tensor],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.draft_target == "full":
            return self._distilled_loss_sums(decoder, batch)
        if self.recipe == "draft":
            return plan_loss_sums(decoder, batch, self.draft)
        full_sum, count = plan_loss_sums(decoder, batch, FullSchedule(self.num_layers))
        if self.recipe == "full" or self.draft_weight == 0:
            return full_sum, count
        draft_sum, _ = plan_loss_sums(decoder, batch, self.draft)
        return full_sum + self.draft_weight * draft_sum, count

    def _distilled_loss_sums(
        self, decoder: SkipDecoder, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``draft_target: full``: the draft plan's KL from the full plan's distribution (plus,
        with the joint recipe, the full plan's cross-entropy against the labels)."""
        full_plan = FullSchedule(self.num_layers)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.recipe == "joint"):
            full_logits = plan_logits(decoder, batch, full_plan)
        draft_logits = plan_logits(decoder, batch, self.draft)
        draft_sum, count = distill_loss_sums(draft_logits, full_logits, batch["labels"])
        if self.recipe == "draft":
            return draft_sum, count
        full_sum, _ = token_loss_sums(full_logits, batch["labels"])
        return full_sum + self.draft_weight * draft_sum, count

    def validation_plan(self, expected_length: int | None = None) -> StaticSchedule:
        return FullSchedule(self.num_layers)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "draft": self.draft.describe(),
            "k": self.k,
            "threshold": self.threshold,
            "recipe": self.recipe,
            "draft_weight": self.draft_weight,
            **({"draft_target": self.draft_target} if self.draft_target != "labels" else {}),
            **({"draft_vocab": self.draft_vocab_size} if self.draft_vocab_size else {}),
            **({"auto_off": True} if self.auto_off else {}),
        }


@register(
    "speculative",
    method="speculative",
    settings=(
        "draft",
        "k",
        "threshold",
        "recipe",
        "draft_weight",
        "draft_vocab",
        "auto_off",
        "draft_target",
    ),
    calibrates=lambda cfg: cfg.get("threshold") == "calibrate",
)
def _build(cfg: Mapping, num_layers: int, expected_length: int | None) -> Schedule:
    draft_cfg = cfg.get("draft")
    require(
        isinstance(draft_cfg, Mapping) and "name" in draft_cfg,
        "draft",
        draft_cfg,
        "a schedule config with a name, e.g. {name: target, target_speedup: 2}",
    )
    require(
        draft_cfg.get("name") != "speculative",
        "draft.name",
        draft_cfg.get("name"),
        "a static schedule, not another speculative one",
    )
    if (draft_cfg.get("lengths") or "median") != "median":
        raise ScheduleError(
            f"schedule.draft.lengths={draft_cfg.get('lengths')!r}; allowed: median (a lossless "
            "draft is fitted at the expected length; validation lengths apply to "
            "schedule.name=target only)"
        )
    draft = build_schedule(draft_cfg, num_layers, expected_length)
    static = draft.static()
    require(
        static is not None and draft.static() is draft,
        "draft.name",
        draft_cfg.get("name"),
        "a static schedule (its layers depend on the position only): target, linear, budgets, "
        "early_exit, unified, power_law",
    )
    threshold = cfg.get("threshold")
    if isinstance(threshold, str) and threshold != "calibrate":
        raise ScheduleError(
            f"schedule.threshold={threshold!r}; allowed: null (always draft k tokens), a "
            "probability in (0, 1), or calibrate (chosen on validation prompts)"
        )
    return SpeculativeSchedule(
        static,  # type: ignore[arg-type]
        k=cfg.get("k", 4),
        threshold=threshold if threshold in (None, "calibrate") else float(threshold),
        recipe=str(cfg.get("recipe", "joint")),
        draft_weight=cfg.get("draft_weight", 1.0),
        draft_vocab=cfg.get("draft_vocab"),
        auto_off=cfg.get("auto_off", False),
        draft_target=cfg.get("draft_target", "labels"),
    )
