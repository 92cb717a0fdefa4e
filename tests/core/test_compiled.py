"""The compiled decode path against the eager reference and transformers' ``generate``.

Contract (float32, CPU): greedy tokens identical to the eager path and to ``generate`` on
left-padded batches, logits within ``1e-4`` of the largest logit's magnitude (inductor may
reorder floating-point sums), for the full schedule and skip schedules, for a single-kind family
(Llama), a family with learned positions (OPT) and one with two layer kinds (Gemma 3; OPT and
Gemma 3 behind ``slow``: compiling is most of a test's time). The tests check that graphs were
really compiled (dynamo falls back to eager silently otherwise), and share one batch shape so
that the Llama graphs compile once for the module.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from device_watch import uncompiled
from tiny_models import PAD, left_padded_batch, tiny_family, tiny_llama, tiny_opt
from torch import nn
from torch._dynamo.utils import counters

from skipdecode.core.compiled import CompiledLayers, bucketed_capacity
from skipdecode.core.engine import SkipDecoder
from skipdecode.core.matmul_forms import (
    SMALL_ROWS,
    MatmulForms,
    SmallBatchMatmul,
    candidate_forms,
    time_forms,
)
from skipdecode.core.options import DecodeOptions
from skipdecode.core.subset_head import frequency_ranked_vocab
from skipdecode.schedules import FullSchedule, LinearSchedule, build_schedule, linear_for_speedup

LENGTHS = [5, 9, 3, 7]
NEW = 12


def _models():
    return {
        "llama": tiny_llama(6),
        "opt": tiny_opt(6),
        "gemma3_text": tiny_family("gemma3_text", num_layers=6),
    }


@pytest.fixture(scope="module")
def models():
    return _models()


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    scale = max(float(a.abs().max()), 1.0)
    assert float((a - b).abs().max()) <= 1e-4 * scale


@pytest.mark.parametrize(
    "family",
    [
        "llama",
        pytest.param("opt", marks=pytest.mark.slow),
        pytest.param("gemma3_text", marks=pytest.mark.slow),
    ],
)
def test_compiled_greedy_equals_eager_and_transformers(models, family):
    model = models[family]
    ids, mask = left_padded_batch(LENGTHS)
    graphs = counters["stats"]["unique_graphs"]
    compiled = SkipDecoder(model, compile=True)
    eager = SkipDecoder(model)
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=NEW,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    kw = dict(eos_token_id=[], pad_token_id=PAD, return_logits=True)
    ref = eager.generate(ids, FullSchedule(6), NEW, mask, **kw)
    out = compiled.generate(ids, FullSchedule(6), NEW, mask, **kw)
    assert counters["stats"]["unique_graphs"] > graphs  # really compiled
    assert out.stats.compiled and out.stats.compile_seconds > 0
    assert torch.equal(out.sequences, hf)
    assert torch.equal(out.sequences, ref.sequences)
    _close(out.step_logits, ref.step_logits)
    for schedule in (
        LinearSchedule(6, 1, 6, 2, 8),
        linear_for_speedup(6, 2, NEW),
    ):
        ref = eager.generate(ids, schedule, NEW, mask, **kw)
        out = compiled.generate(ids, schedule, NEW, mask, **kw)
        assert torch.equal(out.sequences, ref.sequences)
        assert out.active_layers == ref.active_layers
        _close(out.step_logits, ref.step_logits)


def test_compiled_batch_of_one_equals_eager_and_transformers(models):
    """Batch 1 is where the matrix-vector rewrite of :class:`SmallBatchMatmul` applies."""
    model = models["llama"]
    ids, mask = left_padded_batch([6], seed=4)
    hf = model.generate(
        input_ids=ids, do_sample=False, max_new_tokens=NEW, eos_token_id=None, pad_token_id=PAD
    )
    kw = dict(eos_token_id=[], pad_token_id=PAD, return_logits=True)
    schedule = linear_for_speedup(6, 2, NEW)
    graphs = counters["stats"]["unique_graphs"]
    for plan in (FullSchedule(6), schedule):
        ref = SkipDecoder(model).generate(ids, plan, NEW, mask, **kw)
        out = SkipDecoder(model, compile=True).generate(ids, plan, NEW, mask, **kw)
        assert out.stats.compiled and counters["stats"]["unique_graphs"] > graphs
        assert torch.equal(out.sequences, ref.sequences)
        _close(out.step_logits, ref.step_logits)
    assert torch.equal(
        SkipDecoder(model, compile=True)
        .generate(ids, FullSchedule(6), NEW, mask, eos_token_id=[])
        .sequences,
        hf,
    )


def _linear_graph(rows: int, dtype: torch.dtype = torch.float32, bias: bool = False):
    """``mm(x, permute(W, [1, 0]))`` (``addmm(b, x, permute(W, [1, 0]))`` with a bias) as
    inductor's post-grad graphs write a linear layer; the graph's inputs are ``x, w, b``."""
    aten = torch.ops.aten
    x, w = torch.randn(rows, 16, dtype=dtype), torch.randn(40, 16, dtype=dtype)
    b = torch.randn(40, dtype=dtype)
    graph = torch.fx.Graph()
    xn, wn, bn = graph.placeholder("x"), graph.placeholder("w"), graph.placeholder("b")
    xn.meta["val"], wn.meta["val"], bn.meta["val"] = x, w, b
    wt = graph.call_function(aten.permute.default, (wn, [1, 0]))
    if bias:
        graph.output(graph.call_function(aten.addmm.default, (bn, xn, wt)))
    else:
        graph.output(graph.call_function(aten.mm.default, (xn, wt)))
    return graph, (x, w, b)


class _Clock:
    """A stand-in for the timer: fixed seconds per form, and a log of the shapes timed and of
    the forms offered."""

    def __init__(self, weight_right: float, weight_left: float, reduction: float = 3.0):
        self.seconds = {"weight-right": weight_right, "weight-left": weight_left}
        self.seconds["reduction"] = reduction
        self.timed: list[tuple] = []
        self.offered: list[tuple[str, ...]] = []
        self.compiling: list[bool] = []  # whether each was timed inside a compile

    def __call__(self, weight, rows, forms):
        self.timed.append((weight.device.type, weight.dtype, rows, *weight.shape))
        self.offered.append(tuple(forms))
        self.compiling.append(torch._guards.TracingContext.try_get() is not None)
        return {form: self.seconds[form] for form in forms}


def _mm_nodes(graph):
    return [n for n in graph.nodes if n.target is torch.ops.aten.mm.default]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("faster", ["weight-left", "weight-right"])
def test_small_batch_matmul_writes_the_faster_form_and_keeps_the_product(faster, bias):
    graph, (x, w, b) = _linear_graph(4, bias=bias)
    clock = _Clock(1.0, 2.0) if faster == "weight-right" else _Clock(2.0, 1.0)
    forms = MatmulForms(clock)
    SmallBatchMatmul(forms)(graph)
    assert clock.timed == [("cpu", torch.float32, 4, 40, 16)]
    aten = torch.ops.aten
    (product,) = [n for n in graph.nodes if n.target in (aten.mm.default, aten.addmm.default)]
    kept = faster == "weight-right"  # as written: mm(x, W.T), or addmm(b, x, W.T)
    assert product.target is (aten.addmm.default if kept and bias else aten.mm.default)
    assert product.args[1 if kept and bias else 0].name == ("x" if kept else "w")
    out = torch.fx.GraphModule(torch.nn.Module(), graph)(x, w, b)
    assert out.shape == (4, 40)
    torch.testing.assert_close(out, x @ w.T + (b if bias else 0), rtol=1e-5, atol=1e-5)
    (row,) = forms.table()
    assert row["form"] == faster and (row["rows"], row["out_features"], row["in_features"]) == (
        4,
        40,
        16,
    )
    assert row["weight-right_us"] == clock.seconds["weight-right"] * 1e6


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("reduction_faster", [True, False])
def test_one_float32_row_may_become_a_reduction_when_it_times_faster(reduction_faster, bias):
    graph, (x, w, b) = _linear_graph(1, bias=bias)
    clock = _Clock(2.0, 3.0, reduction=1.0 if reduction_faster else 4.0)
    SmallBatchMatmul(MatmulForms(clock))(graph)
    assert clock.offered == [("weight-right", "weight-left", "reduction")]
    ops = {n.target for n in graph.nodes if n.op == "call_function"}
    assert (torch.ops.aten.sum.dim_IntList in ops) is reduction_faster
    assert bool(_mm_nodes(graph)) is (not reduction_faster and not bias)
    out = torch.fx.GraphModule(torch.nn.Module(), graph)(x, w, b)
    torch.testing.assert_close(out, x @ w.T + (b if bias else 0), rtol=1e-5, atol=1e-5)


def test_matmul_forms_times_each_shape_once_and_refuses_a_wrong_clock():
    clock = _Clock(2.0, 1.0)
    forms = MatmulForms(clock)
    for rows in (3, 3, 5):
        graph, _ = _linear_graph(rows)
        SmallBatchMatmul(forms)(graph)
    assert [t[2] for t in clock.timed] == [3, 5]
    assert [row["rows"] for row in forms.table()] == [3, 5]
    graph, _ = _linear_graph(2)
    with pytest.raises(ValueError, match="weight-left"):
        SmallBatchMatmul(MatmulForms(lambda weight, rows, forms: {"weight-right": 1.0}))(graph)


def test_small_batch_matmul_leaves_many_rows_alone():
    graph, _ = _linear_graph(SMALL_ROWS + 1)
    clock = _Clock(2.0, 1.0)
    SmallBatchMatmul(MatmulForms(clock))(graph)
    (mm,) = _mm_nodes(graph)
    assert mm.args[0].name == "x" and not clock.timed


def test_compiled_path_times_its_products_before_compiling_and_keeps_the_output(models):
    """Each new shape's products are timed before its graph compiles (``prepare``): every
    linear layer's and the head's, at the step's rows; with the other form chosen (a clock
    that favours weight-left) the output stays the eager path's."""
    model = models["llama"]
    ids, mask = left_padded_batch([5, 9], seed=6)
    clock = _Clock(2.0, 1.0)
    decoder = SkipDecoder(model, compile=True)
    decoder.compiled = CompiledLayers(decoder.adapter, forms=MatmulForms(clock))
    kw = dict(eos_token_id=[], pad_token_id=PAD, return_logits=True)
    out = decoder.generate(ids, FullSchedule(6), NEW, mask, **kw)
    ref = SkipDecoder(model).generate(ids, FullSchedule(6), NEW, mask, **kw)
    assert torch.equal(out.sequences, ref.sequences)
    _close(out.step_logits, ref.step_logits)
    linear = {m.weight.shape for m in model.model.layers[0].modules() if isinstance(m, nn.Linear)}
    expected = {(2, *shape) for shape in linear | {model.lm_head.weight.shape}}
    assert {timed[2:] for timed in clock.timed} == expected
    assert len(clock.timed) == len(expected)  # once per shape
    assert not any(clock.compiling)  # before the graphs compiled, not inside the pass
    assert {row["form"] for row in decoder.compiled.forms.table()} == {"weight-left"}


def test_forms_are_timed_on_real_tensors_and_for_a_fake_weights_shape():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # what the pass sees inside a compile
        fake = torch.empty(40, 16)
    real = torch.randn(40, 16)
    assert candidate_forms(real, 1) == ("weight-right", "weight-left", "reduction")
    assert candidate_forms(fake, 1) == ("weight-right", "weight-left")  # no compile inside one
    assert (
        candidate_forms(real, 3) == candidate_forms(real.bfloat16(), 1) == candidate_forms(fake, 1)
    )
    for weight, rows in ((real, 3), (fake, 3), (real, 1)):
        forms = candidate_forms(weight, rows)
        seconds = time_forms(weight, rows, forms)
        assert set(seconds) == set(forms)
        assert all(isinstance(s, float) and math.isfinite(s) and s > 0 for s in seconds.values())
    with pytest.raises(ValueError, match="not allowed"):
        time_forms(real, 3, ["weight-middle"])


def test_small_batch_matmul_leaves_a_product_without_shapes_alone():
    graph, _ = _linear_graph(1)
    next(iter(graph.nodes)).meta.pop("val")  # x's shape unknown
    clock = _Clock(2.0, 1.0)
    SmallBatchMatmul(MatmulForms(clock))(graph)
    assert _mm_nodes(graph) and not clock.timed


def test_small_batch_matmul_times_the_gemm_of_one_bfloat16_row():
    graph, _ = _linear_graph(1, torch.bfloat16)
    clock = _Clock(2.0, 1.0)
    SmallBatchMatmul(MatmulForms(clock))(graph)
    (mm,) = _mm_nodes(graph)
    assert mm.args[0].name == "w" and clock.timed == [("cpu", torch.bfloat16, 1, 40, 16)]
    assert clock.offered == [("weight-right", "weight-left")]  # a reduction for float32 only


def test_compiled_speculative_is_the_full_models_output(models):
    """The lossless mode's draft and verify passes on the compiled path: greedy tokens equal
    the eager full model's, with rows leaving at EOS, rounds that propose fewer than k (the
    verify pass is padded to k + 1) and a draft vocabulary (its own compiled head)."""
    model = models["llama"]
    ids, mask = left_padded_batch([5, 9], seed=5)
    eager = SkipDecoder(model)
    ref = eager.generate(ids, FullSchedule(6), NEW, mask, eos_token_id=[])
    eos = int(ref.generated_ids[0, NEW // 2])  # row 0 stops halfway, row 1 goes on
    vocab = frequency_ranked_vocab(ref.generated_ids.tolist(), 8, always=[eos])
    graphs = counters["stats"]["unique_graphs"]
    compiled = SkipDecoder(model, compile=True)
    kw = dict(eos_token_id=[eos], pad_token_id=PAD)
    full = eager.generate(ids, FullSchedule(6), NEW, mask, **kw)
    draft = {"name": "target", "target_speedup": 2, "expected_length": NEW}
    for extra in ({}, {"threshold": 0.5}, {"draft_vocab": vocab}):
        cfg = {"name": "speculative", "draft": draft, "k": 3}
        sched = build_schedule(
            {**cfg, **{k: v for k, v in extra.items() if k != "draft_vocab"}}, 6, NEW
        )
        if "draft_vocab" in extra:
            sched = sched.with_draft_vocab(extra["draft_vocab"])
        out = compiled.generate(ids, sched, NEW, mask, **kw)
        assert out.stats.compiled, extra
        assert torch.equal(out.generated_ids, full.generated_ids), extra
        assert out.stats.generated_lengths == full.stats.generated_lengths
        counts = out.stats.speculation
        assert counts.drafted > 0
        if "threshold" in extra:  # rounds that proposed fewer than k: padded verify passes
            assert counts.draft_passes < 3 * counts.rounds
    assert counters["stats"]["unique_graphs"] > graphs  # really compiled, not an eager fallback
    assert min(full.stats.generated_lengths) < NEW  # a row left the batch
    assert out.stats.decode_seconds > 0 and compiled.compiled.compile_seconds > 0
    seen = compiled.compiled._seen  # what ran compiled: one- and (k + 1)-position passes of
    assert {key[1][:2] for key in seen if key[0] != "head" and key[0] != "subset_head"} >= {
        (2, 1),
        (2, 4),
        (1, 1),
        (1, 4),
    }  # both batch sizes, and a draft-vocabulary head
    assert any(key[0] == "subset_head" for key in seen)


@pytest.mark.parametrize(
    "family, lossless_compiled",
    [("llama", False), pytest.param("gemma3_text", True, marks=pytest.mark.slow)],
)
def test_one_graph_per_plan_equals_eager_and_the_full_model(
    models, family, lossless_compiled, monkeypatch
):
    """``compile_graph="plan"``: each layer set runs as one compiled graph (Gemma 3's two layer
    kinds in one graph). The full schedule's tokens and logits are the eager path's, and the
    lossless mode with a constant draft gives the full model's tokens, its draft and verify
    passes each one plan call. In the default suite the lossless passes call the plain plan and
    head functions (what the graphs compile, checked by the full part; the evaluation's
    compiled lossless plan graphs are checked through dynamo without inductor by
    ``tests/evaluation/test_evaluate.py``): their new shapes would compile for twice as long as
    the full part's. Inductor's kernels for them are the ``slow`` Gemma 3 case's."""
    model = models[family]
    ids, mask = left_padded_batch([5, 9], seed=6)
    kw = dict(eos_token_id=[], pad_token_id=PAD, return_logits=True)
    eager = SkipDecoder(model).generate(ids, FullSchedule(6), NEW, mask, **kw)
    dec = SkipDecoder(model, compile=True, compile_graph="plan")
    graphs = counters["stats"]["unique_graphs"]
    out = dec.generate(ids, FullSchedule(6), NEW, mask, **kw)
    assert out.stats.compiled and counters["stats"]["unique_graphs"] == graphs + 2  # plan, head
    assert torch.equal(out.sequences, eager.sequences)
    _close(out.step_logits, eager.step_logits)
    spec = build_schedule(
        {"name": "speculative", "draft": {"name": "budgets", "budgets": [3]}, "k": 2}, 6, NEW
    )
    if not lossless_compiled:
        uncompiled(dec, monkeypatch)
    fast = dec.generate(ids, spec, NEW, mask, eos_token_id=[], pad_token_id=PAD)
    assert torch.equal(fast.sequences, eager.sequences)
    assert fast.stats.speculation.drafted > 0
    plans = {key[1] for key in dec.compiled._seen if key[0] == "plan"}
    assert plans == {tuple(range(6)), (0, 4, 5)}  # full (one and k + 1 positions), the draft
    assert not any(
        key[0] in ("layer", "sliding_attention", "full_attention") for key in dec.compiled._seen
    )


def test_compiled_reuses_its_graphs_and_keeps_compiling_out_of_decode_time(models):
    model = models["llama"]
    ids, mask = left_padded_batch(LENGTHS, seed=2)
    dec = SkipDecoder(model, compile=True)
    called = time.perf_counter()
    first = dec.generate(ids, FullSchedule(6), NEW, mask, eos_token_id=[])
    wall = time.perf_counter() - called
    again = dec.generate(ids, linear_for_speedup(6, 2, NEW), NEW, mask, eos_token_id=[])
    assert first.stats.compile_seconds > 0  # a new decoder times its first calls apart
    assert again.stats.compile_seconds == 0.0  # same shapes: nothing compiled or set aside
    s = first.stats  # disjoint parts of the call: compiling counted once, not inside decode too
    assert s.decode_seconds > 0 and s.prefill_seconds + s.decode_seconds + s.compile_seconds <= wall
    assert again.stats.decode_seconds > 0


def test_compiled_stops_rows_at_eos_like_eager(models):
    model = models["llama"]
    ids, mask = left_padded_batch(LENGTHS, seed=3)
    eager = SkipDecoder(model).generate(ids, FullSchedule(6), NEW, mask)
    eos = int(eager.generated_ids[0, 3])  # a token row 0 emits: rows stop there
    kw = dict(eos_token_id=[eos], pad_token_id=PAD)
    ref = SkipDecoder(model).generate(ids, FullSchedule(6), NEW, mask, **kw)
    out = SkipDecoder(model, compile=True).generate(ids, FullSchedule(6), NEW, mask, **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert out.stats.generated_lengths == ref.stats.generated_lengths


def test_compile_settings_are_checked():
    model = tiny_llama(2)
    with pytest.raises(ValueError, match="compile: True needs cache='static'"):
        SkipDecoder(model, cache="dynamic", compile=True)
    with pytest.raises(ValueError, match="compile: 'fast' is not allowed"):
        SkipDecoder(model, compile="fast")
    with pytest.raises(ValueError, match=r"compile_graph: 'model' is not allowed; .*'plan'"):
        SkipDecoder(model, compile=True, compile_graph="model")
    with pytest.raises(ValueError, match=r"give options or \['compile'\], not both"):
        SkipDecoder(model, compile=True, options=DecodeOptions())
    assert [bucketed_capacity(n) for n in (1, 64, 65, 130)] == [64, 64, 128, 192]
