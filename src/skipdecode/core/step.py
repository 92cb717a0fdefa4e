"""The contract between the engine and a schedule for one decode pass.

The engine owns the loop, the cache and the sampling; a schedule owns what one decode pass
computes. For each pass the engine hands the schedule's run a :class:`DecodeStep` (token ``g`` of
every row, its position, the cache and the attention mask) and gets a :class:`StepResult` back.
Most schedules only pick a set of layers (``DecodeStep.run``); a schedule whose tokens leave at
different depths (CALM) drives the layers itself through ``embed`` / ``layer`` / ``head`` /
``fill_kv``. The engine never needs to know which schedule it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..config import count, flag
from .adapters import DecoderAdapter
from .cache import KVCache

if TYPE_CHECKING:
    from .compiled import CompiledLayers

__all__ = [
    "DecodeStep",
    "StepResult",
    "StepRunner",
    "LayerPlan",
    "PositionPlan",
    "Speculation",
    "check_nested",
]


@dataclass
class StepResult:
    """What one decode pass produced."""

    logits: torch.Tensor  # (B, V): the logits that choose token g + 1
    layers: tuple[int, ...]  # the layers the batch ran (the cost the clock sees)
    token_layers: torch.Tensor | None = None  # (B,): each row's own depth, when rows differ


@dataclass
class DecodeStep:
    """Decode pass ``index``: input token ``g`` of every row, one position per row."""

    index: int  # g = 0 for the first generated token
    token: torch.Tensor  # (B,)
    position: torch.Tensor  # (B, 1) position ids
    live: torch.Tensor  # (B,) bool: rows that have not finished
    adapter: DecoderAdapter
    cache: KVCache
    cache_position: int  # where this pass writes in every active layer's cache
    attention_mask: torch.Tensor | None  # (B, 1, 1, cache_position + 1) additive, or None
    # The compiled path (``SkipDecoder(compile=...)``): ``run`` replays its compiled layer step
    # with ``capacity_mask`` ``(B, 1, 1, capacity)``, which also hides unwritten columns.
    compiled: CompiledLayers | None = None
    capacity_mask: torch.Tensor | None = None

    def embed(self) -> tuple[torch.Tensor, dict[str, Any]]:
        """Hidden states ``(B, 1, D)`` entering layer 0 and the layers' shared keyword
        arguments; the cache starts writing at this pass's position."""
        hidden = self.adapter.embed(self.token[:, None], self.position)
        kwargs = self.adapter.layer_kwargs(hidden, self.position)
        self.cache.begin(self.cache_position)
        return hidden, kwargs

    def layer(self, layer_idx: int, hidden: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
        """Run one layer (it appends its keys and values to the cache)."""
        return self.adapter.run_layer(layer_idx, hidden, self.attention_mask, kwargs, self.cache)

    def fill_kv(self, layer_idx: int, hidden: torch.Tensor, kwargs: dict[str, Any]) -> None:
        """Write ``layer_idx``'s keys and values for ``hidden`` without running the layer."""
        self.adapter.fill_kv(layer_idx, hidden, kwargs, self.cache)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head: logits ``(B, V)``."""
        return self.adapter.head(hidden)[:, 0]

    def run(self, layers: Sequence[int]) -> torch.Tensor:
        """Every row through ``layers`` (bottom to top), then the head: logits ``(B, V)``."""
        hidden, kwargs = self.embed()
        if self.compiled is not None:
            assert self.capacity_mask is not None
            compiled = self.compiled
            hidden = compiled.run(
                hidden, kwargs, layers, self.cache, self.cache_position, self.capacity_mask
            )
            return compiled.head(hidden)[:, 0]
        for layer_idx in layers:
            hidden = self.layer(layer_idx, hidden, kwargs)
        return self.head(hidden)


class StepRunner(Protocol):
    """The per-call state of a plan: computes each decode pass."""

    def decode(self, step: DecodeStep) -> StepResult: ...


class PositionPlan(Protocol):
    """A plan whose layers depend on the position only (the engine checks it is nested)."""

    def active_layers(self, step: int) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class Speculation:
    """A draft plan (its layers per generation step), the draft length ``k``, the optional
    confidence ``threshold`` under which a row stops drafting, the optional vocabulary
    subset the draft passes score, and ``auto_off``: time a plain step and the first rounds,
    and decode the rest of the batch plainly once speculating is slower (:class:`~skipdecode.
    core.rounds.Pace`)."""

    draft: PositionPlan
    k: int
    threshold: float | None = None
    # token ids the draft passes score (core.subset_head); None: the whole vocabulary
    draft_vocab: Sequence[int] | None = None
    auto_off: bool = False

    def __post_init__(self) -> None:
        count(self.k, "schedule.k", 1)
        flag(self.auto_off, "schedule.auto_off")
        if self.threshold is not None and not 0.0 < float(self.threshold) < 1.0:
            raise ValueError(
                f"schedule.threshold={self.threshold!r} is not allowed: null (always draft k "
                "tokens) or a probability in (0, 1)"
            )


class LayerPlan(Protocol):
    """What the engine needs from a schedule (every :class:`~skipdecode.schedules.Schedule`
    is one): its layer count, a fresh runner per call, its position-only plan if it has one,
    its speculation settings if it decodes speculatively (the engine then drafts and verifies
    instead of calling the runner) and a plain-data description."""

    num_layers: int

    def start(self, batch_size: int) -> StepRunner: ...

    def static(self) -> PositionPlan | None: ...

    def speculation(self) -> Speculation | None: ...

    def describe(self) -> dict: ...


def check_nested(plans: Sequence[Sequence[int]]) -> None:
    """Raise unless every step's layers are a subset of the previous step's (a layer skipped
    once never runs again, so no layer's cache has a gap)."""
    for g in range(1, len(plans)):
        if not set(plans[g]) <= set(plans[g - 1]):
            extra = sorted(set(plans[g]) - set(plans[g - 1]))
            raise ValueError(
                f"schedule is not monotone: step {g} runs layers {extra} that step {g - 1} "
                "skipped, so their KV cache would have gaps"
            )
