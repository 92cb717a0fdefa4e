"""The form of each small-row matrix product in the compiled graphs, chosen by timing.

A linear layer computes ``x @ W.T`` with ``x`` of ``B`` rows, and
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
is timed too, compiled on its own. The products are the same; the order of the sum differs,
which the logit tolerance covers. With two rows or more that reduction would read ``W`` once per
row, so it is no candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from ..provenance import cpu_model
from .clock import now

_aten = torch.ops.aten

__all__ = [
    "GEMM_FORMS",
    "MATMUL_FORMS",
    "REDUCTION",
    "SMALL_ROWS",
    "MatmulForms",
    "SmallBatchMatmul",
    "candidate_forms",
    "time_forms",
]

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

        def seconds_per_call(form: str, calls: int) -> float:
            start = now(weight.device)
            for _ in range(calls):
                calls_of[form]()
            return (now(weight.device) - start) / calls

        calls = {}
        for form in forms:  # warm up (and compile), and size a round
            calls_of[form]()
            calls[form] = max(1, min(1000, int(2e-3 / max(seconds_per_call(form, 1), 1e-7))))
        best = dict.fromkeys(forms, float("inf"))
        for _ in range(5):
            for form in forms:
                best[form] = min(best[form], seconds_per_call(form, calls[form]))
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
        if rows <= SMALL_ROWS:
            for weight in weights:
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
