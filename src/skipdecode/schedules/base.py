"""The schedule interfaces: what every layer-skipping method implements.

A *schedule* decides which decoder layers run for each generated token. Static schedules decide
from the position alone (:class:`StaticSchedule`: full, SkipDecode's linear decay, early exit,
unified skipping, power law); others look at the model's confidence while decoding (adaptive
SkipDecode, CALM).

Positions: step ``g = 0`` is the first generated token *as an input position*. The prompt always
runs all layers (its last position predicts token 0); the forward pass over token ``g`` runs the
layers of step ``g``. In a teacher-forced batch (prompt + target), target token ``g`` sits at
step ``g``. A static schedule whose active sets are nested, ``S(g+1) ⊆ S(g)``, never needs KV it
does not have: a layer skipped once is skipped for good (the engine checks this). Every schedule belongs to a *method*, the label
tables and plots use (``registry.method_label``).

The engine asks a schedule for a fresh :class:`ScheduleRun` per ``generate`` call and hands it
one :class:`~skipdecode.core.step.DecodeStep` per decode pass. Training asks the schedule for its
loss on a batch (``loss_sums``) and for a deterministic plan to validate with
(``validation_plan``). A schedule that must be tuned on held-out prompts before decoding (CALM's
threshold) says so with ``needs_calibration`` and does it in ``calibrate``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..config import ConfigError, flag, is_number
from ..core.loss import token_loss_sums
from ..core.step import DecodeStep, Speculation, StepResult

if TYPE_CHECKING:
    from ..core.engine import SkipDecoder

__all__ = [
    "PromptBatch",
    "batched_speedup",
    "Schedule",
    "StaticSchedule",
    "ScheduleRun",
    "ScheduleError",
    "position_layer_mask",
    "plan_logits",
    "plan_loss_sums",
    "require",
    "round_half_up",
]


class ScheduleError(ValueError):
    """A schedule setting is out of its allowed range."""


def round_half_up(x: float) -> int:
    """Round to the nearest integer, halves up (Python's ``round`` rounds half to even; half-up
    keeps a decreasing function non-increasing and is what one computes by hand)."""
    return int(math.floor(x + 0.5))


def require(ok: bool, key: str, value: object, allowed: str) -> None:
    """Raise :class:`ScheduleError` naming ``schedule.<key>``, its value and what is allowed."""
    if not ok:
        raise ScheduleError(f"schedule.{key}={value!r} is not allowed: {allowed}")


_REQUIRED = object()


def setting_flag(cfg: Mapping, key: str, default: bool = False) -> bool:
    """``cfg[key]`` as given, true or false (``no`` is refused, not read as true)."""
    try:
        return flag(cfg.get(key, default), f"schedule.{key}")
    except ConfigError as e:
        raise ScheduleError(str(e)) from None


def setting(cfg: Mapping, key: str, kind: type, allowed: str, default: Any = _REQUIRED) -> Any:
    """``cfg[key]`` as ``kind`` (``int`` or ``float``; a whole float is an ``int``), or
    ``default`` where absent; a missing required key or a value of another kind is refused,
    named with what is allowed."""
    value = cfg.get(key, default)
    if value is _REQUIRED:
        raise ScheduleError(
            f"schedule.{key} is required for schedule.name={cfg.get('name')}: {allowed}"
        )
    if value is None and default is None:
        return None
    require(is_number(value, kind), key, value, allowed)
    return kind(value)


class ScheduleRun:
    """The per-call state of a schedule: what each decode pass computes.

    A schedule that picks a set of layers per pass implements ``plan`` (and ``observe`` if it
    reacts to the logits); one that drives the layers itself overrides ``decode``.
    """

    def plan(self, step: int) -> tuple[int, ...]:
        """Layers the batch runs at decode pass ``step``."""
        raise NotImplementedError(f"{type(self).__name__} implements neither plan nor decode")

    def observe(self, step: int, logits: torch.Tensor, live: torch.Tensor) -> None:
        """See the logits ``(B, V)`` produced at ``step`` (``live``: rows not yet finished)."""

    def decode(self, step: DecodeStep) -> StepResult:
        layers = self.plan(step.index)
        logits = step.run(layers)
        self.observe(step.index, logits, step.live)
        return StepResult(logits, tuple(layers))


class Schedule(ABC):
    """Which layers run for each generated token of an ``num_layers``-layer model."""

    name: str = "schedule"

    def __init__(self, num_layers: int):
        require(
            isinstance(num_layers, int) and num_layers >= 1,
            "num_layers",
            num_layers,
            "must be an integer >= 1",
        )
        self.num_layers = num_layers

    # -- decoding -------------------------------------------------------------------------------
    @abstractmethod
    def start(self, batch_size: int) -> ScheduleRun:
        """Fresh state for one ``generate`` call over ``batch_size`` rows."""

    def static(self) -> StaticSchedule | None:
        """The position-only plan, when the schedule has one (the engine checks it is nested)."""
        return None

    def speculation(self) -> Speculation | None:
        """Draft-and-verify settings, when the schedule decodes speculatively (lossless)."""
        return None

    @property
    def draft_plan(self) -> StaticSchedule | None:
        """The skip plan that drafts, when the schedule decodes speculatively (lossless); known
        before any evaluation-time setting (a calibrated threshold, a draft vocabulary) is."""
        return None

    @property
    def needs_calibration(self) -> bool:
        """Whether ``calibrate`` must run on held-out prompts before decoding."""
        return False

    def calibrate(
        self,
        decoder: SkipDecoder,
        batches: Sequence[PromptBatch],
        max_new_tokens: int,
        iterations: int = 8,
    ) -> tuple[Schedule, dict[str, Any]]:
        """A copy tuned on these (validation) prompt batches, and what the tuning found."""
        return self, {}

    # -- training -------------------------------------------------------------------------------
    @abstractmethod
    def loss_sums(
        self,
        decoder: SkipDecoder,
        batch: Mapping[str, torch.Tensor],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed training loss, number of target tokens) on one batch (``input_ids``,
        ``attention_mask``, ``labels``, ``prompt_lengths``); ``generator`` seeds any randomness."""

    @abstractmethod
    def validation_plan(self, expected_length: int | None = None) -> StaticSchedule:
        """The deterministic plan validation loss is reported under."""

    # -- records --------------------------------------------------------------------------------
    @abstractmethod
    def describe(self) -> dict:
        """Plain data that ``build_schedule`` turns back into this schedule (in every record)."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.describe().items() if k != "name")
        return f"{type(self).__name__}({args})"


class _StaticRun(ScheduleRun):
    def __init__(self, schedule: StaticSchedule):
        self.schedule = schedule

    def plan(self, step: int) -> tuple[int, ...]:
        return self.schedule.active_layers(step)


class StaticSchedule(Schedule):
    """A position-based layer plan: ``active_layers(step)`` is all a subclass defines."""

    #: True when every step runs every layer (the teacher-forced pass then needs no mask).
    runs_every_layer: bool = False

    @abstractmethod
    def active_layers(self, step: int) -> tuple[int, ...]:
        """Sorted indices of the layers that run at generation step ``step`` (>= 0)."""

    # -- the Schedule interface -----------------------------------------------------------------
    def start(self, batch_size: int) -> ScheduleRun:
        return _StaticRun(self)

    def static(self) -> StaticSchedule:
        return self

    def loss_sums(
        self,
        decoder: SkipDecoder,
        batch: Mapping[str, torch.Tensor],
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return plan_loss_sums(decoder, batch, self)

    def validation_plan(self, expected_length: int | None = None) -> StaticSchedule:
        return self

    def describe(self) -> dict:
        return {"name": self.name, "num_layers": self.num_layers}

    # -- derived views --------------------------------------------------------------------------
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
        """Mean layers per generated token over sequences of ``lengths`` generated tokens.

        The one accounting of skipdecode (engine, target rule, records): a generated token
        costs the layers of the decode pass that produced it. Token 0 comes from the prefill
        (the prompt runs every layer for every schedule, so it is prompt work, not counted);
        token ``g >= 1`` comes from decode pass ``g - 1``, which runs ``budget(g - 1)`` layers.
        A sequence of ``n`` tokens therefore counts ``n - 1`` decode passes.
        """
        lengths = [int(n) for n in lengths]
        require(
            len(lengths) > 0
            and all(n >= 0 for n in lengths)
            and sum(max(0, n - 1) for n in lengths) > 0,
            "lengths",
            lengths,
            "need at least one token from a decode pass (a length >= 2) and no negative lengths",
        )
        passes = [max(0, n - 1) for n in lengths]
        per_step = self.budgets(range(max(passes))).tolist()
        prefix = [0]
        for b in per_step:
            prefix.append(prefix[-1] + b)
        return sum(prefix[n] for n in passes) / sum(passes)

    def theoretical_speedup(self, lengths: Sequence[int]) -> float:
        """``num_layers / mean layers per generated token`` (the paper's speedup)."""
        return self.num_layers / self.mean_layers(lengths)


#: One left-padded batch of prompts: ``(input_ids, attention_mask)``.
PromptBatch = tuple[torch.Tensor, torch.Tensor]


def batched_speedup(
    decoder: SkipDecoder,
    schedule: Schedule,
    batches: Sequence[PromptBatch],
    max_new_tokens: int,
    **generate_kwargs: Any,
) -> float:
    """The per-token theoretical speedup of ``schedule`` over all ``batches``, each decoded as
    one batch (as the evaluation decodes them): ``L`` x tokens / layers, summed over batches."""
    tokens, layers = 0, 0.0
    for input_ids, attention_mask in batches:
        stats = decoder.generate(
            input_ids, schedule, max_new_tokens, attention_mask, decode_texts=False,
            **generate_kwargs,
        ).stats  # fmt: skip
        tokens += stats.token_count
        layers += stats.layers_per_token * stats.token_count
    return decoder.num_layers * tokens / layers if layers > 0 else 1.0


def _as_list(steps: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(steps, torch.Tensor):
        return [int(s) for s in steps.flatten().tolist()]
    return [int(s) for s in steps]


# --------------------------------------------------------------------------------------------
# Teacher-forced view
# --------------------------------------------------------------------------------------------


def position_layer_mask(
    schedule: StaticSchedule, prompt_lengths: torch.Tensor, seq_len: int
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


def plan_loss_sums(
    decoder: SkipDecoder, batch: Mapping[str, torch.Tensor], plan: StaticSchedule
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target-token cross-entropy (sum, count) of the forward masked by ``plan``."""
    return token_loss_sums(plan_logits(decoder, batch, plan), batch["labels"])


def plan_logits(
    decoder: SkipDecoder, batch: Mapping[str, torch.Tensor], plan: StaticSchedule
) -> torch.Tensor:
    """The logits ``(B, T, V)`` of a training batch's forward masked by ``plan`` (prompt
    positions run every layer, as in decoding)."""
    input_ids = batch["input_ids"]
    mask = None
    if not plan.runs_every_layer:
        mask = position_layer_mask(plan, batch["prompt_lengths"], input_ids.shape[1])
        mask = mask.to(input_ids.device)
    return decoder.forward(input_ids, batch["attention_mask"], mask)
