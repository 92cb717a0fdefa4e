"""The compiled decode path: one compiled layer step, replayed for every active layer, or one
compiled graph per layer set (``graph="plan"``).

Why one layer step by default and not one graph per plan: a SkipDecode plan is a set of active
layers, and a linear decay over a 30-layer model passes through up to ~25 distinct sets; a graph
per set would compile each (about 20 s apiece for SmolLM2 on a 2-core CPU) and the adaptive
methods choose sets at run time. Decoder layers of one family share their structure, and
``torch.compile`` inlines ``nn.Module`` calls with the parameters as graph inputs, so a single
compiled function serves every layer (a family with several layer kinds, such as Gemma 3's
sliding and global layers, gets one graph per kind) and any plan replays it layer by layer. The
head (final norm, LM head, logit scale or soft-cap) is a second compiled function.

Where a run uses few layer sets (the full model; the lossless mode with a constant draft: the
draft's layers and all layers), ``graph="plan"`` compiles each set's layers into one graph, so a
pass is one call instead of one per layer: what a replayed layer step pays per layer in dispatch
and guard checks is paid once per pass.

Static shapes: the layer writes its key and value in place into the preallocated cache at a
*tensor* position (``index_copy_``), and attends over the whole capacity with an additive mask
that hides the columns not written yet. Shapes then depend only on the batch and the capacity;
capacities are rounded up to a bucket (:data:`CAPACITY_BUCKET`), and each (batch, capacity) gets
its own static graph (``dynamic=False``: on a CPU the dynamic-shape graphs ran slower than the
eager path at batch 32). An evaluation's batches share one size but the last, so it compiles a
few graphs. Per-layer lengths and the gap check stay in Python, outside the graph.

Small-batch matrix products are written in the form timed fastest on the machine
(:mod:`skipdecode.core.matmul_forms`).

Exactness: the compiled step computes the same operations (inductor may fuse and reorder
floating-point arithmetic); masked columns contribute exactly zero to the softmax. The tests
require greedy tokens identical to the eager path and to transformers' ``generate`` and logits
within 1e-4 in float32. The lossless mode's passes run here too (``core.speculative``). CALM,
whose tokens exit at different depths and which drives the layers itself, stays on the eager
path.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .adapters import DecoderAdapter
from .cache import StaticKVCache
from .graphs import Recorder, StaticHead, StaticPass
from .step_graphs import StepGraphs

if TYPE_CHECKING:  # imported where a decoder compiles (it imports torch._inductor: ~3 s)
    from .matmul_forms import MatmulForms

__all__ = ["CAPACITY_BUCKET", "COMPILE_MODES", "CompiledLayers", "CompileTime", "bucketed_capacity"]

CAPACITY_BUCKET = 64  # cache capacities are multiples of this on the compiled path
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
#: What one compiled graph covers: one layer (replayed for every active layer of any plan) or a
#: whole plan's layers (one call a pass, one compile per layer set).
#: ``"step"``: the whole decode step (embedding to greedy choice) as one CUDA graph per plan,
#: on the CUDA-graph path only (:mod:`skipdecode.core.step_graphs`).
COMPILE_GRAPHS = ("layer", "plan", "step")
RECOMPILE_LIMIT = 256


def bucketed_capacity(capacity: int) -> int:
    """``capacity`` rounded up to a multiple of :data:`CAPACITY_BUCKET`."""
    return -(-max(capacity, 1) // CAPACITY_BUCKET) * CAPACITY_BUCKET


class _CacheSlot:
    """What a layer sees as its cache inside the compiled step: it writes the pass's keys and
    values at ``position`` of this layer's buffers and returns the whole buffers."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, position: torch.Tensor):
        self.keys, self.values, self.position = keys, values, position

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.keys.index_copy_(2, self.position, key)
        self.values.index_copy_(2, self.position, value)
        return self.keys, self.values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


def _layer_step(
    layer: nn.Module,
    hidden: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    position: torch.Tensor,
    mask: torch.Tensor,
    kwargs: dict[str, Any],
    cache_kwarg: str,
) -> torch.Tensor:
    """One decoder layer over ``hidden`` ``(B, T, D)``, writing its KV at ``position`` ``(T,)``."""
    call = {**kwargs, cache_kwarg: _CacheSlot(keys, values, position), "use_cache": True}
    out = layer(hidden, attention_mask=mask, **call)
    return out[0] if isinstance(out, tuple) else out


def _plan_step(
    layers: tuple[nn.Module, ...],
    hidden: torch.Tensor,
    keys: tuple[torch.Tensor, ...],
    values: tuple[torch.Tensor, ...],
    position: torch.Tensor,
    mask: torch.Tensor,
    kwargs: tuple[dict[str, Any], ...],
    cache_kwarg: str,
) -> torch.Tensor:
    """``hidden`` through every layer of a plan, bottom to top: one graph for the plan."""
    for layer, k, v, kw in zip(layers, keys, values, kwargs):
        hidden = _layer_step(layer, hidden, k, v, position, mask, kw, cache_kwarg)
    return hidden


def _subset_logits(
    adapter: DecoderAdapter, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    return adapter.head_logits(adapter.head_input(hidden), weight, bias)


class CompiledLayers:
    """The compiled layer step and head of one model (built once per decoder, reused by every
    ``generate`` call); ``compile_seconds`` adds up the calls that compiled."""

    def __init__(
        self,
        adapter: DecoderAdapter,
        mode: str = "default",
        forms: MatmulForms | None = None,
        graph: str = "layer",
        cuda_graphs: bool = False,
    ):
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile mode {mode!r} is not allowed: choose one of {COMPILE_MODES}")
        if graph not in COMPILE_GRAPHS:
            raise ValueError(
                f"compile graph {graph!r} is not allowed: choose one of {COMPILE_GRAPHS}"
            )
        if cuda_graphs and mode == "reduce-overhead":
            raise ValueError(
                "cuda_graphs records the compiled steps itself (core.graphs): compile them in "
                "another mode than 'reduce-overhead', whose own graphs would nest inside"
            )
        self.adapter = adapter
        self.mode = mode
        self.graph = graph
        # Dynamo keeps compiled graphs per code object: every model in a process (each layer
        # kind, batch, positions and capacity) adds entries to _layer_step's, and past the limit
        # it would silently run eager. A process that decodes several models, or the lossless
        # mode's shrinking batches, needs more than 8.
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, RECOMPILE_LIMIT)
        # torch.compile takes a mode or options: the mode's own options, plus the pass
        from torch._inductor import list_mode_options

        from .matmul_forms import MATMUL_FORMS, SmallBatchMatmul

        self.forms = forms or MATMUL_FORMS  # the graphs' product forms (timed per shape)
        pass_ = SmallBatchMatmul(self.forms)
        options = {**list_mode_options(mode), "post_grad_custom_post_pass": pass_}
        # fullgraph: a graph break would split a step into pieces (and a CUDA graph into none)
        self.fullgraph = True
        self.compile_fn = functools.partial(
            torch.compile, dynamic=False, fullgraph=self.fullgraph, options=options
        )
        self._layer = self.compile_fn(_layer_step)
        self._plan = self.compile_fn(_plan_step)
        self._head = self.compile_fn(adapter.head)
        self._subset_head = self.compile_fn(_subset_logits)
        self._modules = list(adapter.layers)
        self._kinds = [adapter.layer_kind(i) for i in range(adapter.num_layers)]
        self._seen: set[tuple] = set()
        self.compile_seconds = 0.0
        # cuda_graphs: every step recorded once per shape and replayed (core.graphs); the
        # compiled functions stay in the mode given (inductor records no graphs of its own)
        self.recorder: Recorder | None = None
        self._passes: dict[tuple[int, int, int], StaticPass] = {}
        self._heads: dict[tuple[int, int], StaticHead] = {}
        if cuda_graphs:
            self.recorder = Recorder(next(adapter.model.parameters()).device)
        if graph == "step" and not cuda_graphs:
            raise ValueError(
                "compile graph 'step' records whole decode steps as CUDA graphs: it needs "
                "cuda_graphs (compile='reduce-overhead')"
            )
        # graph="step": whole-step recordings; passes that cannot use them run per-layer ones
        self.steps: StepGraphs | None = StepGraphs(self) if graph == "step" else None
        # graph="step" in the lossless mode: sync-free rounds, made on first use
        self.rounds: Any = None

    def _first(self, key: tuple, rows: int, weights: Sequence[torch.Tensor], fn, *args):
        """The first call for ``key`` (a layer kind or the head, and the shapes): the forms
        of its ``rows``-row products with ``weights`` are timed, then it compiles; the time goes
        to ``compile_seconds`` (the compile dominates it), never to decoding. Later calls with
        the same key run without this bookkeeping."""
        out = self.compiling((rows,), weights, fn, *args)
        self._seen.add(key)
        return out

    def compiling(self, rows: Sequence[int], weights: Sequence[torch.Tensor], fn, *args):
        """``fn(*args)`` as compiling, not decoding: the forms of the products of each of
        ``rows`` rows with ``weights`` are timed first, and the whole time (the device waited
        for) goes to ``compile_seconds``."""
        start = time.perf_counter()
        for n in rows:
            self.forms.prepare(n, weights)
        out = fn(*args)
        device = next(self.adapter.model.parameters()).device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.compile_seconds += time.perf_counter() - start
        return out

    def run(
        self,
        hidden: torch.Tensor,
        kwargs: dict[str, Any],
        layers: Sequence[int],
        cache: StaticKVCache,
        cache_position: int,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """``hidden`` ``(B, T, D)`` through ``layers`` (bottom to top), each writing ``T`` cache
        columns from ``cache_position`` in place: the hidden states leaving the last layer (the
        head is :meth:`head`). ``mask``: ``(B, 1, T, capacity)`` additive, unwritten columns
        hidden."""
        B, T, _ = hidden.shape
        position = torch.arange(cache_position, cache_position + T, device=hidden.device)
        if self.recorder is not None:
            return self._run_recorded(hidden, kwargs, tuple(layers), cache, position, mask)
        if self.graph == "plan":
            return self._run_plan(hidden, kwargs, tuple(layers), cache, position, mask)
        adapter, step, seen = self.adapter, self._layer, self._seen
        shape = (B, T, cache.capacity)
        for i in layers:
            keys, values = cache.claim(i, T)
            args = (
                self._modules[i],
                hidden,
                keys,
                values,
                position,
                mask,
                adapter._layer_call_kwargs(i, kwargs),
                adapter._cache_kwarg,
            )
            key = (self._kinds[i], shape)
            if key in seen:
                hidden = step(*args)
            else:
                hidden = self._first(key, B * T, self._weights([i]), step, *args)
        return hidden

    def _weights(self, layers: Sequence[int]) -> list[torch.Tensor]:
        return [
            m.weight for i in layers for m in self._modules[i].modules() if isinstance(m, nn.Linear)
        ]

    def _run_plan(
        self,
        hidden: torch.Tensor,
        kwargs: dict[str, Any],
        layers: tuple[int, ...],
        cache: StaticKVCache,
        position: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """:meth:`run` as one compiled graph per layer set (and shapes)."""
        B, T, _ = hidden.shape
        claimed = [cache.claim(i, T) for i in layers]
        adapter = self.adapter
        args = (
            tuple(self._modules[i] for i in layers),
            hidden,
            tuple(k for k, _ in claimed),
            tuple(v for _, v in claimed),
            position,
            mask,
            tuple(adapter._layer_call_kwargs(i, kwargs) for i in layers),
            adapter._cache_kwarg,
        )
        key = ("plan", layers, B, T, cache.capacity)
        if key in self._seen:
            return self._plan(*args)
        return self._first(key, B * T, self._weights(layers), self._plan, *args)

    def _run_recorded(
        self,
        hidden: torch.Tensor,
        kwargs: dict[str, Any],
        layers: tuple[int, ...],
        cache: StaticKVCache,
        position: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """:meth:`run` on recorded steps (CUDA graphs on a GPU): the pass's inputs copied into
        its shape's static buffers, then one replay per layer (or one for the layer set, with
        ``graph="plan"``). The static hidden states it returns are overwritten by the next pass
        of the same shape."""
        B, T, _ = hidden.shape
        shape = (B, T, cache.capacity)
        static = self._passes.get(shape)
        if static is None:
            static = self._passes[shape] = StaticPass(hidden, kwargs, position, mask)
        static.load(hidden, kwargs, position, mask)
        units = [layers] if self.graph == "plan" else [(i,) for i in layers]
        assert self.recorder is not None
        for unit in units:
            buffers = tuple(t for i in unit for t in cache.claim(i, T))
            step = functools.partial(self._static_step, static, unit, buffers)
            args = (unit, buffers, step, self.recorder)
            if unit in static.steps:
                static.replay(*args)
            else:  # recorded now: compiling (first of its kind) and recording are not decoding
                self._first(
                    ("recorded", unit, shape), B * T, self._weights(unit), static.replay, *args
                )
        return static.hidden

    def _static_step(
        self, static: StaticPass, unit: tuple[int, ...], buffers: tuple[torch.Tensor, ...]
    ) -> torch.Tensor:
        """The compiled layer step (or plan) of ``unit`` on the static inputs of one shape."""
        adapter = self.adapter
        if len(unit) == 1:
            (i,) = unit
            return self._layer(
                self._modules[i], static.hidden, buffers[0], buffers[1], static.position,
                static.mask, adapter._layer_call_kwargs(i, static.kwargs), adapter._cache_kwarg,
            )  # fmt: skip
        return self._plan(
            tuple(self._modules[i] for i in unit), static.hidden, buffers[0::2], buffers[1::2],
            static.position, static.mask,
            tuple(adapter._layer_call_kwargs(i, static.kwargs) for i in unit), adapter._cache_kwarg,
        )  # fmt: skip

    @property
    def captures(self) -> int:
        """Steps recorded so far (CUDA graphs on a GPU); 0 without recording."""
        return 0 if self.recorder is None else self.recorder.captures

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The compiled head (final norm, LM head): logits ``(B, T, V)``."""
        if self.recorder is not None:
            return self._recorded_head(hidden)
        key = ("head", *hidden.shape)
        if key in self._seen:
            return self._head(hidden)
        rows, weight = hidden.shape[0] * hidden.shape[1], self.adapter.lm_head.weight
        return self._first(key, rows, [weight], self._head, hidden)

    def _recorded_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head replayed from its recording for ``hidden``'s shape (recorded on first use)."""
        assert self.recorder is not None
        B, T, _ = hidden.shape
        head = self._heads.get((B, T))
        if head is not None:
            return head(hidden)
        head = self._heads[(B, T)] = StaticHead(self._head, self.recorder)
        key = ("recorded head", B, T)
        return self._first(key, B * T, [self.adapter.lm_head.weight], head, hidden)

    def subset_head(
        self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """The compiled head over the rows ``weight`` ``(N, D)`` of the LM head (a draft
        vocabulary, :class:`~skipdecode.core.subset_head.SubsetHead`): logits ``(B, T, N)``."""
        key = ("subset_head", *hidden.shape, *weight.shape, bias is None)
        args = (self.adapter, hidden, weight, bias)
        fn = self._subset_head
        if key in self._seen:
            return fn(*args)
        return self._first(key, hidden.shape[0] * hidden.shape[1], [weight], fn, *args)


def future_mask(base: torch.Tensor, column: int) -> torch.Tensor:
    """``base`` ``(B, 1, 1, capacity)`` with the columns after ``column`` hidden too: the mask
    of a one-token pass that writes at ``column`` and attends over the whole capacity."""
    capacity = base.shape[-1]
    written = torch.arange(capacity, device=base.device) <= column
    return torch.where(written, base, torch.finfo(base.dtype).min)


class CompileTime:
    """Seconds ``compiled`` spent compiling since this was made (always 0 without it): what a
    decode call takes out of its decoding time."""

    def __init__(self, compiled: CompiledLayers | None):
        self.compiled = compiled
        self.start = 0.0 if compiled is None else compiled.compile_seconds

    def seconds(self) -> float:
        return 0.0 if self.compiled is None else self.compiled.compile_seconds - self.start
