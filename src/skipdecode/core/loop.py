"""The decode loop under a layer plan (every schedule but the lossless mode's), eager or on the
compiled step: the prefill runs every layer, then one pass per generated token runs the layers
the plan gives it. ``SkipDecoder.generate`` hands a :class:`DecodeRequest` here, or to
:func:`~skipdecode.core.speculative.speculative_generate` for a speculative schedule.

What differs on the compiled path (:mod:`~skipdecode.core.compiled`) is kept in one place
(:class:`LoopBuffers`): the cache's capacity is bucketed (fewer distinct shapes, fewer compiles),
the step attends over the whole capacity with the unwritten columns hidden, and the time its
first calls spend compiling is reported apart, never counted as decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .cache import KVCache, StaticKVCache
from .clock import eval_mode, now
from .compiled import CompiledLayers, bucketed_capacity, future_mask
from .masks import decode_attention_mask
from .prompts import lengths_with_eos
from .sampling import SamplingConfig, select_next
from .stats import GenerationOutput, GenerationStats
from .step import DecodeStep, LayerPlan, StepRunner, check_nested
from .step_graphs import EOS_SLOTS, data_dependent_rope, distinct_plans

__all__ = ["DecodeRequest", "LoopBuffers", "plan_generate"]


@dataclass
class DecodeRequest:
    """One ``generate`` call, its inputs prepared: left-padded ids and their mask, how many
    tokens, how to choose them, and when rows stop."""

    input_ids: torch.Tensor  # (B, P)
    attention_mask: torch.Tensor  # (B, P)
    max_new_tokens: int
    sampling: SamplingConfig
    eos_ids: list[int]
    pad_id: int
    stop: bool  # rows stop at EOS (and keep padding after it)
    return_logits: bool = False

    @property
    def steps(self) -> int:
        """Decode passes after the prefill (the prefill's logits give the first token)."""
        return max(0, self.max_new_tokens - 1)


@dataclass
class LoopBuffers:
    """The cache and masks of one decode, sized for its path (see the module doc)."""

    cache: KVCache
    capacity: int
    decode_mask: torch.Tensor | None  # (B, 1, 1, capacity) additive, or None: SDPA unmasked
    capacity_mask: torch.Tensor | None  # the compiled step's mask over the whole capacity
    maskless: bool

    @classmethod
    def open(cls, dec: Any, req: DecodeRequest) -> LoopBuffers:
        B, P = req.input_ids.shape
        capacity = P + req.steps
        if dec.compiled is not None:
            capacity = bucketed_capacity(capacity)
        mask, dtype = req.attention_mask, dec.dtype
        # Without padding, SDPA needs no mask (causal prefill, full decode rows), which also
        # lets it run grouped-query attention without copying K/V per head.
        maskless = dec.uses_sdpa and bool(mask.all())
        return cls(
            cache=dec.new_cache(B, capacity),
            capacity=capacity,
            decode_mask=None if maskless else decode_attention_mask(mask, capacity, dtype),
            capacity_mask=None
            if dec.compiled is None
            else decode_attention_mask(mask, capacity, dtype),
            maskless=maskless,
        )


@dataclass
class _Trace:
    """What the loop produced and ran, pass by pass."""

    generated: list[torch.Tensor] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    live: list[torch.Tensor] = field(default_factory=list)
    layers: list[tuple[int, ...]] = field(default_factory=list)
    token_layers: list[torch.Tensor] = field(default_factory=list)
    graph: str | None = None  # what one graph covered: step, plan or layer (None: eager)
    fallback: str | None = None  # why whole-step graphs were asked for and not used


def _graph_path(
    compiled: CompiledLayers | None, req: DecodeRequest, plans: list[tuple[int, ...]] | None
) -> tuple[str | None, str | None]:
    """What one graph covers in this call, and why not the whole step where it was asked for
    (``compile_graph="step"``) and this call cannot use it (it then runs per-layer graphs)."""
    if compiled is None:
        return None, None
    if compiled.graph != "step":
        return compiled.graph, None
    steps = compiled.steps
    assert steps is not None
    if plans is None:
        reason = "the schedule has no position-only plan"
    elif req.sampling.do_sample:
        reason = "sampling (whole steps choose greedily)"
    elif req.return_logits:
        reason = "per-step logits were asked for"
    elif req.stop and len(req.eos_ids) > EOS_SLOTS:
        reason = f"{len(req.eos_ids)} EOS ids (a whole step tests at most {EOS_SLOTS})"
    elif data_dependent_rope(compiled.adapter.config):
        reason = "a rotary scaling that reads the positions on the host"
    elif distinct_plans(plans) > steps.limit:
        reason = f"{distinct_plans(plans)} distinct plans (the bound is {steps.limit})"
    else:
        return "step", None
    return "layer", reason


def plan_generate(dec: Any, req: DecodeRequest, schedule: LayerPlan) -> GenerationOutput:
    """Decode ``req`` under ``schedule`` on ``dec`` (a :class:`~skipdecode.core.engine.
    SkipDecoder`), eager or compiled as the decoder was built."""
    B = req.input_ids.shape[0]
    run = schedule.start(B)
    static = schedule.static()
    plans = None if static is None else [tuple(static.active_layers(g)) for g in range(req.steps)]
    if plans is not None:
        check_nested(plans)
    compiled: CompiledLayers | None = dec.compiled
    trace = _Trace()
    trace.graph, trace.fallback = _graph_path(compiled, req, plans)
    if compiled is not None and compiled.steps is not None:  # its per-layer fallback records too
        compiled.steps.check_weights()
    with eval_mode(dec.model):
        buffers = LoopBuffers.open(dec, req)
        compiling = 0.0 if compiled is None else compiled.compile_seconds
        t0 = now(req.input_ids.device)
        logits = dec.prefill(req.input_ids, req.attention_mask, buffers.cache, buffers.maskless)
        t1 = now(req.input_ids.device)
        if trace.graph == "step":
            assert plans is not None
            _whole_step_passes(dec, req, plans, buffers, logits, trace)
        else:
            _decode_passes(dec, req, run, buffers, logits, trace)
        t2 = now(req.input_ids.device)
        if compiled is not None:  # compile time is reported, never counted as decoding
            compiling = compiled.compile_seconds - compiling
    return _output(dec, req, schedule, trace, (t1 - t0, t2 - t1 - compiling, compiling))


def _decode_passes(
    dec: Any,
    req: DecodeRequest,
    run: StepRunner,
    buffers: LoopBuffers,
    logits: torch.Tensor,
    trace: _Trace,
) -> None:
    """The first token from the prefill's ``logits``, then one pass per later token."""
    device, P = req.input_ids.device, req.input_ids.shape[1]
    generator = req.sampling.generator(device)
    eos = torch.tensor(req.eos_ids or [-1], device=device)
    valid = req.attention_mask.long().sum(-1)  # (B,) real prompt tokens per row
    finished = torch.zeros(req.input_ids.shape[0], dtype=torch.bool, device=device)
    if req.max_new_tokens == 0:
        return
    token = select_next(logits, req.sampling, generator)
    _keep(trace, req, token, logits)
    if req.stop:
        finished = torch.isin(token, eos)
    # Checking "all rows finished" reads a device value; on a GPU that is a host sync, so it is
    # done every few steps there (extra steps only decode padding).
    check_every = 8 if device.type == "cuda" else 1
    for g in range(req.steps):
        if req.stop and g % check_every == 0 and bool(finished.all()):
            break
        live = ~finished
        trace.live.append(live)
        step = DecodeStep(
            index=g,
            token=token,
            position=(valid + g)[:, None],  # (B, 1) position id of token g
            live=live,
            adapter=dec.adapter,
            cache=buffers.cache,
            cache_position=P + g,
            attention_mask=None
            if buffers.decode_mask is None
            else buffers.decode_mask[..., : P + g + 1],
            compiled=dec.compiled,
            capacity_mask=None
            if buffers.capacity_mask is None
            else future_mask(buffers.capacity_mask, P + g),
        )
        result = run.decode(step)
        trace.layers.append(tuple(result.layers))
        if result.token_layers is not None:
            trace.token_layers.append(result.token_layers)
        token = select_next(result.logits, req.sampling, generator)
        if req.stop:
            token = torch.where(finished, torch.full_like(token, req.pad_id), token)
            finished = finished | torch.isin(token, eos)
        _keep(trace, req, token, result.logits)


def _whole_step_passes(
    dec: Any,
    req: DecodeRequest,
    plans: list[tuple[int, ...]],
    buffers: LoopBuffers,
    logits: torch.Tensor,
    trace: _Trace,
) -> None:
    """:func:`_decode_passes` on whole-step graphs (:mod:`~skipdecode.core.step_graphs`): the
    first token from the prefill's ``logits``, then one replay per pass; the host picks each
    pass's plan and reads the state only for the stop check (every 8 passes on a GPU)."""
    if req.max_new_tokens == 0:
        return
    steps = dec.compiled.steps
    device, P = req.input_ids.device, req.input_ids.shape[1]
    assert buffers.capacity_mask is not None and isinstance(buffers.cache, StaticKVCache)
    state = steps.state(req.input_ids.shape[0], buffers.capacity, buffers.capacity_mask.dtype)
    token = logits.argmax(dim=-1)
    eos = torch.tensor(req.eos_ids or [-1], device=device)
    finished = torch.isin(token, eos) if req.stop else torch.zeros_like(token, dtype=torch.bool)
    valid = req.attention_mask.long().sum(-1)
    stops = req.eos_ids if req.stop else []
    state.load(token, valid, P, buffers.capacity_mask, finished, stops, req.pad_id)
    check_every = 8 if device.type == "cuda" else 1
    passes = 0
    for g, plan in enumerate(plans):
        if req.stop and g % check_every == 0 and bool(state.finished.all()):
            break
        buffers.cache.begin(P + g)
        steps.step(state, plan, buffers.cache, req.stop)
        trace.layers.append(plan)
        passes += 1
    trace.generated = list(state.tokens[:, : passes + 1].clone().unbind(1))
    trace.live = list(state.live[:, :passes].clone().unbind(1))


def _keep(trace: _Trace, req: DecodeRequest, token: torch.Tensor, logits: torch.Tensor) -> None:
    trace.generated.append(token)
    if req.return_logits:
        trace.logits.append(logits.float())


def _output(
    dec: Any,
    req: DecodeRequest,
    schedule: LayerPlan,
    trace: _Trace,
    seconds: tuple[float, float, float],
) -> GenerationOutput:
    """The generated ids, their stats and (on request) the logits of every step."""
    input_ids, B, P = req.input_ids, req.input_ids.shape[0], req.input_ids.shape[1]
    gen = torch.stack(trace.generated, 1) if trace.generated else input_ids.new_zeros(B, 0)
    budgets = [len(layers) for layers in trace.layers]
    # per-row depths, when the schedule's rows left at different depths (every pass reports)
    per_row = None
    if trace.token_layers and len(trace.token_layers) == len(budgets):
        per_row = [d.tolist() for d in trace.token_layers]
    prefill_s, decode_s, compile_s = seconds
    stats = GenerationStats(
        num_layers=dec.num_layers,
        prompt_length=P,
        budgets=budgets,
        live_rows=[int(x) for x in torch.stack(trace.live).sum(-1).tolist()] if trace.live else [],
        generated_lengths=lengths_with_eos(gen, req.eos_ids if req.stop else []),
        prefill_seconds=prefill_s,
        decode_seconds=decode_s,
        batch_size=B,
        compile_seconds=compile_s,
        compiled=dec.compiled is not None,
        graph=trace.graph,
        graph_fallback=trace.fallback,
        token_layers=per_row,
        live_mask=[x.tolist() for x in trace.live] if per_row is not None else None,
    )
    return GenerationOutput(
        sequences=torch.cat([input_ids, gen], dim=1),
        generated_ids=gen,
        prompt_mask=req.attention_mask,
        stats=stats,
        step_logits=torch.stack(trace.logits, 1) if trace.logits else None,
        active_layers=trace.layers,
        schedule=schedule.describe(),
    )
