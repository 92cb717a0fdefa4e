"""The CUDA-graph mode, checked on a CPU, where each recorded step is called on its static
buffers instead of replayed (``core.graphs``): ``DecodeOptions(compile="reduce-overhead")`` keeps
its caches in a pool at fixed addresses, records each layer's step once per shape, and a second
decode call compiles and records nothing and writes the same buffers; every tensor a layer step
writes is one of the pool's cache buffers; a step makes no host sync; the graphs compile whole (``fullgraph=True``); a cache not from the pool is
refused; and greedy tokens equal the eager path's for the full model, a static 2x plan, a linear
schedule, one graph per layer set, and the lossless mode (rows leaving at EOS, the batch
compacted)."""

from __future__ import annotations

import logging

import pytest
import torch
from device_watch import Syncs, Writes, uncompiled, without_inductor
from tiny_models import PAD, left_padded_batch, tiny_llama

from skipdecode.core import compiled as compiled_module
from skipdecode.core.cache import StaticKVCache
from skipdecode.core.engine import SkipDecoder
from skipdecode.core.pool import CachePool
from skipdecode.core.speculative import kept_rows
from skipdecode.schedules import FullSchedule, LinearSchedule, build_schedule, linear_for_speedup

NEW = 12


@pytest.fixture(scope="module")
def decoders():
    model = tiny_llama(6)
    return SkipDecoder(model), SkipDecoder(model, compile="reduce-overhead")


def _schedules():
    return {
        "full": FullSchedule(6),
        "static 2x": linear_for_speedup(6, target_speedup=2, expected_length=NEW),
        "linear": LinearSchedule(6, 1, 6, 2, 8),  # warm-up 1, from 6 layers down to 2 over 8
    }


def _addresses(cache) -> list[int]:
    return [t.data_ptr() for t in (*cache.keys, *cache.values)]


def test_capture_off_a_gpu_the_mode_says_so_and_keeps_the_pool(caplog):
    with caplog.at_level(logging.WARNING, logger="skipdecode.core.engine"):
        dec = SkipDecoder(tiny_llama(2), compile="reduce-overhead")
    assert "need a CUDA device; on cpu each recorded step is called on its static" in caplog.text
    assert isinstance(dec.pool, CachePool) and dec.compiled.mode == "default"
    assert dec.compiled.recorder is not None and dec.compiled.recorder.stream is None
    assert SkipDecoder(tiny_llama(2), compile=True).pool is None


def test_capture_greedy_tokens_equal_eager_and_a_second_call_compiles_nothing(decoders):
    eager, graphs = decoders
    ids, mask = left_padded_batch([5, 9, 3, 7], seed=3)
    for name, schedule in _schedules().items():
        ref = eager.generate(ids, schedule, NEW, mask, eos_token_id=[])
        out = graphs.generate(ids, schedule, NEW, mask, eos_token_id=[])
        assert out.stats.compiled and torch.equal(out.generated_ids, ref.generated_ids), name
    compiled, pool = graphs.compiled, graphs.pool
    seconds, seen, captures = compiled.compile_seconds, set(compiled._seen), compiled.captures
    assert captures == 6 + 1  # every layer's step of the one pass shape, and the head
    first = _addresses(pool.cache(*pool.shapes[0]))
    for schedule in _schedules().values():  # every plan again: nothing compiles or records
        graphs.generate(ids, schedule, NEW, mask, eos_token_id=[])
    assert compiled.compile_seconds == seconds and compiled._seen == seen
    assert compiled.captures == captures
    assert len(pool.shapes) == 1 and _addresses(pool.cache(*pool.shapes[0])) == first
    cache = pool.cache(*pool.shapes[0])
    assert all(t._dynamo_static_input_type for t in (*cache.keys, *cache.values))
    assert all(not bool(t.any()) for t in cache.keys)  # taken again: zeroed in place


def test_capture_one_graph_per_layer_set_equals_eager_and_a_foreign_cache_is_refused(
    monkeypatch,
):
    """Compiled without inductor (``without_inductor``): what is recorded and replayed is the
    subject here; inductor's plan graphs are checked in ``test_compiled.py``."""
    without_inductor(monkeypatch)
    model = tiny_llama(6)
    eager = SkipDecoder(model)
    plans = SkipDecoder(model, compile="reduce-overhead", compile_graph="plan")
    ids, mask = left_padded_batch([5, 9, 3], seed=4)
    schedule = linear_for_speedup(6, target_speedup=2, expected_length=NEW)
    ref = eager.generate(ids, schedule, NEW, mask, eos_token_id=[])
    out = plans.generate(ids, schedule, NEW, mask, eos_token_id=[])
    assert torch.equal(out.generated_ids, ref.generated_ids)
    sets = {layers for layers in out.active_layers}
    assert plans.compiled.captures == len(sets) + 1  # one recording per layer set, one head
    pooled = plans.new_cache(3, plans.pool.shapes[0][1])
    foreign = StaticKVCache(6, 3, *plans.adapter.kv_shape, pooled.capacity, torch.float32, "cpu")
    plans.new_cache = lambda batch, capacity: foreign
    with pytest.raises(RuntimeError, match="not the ones its CUDA graph was recorded with"):
        plans.generate(ids, schedule, NEW, mask, eos_token_id=[])


def test_capture_the_lossless_mode_equals_the_full_model_through_compaction(decoders, monkeypatch):
    """Six rows stop at different rounds: the batch compacts into the pool's power-of-two
    buckets (three live rows keep a fourth, finished one) and every token equals the full
    model's. The steps are recorded from the plain functions (``uncompiled``: each bucket's
    shapes would compile anew; the compiled steps are checked above)."""
    eager = decoders[0]
    graphs = uncompiled(SkipDecoder(eager.model, compile="reduce-overhead"), monkeypatch)
    ids, mask = left_padded_batch([5, 9, 4, 6, 7, 3], seed=6)
    ref = eager.generate(ids, FullSchedule(6), NEW, mask, eos_token_id=[])
    eos = int(ref.generated_ids[0, 3])  # rows stop early, the batch compacts
    kw = dict(eos_token_id=[eos], pad_token_id=PAD)
    full = eager.generate(ids, FullSchedule(6), NEW, mask, **kw)
    draft = {"name": "target", "target_speedup": 2, "expected_length": NEW}
    sched = build_schedule({"name": "speculative", "draft": draft, "k": 3}, 6, NEW)
    rounds = []
    out = graphs.generate(
        ids, sched, NEW, mask, on_round=lambda v: rounds.append(len(v.rows)), **kw
    )
    assert torch.equal(out.generated_ids, full.generated_ids)
    assert out.stats.generated_lengths == full.stats.generated_lengths
    assert 4 in rounds and set(rounds) <= {6, 4, 2, 1}, rounds  # copied into pooled buckets
    batches = {batch for batch, _ in graphs.pool.shapes}
    assert {6, 4}.issubset(batches)


def test_capture_a_compaction_keeps_a_power_of_two_bucket_in_row_order():
    """On the compiled path a compaction keeps the live rows and finished ones to fill the next
    power of two, in order; the eager path keeps the live rows alone."""
    live = torch.tensor([0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0], dtype=torch.bool)
    assert kept_rows(live, bucketed=False).tolist() == [1, 3, 4]
    assert kept_rows(live, bucketed=True).tolist() == [0, 1, 3, 4]
    one = torch.tensor([0, 0, 1, 0], dtype=torch.bool)
    assert kept_rows(one, bucketed=True).tolist() == [2]
    five = torch.tensor([1] * 5 + [0] * 11, dtype=torch.bool)
    assert kept_rows(five, bucketed=True).tolist() == list(range(8))


def test_capture_a_step_mutates_only_static_cache_buffers_and_never_syncs(decoders, monkeypatch):
    """Run the decode passes' layer step eagerly (what the graph records) and watch it: every
    tensor it writes is a pooled buffer marked static, and no ``item``/``bool``/``int``/``tolist``/
    ``nonzero`` reads a device value inside a step (the loop's own EOS check is outside)."""
    _, graphs = decoders
    ids, mask = left_padded_batch([5, 9, 3, 7], seed=3)
    recorder, syncs = Writes(), Syncs(monkeypatch)
    eager_step = compiled_module._layer_step

    def watched(*args):
        with recorder:
            return eager_step(*args)

    monkeypatch.setattr(graphs.compiled, "_layer", watched)
    monkeypatch.setattr(graphs.compiled, "_head", graphs.adapter.head)
    monkeypatch.setattr(graphs.compiled, "_seen", set())  # every layer through the watched step
    schedule = linear_for_speedup(6, target_speedup=2, expected_length=NEW)
    start = schedule.start

    def start_watched(batch):
        runner = start(batch)
        decode = runner.decode

        def one_step(step):
            with syncs.inside():
                return decode(step)

        runner.decode = one_step
        return runner

    monkeypatch.setattr(schedule, "start", start_watched)
    out = graphs.generate(ids, schedule, NEW, mask, eos_token_id=[])
    assert out.stats.decode_steps == NEW - 1
    static = {
        t.untyped_storage().data_ptr()
        for shape in graphs.pool.shapes
        for bufs in graphs.pool.buffers(*shape)
        for t in bufs
    }
    assert recorder.mutated and recorder.mutated <= static
    assert syncs.names == []


def test_capture_every_graph_compiles_whole(monkeypatch):
    """The compiled step, plan and head are built with ``fullgraph=True``: both graph kinds
    decode, and a step with a graph break is refused instead of split into pieces (and its CUDA
    graph into none). Dynamo's property: compiled without inductor (``without_inductor``)."""
    without_inductor(monkeypatch)
    ids, mask = left_padded_batch([5, 3], seed=1)
    for graph in ("layer", "plan"):
        dec = SkipDecoder(tiny_llama(2), compile=True, compile_graph=graph)
        out = dec.generate(ids, FullSchedule(2), 4, mask, eos_token_id=[])
        assert out.stats.compiled and dec.compiled.fullgraph

    def broken(x):
        torch._dynamo.graph_break()
        return x + 1

    with pytest.raises(Exception, match="graph_break|Unsupported|graph break"):
        dec.compiled.compile_fn(broken)(torch.ones(2))


def test_capture_a_pass_unlike_its_recording_is_refused():
    """A recorded pass reads fixed shapes: an input of another shape or dtype, another count of
    tensors, or other non-tensor arguments are refused instead of broadcast into the buffers."""
    from skipdecode.core.graphs import StaticPass

    hidden, position, mask = (
        torch.zeros(2, 1, 4),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(2, 1, 1, 8),
    )
    kwargs = {"position_ids": torch.zeros(2, 1, dtype=torch.long), "window": 4}
    static = StaticPass(hidden, kwargs, position, mask)
    static.load(hidden + 1, kwargs, position, mask)
    assert torch.equal(static.hidden, hidden + 1)
    with pytest.raises(ValueError, match=r"shape \(1, 1\)"):
        static.load(
            hidden, {**kwargs, "position_ids": torch.zeros(1, 1, dtype=torch.long)}, position, mask
        )
    with pytest.raises(ValueError, match="not those its graphs were recorded with"):
        static.load(hidden, {**kwargs, "window": 8}, position, mask)
    with pytest.raises(ValueError, match="not those its graphs were recorded with"):
        static.load(hidden, {"position_ids": kwargs["position_ids"]}, position, mask)
