"""The compiled decode path: one compiled layer step, replayed for every active layer.

Why one layer step and not one graph per plan: a SkipDecode plan is a set of active layers, and
a linear decay over a 30-layer model passes through up to ~25 distinct sets; a graph per set
would compile each (tens of seconds apiece on a CPU) and the adaptive methods choose sets at run
time. Decoder layers of one family share their structure, and ``torch.compile`` inlines
``nn.Module`` calls with the parameters as graph inputs, so a single compiled function serves
every layer (a family with several layer kinds, such as Gemma 3's sliding and global layers, gets
one graph per kind) and any plan replays it layer by layer. The head (final norm, LM head, logit
scale or soft-cap) is a second compiled function.

Static shapes: the layer writes its key and value in place into the preallocated cache at a
*tensor* position (``index_copy_``), and attends over the whole capacity with an additive mask
that hides the columns not written yet. Shapes then depend only on the batch and the capacity;
capacities are rounded up to a bucket (:data:`CAPACITY_BUCKET`), and each (batch, capacity) gets
its own static graph (``dynamic=False``: on a CPU the dynamic-shape graphs ran slower than the
eager path at batch 32). An evaluation's batches share one size but the last, so it compiles a
few graphs. Per-layer lengths and the gap check stay in Python, outside the graph.

Small-batch matrix products: a linear layer computes ``x @ W.T`` with ``x`` of ``B`` rows, and
for the few rows of a decode step which GEMM form runs fastest depends on the machine's BLAS:
the weight as the transposed right operand (``x @ W.T``, "weight-right") or as the left one
(``(W @ x.T).T``, "weight-left"), the same arithmetic. On a 2-core AMD EPYC weight-left was much
faster (the SmolLM2 head at batch 8: 9 ms against 23 ms); on a 2-core Intel Xeon weight-right is,
1.7-4.9x at 2 and 3 rows (the MLP's down projection at 3 rows: 50 against 174 us), while from
about 10 rows on weight-left mostly wins again. So a post-grad pass (:class:`SmallBatchMatmul`)
writes every ``mm(x, W.T)`` with at most :data:`SMALL_ROWS` rows in the form that
:class:`MatmulForms` timed faster on this machine, once per shape, before the graph that needs
it compiles (in the compile time, never in decoding).
A single float32 row on a CPU has a third candidate, ``(x * W).sum(-1)``, which inductor
compiles into one reduction over ``W`` split across the threads: on the AMD EPYC the BLAS ran
the matrix-vector product on one thread (the SmolLM2 head at batch 1: 9.2 ms eager against
5.0 ms as this reduction; ``results/bench/decode-smollm2-cpu-compiled.md``), while the Xeon's
runs it on both and the reduction was the slower there (head 2.77 ms compiled against 2.14
eager in ``results/bench/decode-smollm2-cpu-compiled-xeon.md`` as committed in 518a342), so it
is timed too, compiled on its own. The products are the same; the order of the sum differs, which the logit tolerance
covers. With two rows or more that reduction would read ``W`` once per row, so it is no
candidate.

Exactness: the compiled step computes the same operations (inductor may fuse and reorder
floating-point arithmetic); masked columns contribute exactly zero to the softmax. The tests
require greedy tokens identical to the eager path and to transformers' ``generate`` and logits
within 1e-4 in float32. The lossless mode's passes run here too (``core.speculative``). CALM,
whose tokens exit at different depths and which drives the layers itself, stays on the eager
path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from ..provenance import cpu_model
from .adapters import DecoderAdapter
from .cache import StaticKVCache
from .clock import now

_aten = torch.ops.aten

__all__ = [
    "CAPACITY_BUCKET",
    "COMPILE_MODES",
    "CompiledLayers",
    "CompileTime",
    "MATMUL_FORMS",
    "MatmulForms",
    "SmallBatchMatmul",
    "bucketed_capacity",
    "candidate_forms",
    "time_forms",
]

CAPACITY_BUCKET = 64  # cache capacities are multiples of this on the compiled path
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")
RECOMPILE_LIMIT = 256
SMALL_ROWS = 64  # mm(x, W.T) with at most this many rows: the faster GEMM form, by timing
GEMM_FORMS = ("weight-right", "weight-left")  # x @ W.T as written, and (W @ x.T).T
REDUCTION = "reduction"  # one row: sum(x * W, -1), a reduction inductor splits across threads


def candidate_forms(weight: torch.Tensor, rows: int) -> tuple[str, ...]:
    """The forms timed for ``rows`` rows times ``weight``'s transpose: both GEMM forms, and for
    one float32 row on a CPU the reduction (the BLAS may run a matrix-vector product on one
    thread). The reduction is timed compiled, so not for a fake weight (inside a compile)."""
    from torch._subclasses.fake_tensor import is_fake

    one_row = rows == 1 and weight.device.type == "cpu" and weight.dtype == torch.float32
    return GEMM_FORMS + ((REDUCTION,) if one_row and not is_fake(weight) else ())


def _row_reduction(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (x * weight).sum(-1)


_compiled_row_reduction = torch.compile(_row_reduction, dynamic=False)


def time_forms(weight: torch.Tensor, rows: int, forms: Sequence[str]) -> dict[str, float]:
    """Seconds per call of each of ``forms`` for ``x`` of ``rows`` rows and ``weight``
    ``(out_features, in_features)``: the fastest of five rounds, the forms alternating, each
    round long enough (about 2 ms) to read the clock well. A fake tensor (a shape inside a
    compile) is timed with a random weight of its shape. The reduction runs as a compiled call
    of its own, which pays a dispatch (about 10-20 us on a CPU) that inside a layer's graph it
    does not: for small weights the choice leans to the GEMM."""
    from torch._subclasses.fake_tensor import is_fake, unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():  # real tensors inside a compile
        if is_fake(weight):
            weight = torch.randn(weight.shape, dtype=weight.dtype, device=weight.device)
        x = torch.randn(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
        calls_of = {
            "weight-right": lambda: torch.mm(x, weight.t()),
            "weight-left": lambda: torch.mm(weight, x.t()).t(),
            REDUCTION: lambda: _compiled_row_reduction(x, weight),
        }
        unknown = set(forms) - set(calls_of)
        if unknown:
            raise ValueError(
                f"forms {sorted(unknown)} are not allowed: choose from {list(calls_of)}"
            )
        calls = {}
        for form in forms:  # warm up (and compile), and size a round
            fn = calls_of[form]
            fn()
            start = now(weight.device)
            fn()
            calls[form] = max(1, min(1000, int(2e-3 / max(now(weight.device) - start, 1e-7))))
        best = dict.fromkeys(forms, float("inf"))
        for _ in range(5):
            for form in forms:
                fn = calls_of[form]
                start = now(weight.device)
                for _ in range(calls[form]):
                    fn()
                best[form] = min(best[form], (now(weight.device) - start) / calls[form])
    return best


class MatmulForms:
    """The form of each small-row product ``x @ W.T``, chosen by timing the candidates
    (:func:`candidate_forms`; ``clock``, by default :func:`time_forms`) once per device, dtype
    and shape; :meth:`table` lists the choices with their times, for a benchmark's record."""

    def __init__(
        self, clock: Callable[[torch.Tensor, int, Sequence[str]], dict[str, float]] = time_forms
    ):
        self.clock = clock
        self.chosen: dict[tuple, tuple[str, dict[str, float]]] = {}

    def form(self, weight: torch.Tensor, rows: int) -> str:
        """The fastest form for ``rows`` rows times ``weight``'s transpose (timed on its first
        request)."""
        dtype = str(weight.dtype).removeprefix("torch.")
        key = (weight.device.type, dtype, rows, *weight.shape)
        if key not in self.chosen:
            forms = candidate_forms(weight, rows)
            seconds = self.clock(weight, rows, forms)
            if set(seconds) != set(forms):
                raise ValueError(f"a clock must time exactly {forms}, not {sorted(seconds)}")
            self.chosen[key] = (min(forms, key=seconds.__getitem__), seconds)
        return self.chosen[key][0]

    def prepare(self, rows: int, weights: Sequence[torch.Tensor]) -> None:
        """Time, now, the products of ``rows`` rows with each of ``weights`` that the pass will
        ask about: before a graph compiles, so that inductor's compile workers are idle (timed
        inside the pass, a product measured up to 4x slower while they ran) and the one-row
        reduction can be compiled to be timed."""
        for weight in weights:
            if rows <= SMALL_ROWS:
                self.form(weight, rows)

    def table(self) -> list[dict[str, Any]]:
        """One row per timed product: its shape, the chosen form and microseconds per form."""
        return [
            {
                "device": device,
                "dtype": dtype,
                "rows": rows,
                "out_features": out_features,
                "in_features": in_features,
                "form": form,
                **{f"{name}_us": round(s * 1e6, 2) for name, s in seconds.items()},
            }
            for (device, dtype, rows, out_features, in_features), (form, seconds) in sorted(
                self.chosen.items()
            )
        ]


MATMUL_FORMS = MatmulForms()  # this process's choices, shared by every compiled graph


class SmallBatchMatmul(CustomGraphPass):
    """Inductor post-grad pass: ``mm(x, permute(W, [1, 0]))`` (and ``addmm(b, x, W.T)``) with
    at most :data:`SMALL_ROWS` static rows runs in the form ``forms`` timed fastest on this
    machine: as written, ``permute(mm(W, x.T), [1, 0])`` (+ b), the same products and sums with
    the weight as the left operand, or for one float32 CPU row ``sum(x * W, -1)`` (+ b), a
    reduction inductor parallelises."""

    def __init__(self, forms: MatmulForms = MATMUL_FORMS):
        self.forms = forms

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op != "call_function" or node.kwargs:
                continue
            if node.target is _aten.mm.default:
                (x, wt), bias = node.args, None
            elif node.target is _aten.addmm.default and len(node.args) == 3:
                bias, x, wt = node.args
            else:
                continue
            if not (
                isinstance(wt, torch.fx.Node)
                and wt.target is _aten.permute.default
                and list(wt.args[1]) == [1, 0]
            ):
                continue
            val = x.meta.get("val")
            weight = wt.args[0].meta.get("val") if isinstance(wt.args[0], torch.fx.Node) else None
            rows = getattr(val, "shape", (None,))[0]
            if not isinstance(rows, int) or rows > SMALL_ROWS or weight is None:
                continue
            form = self.forms.form(weight, rows)
            if form == "weight-right":
                continue
            with graph.inserting_before(node):
                if form == REDUCTION:
                    products = graph.call_function(_aten.mul.Tensor, (x, wt.args[0]))
                    row = graph.call_function(_aten.sum.dim_IntList, (products, [1]))
                    out = graph.call_function(_aten.unsqueeze.default, (row, 0))
                else:
                    xt = graph.call_function(_aten.permute.default, (x, [1, 0]))
                    product = graph.call_function(_aten.mm.default, (wt.args[0], xt))
                    out = graph.call_function(_aten.permute.default, (product, [1, 0]))
                if bias is not None:
                    out = graph.call_function(_aten.add.Tensor, (out, bias))
            node.replace_all_uses_with(out)
            graph.erase_node(node)

    def uuid(self) -> bytes:
        """Inductor's cache key for the pass: its source, the machine and the forms chosen so
        far (timed before the graph compiles, :meth:`MatmulForms.prepare`), so that a graph
        from inductor's cache was written with the forms this process chose."""
        chosen = sorted((key, form) for key, (form, _) in self.forms.chosen.items())
        return get_hash_for_files((__file__,)) + repr((cpu_model(), chosen)).encode()


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


def _subset_logits(
    adapter: DecoderAdapter, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    return adapter.head_logits(adapter.head_input(hidden), weight, bias)


class CompiledLayers:
    """The compiled layer step and head of one model (built once per decoder, reused by every
    ``generate`` call); ``compile_seconds`` adds up the calls that compiled."""

    def __init__(
        self, adapter: DecoderAdapter, mode: str = "default", forms: MatmulForms = MATMUL_FORMS
    ):
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile mode {mode!r} is not allowed: choose one of {COMPILE_MODES}")
        self.adapter = adapter
        self.mode = mode
        self.forms = forms  # the GEMM forms the graphs were written with (timed per shape)
        # Dynamo keeps compiled graphs per code object: every model in a process (each layer
        # kind, batch, positions and capacity) adds entries to _layer_step's, and past the limit
        # it would silently run eager. A process that decodes several models, or the lossless
        # mode's shrinking batches, needs more than 8.
        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, RECOMPILE_LIMIT)
        # torch.compile takes a mode or options: the mode's own options, plus the pass
        from torch._inductor import list_mode_options

        options = {**list_mode_options(mode), "post_grad_custom_post_pass": SmallBatchMatmul(forms)}
        self._layer = torch.compile(_layer_step, dynamic=False, options=options)
        self._head = torch.compile(adapter.head, dynamic=False, options=options)
        self._subset_head = torch.compile(_subset_logits, dynamic=False, options=options)
        self._modules = list(adapter.layers)
        self._kinds = [adapter.layer_kind(i) for i in range(adapter.num_layers)]
        self._seen: set[tuple] = set()
        self.compile_seconds = 0.0

    def _first(self, key: tuple, rows: int, weights: Sequence[torch.Tensor], fn, *args):
        """The first call for ``key`` (a layer kind or the head, and the shapes): the GEMM forms
        of its ``rows``-row products with ``weights`` are timed, then it compiles; the time goes
        to ``compile_seconds`` (the compile dominates it), never to decoding. Later calls with
        the same key run without this bookkeeping."""
        start = time.perf_counter()
        self.forms.prepare(rows, weights)
        out = fn(*args)
        if out.is_cuda:
            torch.cuda.synchronize(out.device)
        self.compile_seconds += time.perf_counter() - start
        self._seen.add(key)
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
                weights = [m.weight for m in self._modules[i].modules() if isinstance(m, nn.Linear)]
                hidden = self._first(key, B * T, weights, step, *args)
        return hidden

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The compiled head (final norm, LM head): logits ``(B, T, V)``."""
        key = ("head", *hidden.shape)
        if key in self._seen:
            return self._head(hidden)
        rows, weight = hidden.shape[0] * hidden.shape[1], self.adapter.lm_head.weight
        return self._first(key, rows, [weight], self._head, hidden)

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
