"""The whole decode step as one graph per (batch, capacity, plan): ``compile_graph="step"``.

On the CUDA-graph path with per-layer graphs (:mod:`~skipdecode.core.graphs`) a step is one
replay per active layer plus the head's, with the embedding, the rotary tables, the mask, the
greedy choice and the stop test run eagerly between them (about fifteen launches and a logits
copy a step). Here all of it is one recording: the embedding at the row's position, the layers'
keyword arguments, the mask over the capacity, the plan's layers (each the compiled layer step
of :mod:`~skipdecode.core.compiled`, written in place into the pooled cache), the final norm and
head, the greedy choice, the EOS test and padding of finished rows, the token written into the
output buffer, and the position, cache column and step counter advanced. Every input lives in
one :class:`StepState` per (batch, capacity) on the device, so a step is a single replay with
no allocation and no host sync; the host only picks the plan.

A schedule with a position-only plan yields the same plan sequence for every request, so each
plan is recorded once and replayed by every later call. The recordings are kept in an LRU of at
most :data:`STEP_GRAPH_LIMIT` per decoder; a request whose schedule has more distinct plans than
the bound decodes on per-layer graphs instead (the fallback, recorded in the output's stats as
``graph``). Compiling is per layer kind and shape, as on the per-layer path: a new plan costs a
recording (a run of the step), not a compile.

What needs more than a greedy step with a position-only plan (sampling, per-step logits, the
adaptive schedules, more EOS ids than :data:`EOS_SLOTS`) runs on per-layer graphs, with the
reason recorded. Off a GPU a recorded step is called on its static buffers (what a replay
computes), which is how the tests check it on a CPU: equal tokens to the eager path, and no op
inside a step that reads a device value on the host.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .adapters import DecoderAdapter
from .cache import StaticKVCache
from .graphs import Recordings

__all__ = [
    "EOS_SLOTS",
    "STEP_GRAPH_LIMIT",
    "StepGraphs",
    "StepState",
    "data_dependent_rope",
    "distinct_plans",
]

#: Recorded whole steps a decoder keeps (least recently used dropped first).
STEP_GRAPH_LIMIT = 64
#: EOS ids a whole step tests (unused slots hold -1, which no token is).
EOS_SLOTS = 8


def data_dependent_rope(config: Any) -> bool:
    """Whether the model's rotary embedding rescales from the positions it is given (the
    ``dynamic`` and ``longrope`` types read the largest position on the host): such a step cannot
    be recorded."""
    for name in ("rope_scaling", "rope_parameters"):
        params = getattr(config, name, None)
        if isinstance(params, dict):
            kinds = {params.get("rope_type"), params.get("type")}
            nested = [v for v in params.values() if isinstance(v, dict)]  # per layer type
            kinds |= {v.get("rope_type") for v in nested} | {v.get("type") for v in nested}
            if kinds & {"dynamic", "longrope"}:
                return True
    return False


def distinct_plans(plans: Sequence[tuple[int, ...]]) -> int:
    """How many graphs a request with these per-step plans records (one per distinct plan)."""
    return len(set(plans))


class StepState:
    """The device buffers a whole step reads and writes, for one (batch, capacity): the input
    token of every row, its position id, the cache column and step index of the pass, the mask
    over the capacity before the pass's column is opened, which rows finished, the EOS ids and
    padding id, and the tokens chosen and rows live at each pass (``tokens[:, 0]`` is the
    prefill's choice; pass ``g`` writes ``tokens[:, g + 1]`` and ``live[:, g]``)."""

    def __init__(self, batch: int, capacity: int, dtype: torch.dtype, device: torch.device):
        long = {"dtype": torch.long, "device": device}
        self.token = torch.zeros(batch, **long)
        self.position = torch.zeros(batch, 1, **long)
        self.column = torch.zeros(1, **long)
        self.index = torch.zeros(1, **long)
        self.mask = torch.zeros(batch, 1, 1, capacity, dtype=dtype, device=device)
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.eos = torch.full((EOS_SLOTS,), -1, **long)
        self.pad = torch.zeros(1, **long)
        self.tokens = torch.zeros(batch, capacity + 1, **long)
        self.live = torch.zeros(batch, capacity, dtype=torch.bool, device=device)

    def written(self) -> list[torch.Tensor]:
        """The buffers a step changes (restored after the run that precedes a recording)."""
        return [self.token, self.position, self.column, self.index, self.finished,
                self.tokens, self.live]  # fmt: skip

    def load(
        self,
        token: torch.Tensor,
        valid: torch.Tensor,
        prompt_width: int,
        mask: torch.Tensor,
        finished: torch.Tensor,
        eos_ids: Sequence[int],
        pad_id: int,
    ) -> None:
        """One request's start: the prefill's token, the rows' real prompt lengths ``valid``,
        the padded prompt width, its mask over the capacity and the stop settings."""
        self.token.copy_(token)
        self.position.copy_(valid[:, None])
        self.column.fill_(prompt_width)
        self.index.zero_()
        self.mask.copy_(mask)
        self.finished.copy_(finished)
        self.eos.fill_(-1)
        self.eos[: len(eos_ids)] = torch.tensor(list(eos_ids), dtype=torch.long)
        self.pad.fill_(pad_id)
        self.tokens.zero_()
        self.tokens[:, 0] = token
        self.live.zero_()


def _prologue(
    adapter: DecoderAdapter, state: StepState
) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
    """The pass's hidden states ``(B, 1, D)``, the layers' keyword arguments and the mask over
    the capacity with the pass's own column open (the columns after it hidden)."""
    hidden = adapter.embed(state.token[:, None], state.position)
    kwargs = adapter.layer_kwargs(hidden, state.position)
    capacity = state.mask.shape[-1]
    opened = torch.arange(capacity, device=hidden.device) <= state.column
    mask = torch.where(opened, state.mask, torch.finfo(state.mask.dtype).min)
    return hidden, kwargs, mask


def _epilogue(adapter: DecoderAdapter, hidden: torch.Tensor, state: StepState, stop: bool) -> None:
    """Head, greedy choice, EOS test, and the step's state advanced, all in place."""
    logits = adapter.head(hidden)[:, 0]
    token = logits.argmax(dim=-1)
    state.live.index_copy_(1, state.index, (~state.finished)[:, None])
    if stop:
        token = torch.where(state.finished, state.pad, token)
        ended = (token[:, None] == state.eos[None, :]).any(-1)
        state.finished.logical_or_(ended)
    state.tokens.index_copy_(1, state.index + 1, token[:, None])
    state.token.copy_(token)
    state.position.add_(1)
    state.column.add_(1)
    state.index.add_(1)


class StepGraphs(Recordings):
    """The whole-step recordings of one decoder (see the module doc), built on its compiled
    layer step (``compiled``, a :class:`~skipdecode.core.compiled.CompiledLayers` with a
    recorder), at most ``limit`` (:class:`~skipdecode.core.graphs.Recordings`)."""

    def __init__(self, compiled: Any, limit: int = STEP_GRAPH_LIMIT):
        super().__init__(limit)
        self.compiled = compiled
        self.adapter: DecoderAdapter = compiled.adapter
        self.states: dict[tuple[int, int], StepState] = {}
        self.record_seconds = 0.0  # spent recording (compiling the first of a kind included)
        self._prologue = compiled.compile_fn(_prologue)
        self._epilogue = compiled.compile_fn(_epilogue)
        self._weights: tuple[int, ...] | None = None  # taken at the first recording

    def state(self, batch: int, capacity: int, dtype: torch.dtype) -> StepState:
        """The static buffers of ``(batch, capacity)``, made on first use."""
        key = (batch, capacity)
        if key not in self.states:
            device = next(self.adapter.model.parameters()).device
            self.states[key] = StepState(batch, capacity, dtype, device)
        return self.states[key]

    def check_weights(self) -> None:
        """Refuse to replay after the model's parameters moved (a recording reads the weights
        at the addresses it was recorded with; the per-layer and round recordings too)."""
        recorded = self.compiled.captures > 0
        if self._weights is None or not recorded:
            self._weights = self._weight_addresses()
            return
        if self._weight_addresses() != self._weights:
            raise RuntimeError(
                "the model's parameters are not at the addresses its whole-step graphs were "
                "recorded with (moved, reloaded or replaced since); build a new SkipDecoder"
            )

    def _weight_addresses(self) -> tuple[int, ...]:
        return tuple(p.data_ptr() for p in self.adapter.model.parameters())

    def step(self, state: StepState, plan: tuple[int, ...], cache: StaticKVCache, stop: bool):
        """One decode pass of ``plan`` on ``state``: replayed, or recorded first."""
        key = (state.mask.shape[0], state.mask.shape[-1], plan, stop)
        buffers = tuple(t for i in plan for t in cache.claim(i, 1))
        record = functools.partial(self._record, state, plan, buffers, stop)
        self.replay(key, buffers, record, f"plan {plan}")

    def _record(
        self, state: StepState, plan: tuple[int, ...], buffers: tuple[torch.Tensor, ...], stop: bool
    ) -> Callable[[], Any]:
        compiled, adapter = self.compiled, self.adapter
        modules = [compiled._modules[i] for i in plan]

        def whole_step() -> None:
            hidden, kwargs, mask = self._prologue(adapter, state)
            for n, i in enumerate(plan):
                hidden = compiled._layer(
                    modules[n], hidden, buffers[2 * n], buffers[2 * n + 1], state.column, mask,
                    adapter._layer_call_kwargs(i, kwargs), adapter._cache_kwarg,
                )  # fmt: skip
            self._epilogue(adapter, hidden, state, stop)

        before = compiled.compile_seconds
        weights = [*compiled._weights(plan), adapter.lm_head.weight]
        replay = compiled.compiling(
            (state.mask.shape[0],), weights, compiled.recorder.record, whole_step, state.written()
        )  # as the per-layer path: product forms timed first, the time never decoding
        self.record_seconds += compiled.compile_seconds - before
        return replay
