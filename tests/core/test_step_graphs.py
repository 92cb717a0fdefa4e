"""Whole-step graphs (``compile_graph="step"``), checked on a CPU where each recorded step is
called on its static buffers: greedy tokens, live rows and budgets equal the eager path's (EOS
off and on, rows finishing); each plan is recorded once and a second call records nothing; a
step writes only its state and the pooled cache and makes no host sync; what a whole step cannot
do runs per-layer graphs with the reason in the stats; the LRU bound holds; replay is refused
after the weights move; and the option is refused off the CUDA-graph path."""

from __future__ import annotations

import pytest
import torch
from device_watch import Syncs, Writes, pool_storages, storages, uncompiled, uncompiled_steps
from tiny_models import left_padded_batch, tiny_llama

from skipdecode.core.engine import SkipDecoder
from skipdecode.core.options import DecodeOptions, DecodeOptionsError
from skipdecode.schedules import FullSchedule, LinearSchedule, linear_for_speedup

NEW = 12
EOS_IDS = [3, 7]


@pytest.fixture(scope="module")
def decoders():
    model = tiny_llama(6)
    return SkipDecoder(model), SkipDecoder(model, compile="reduce-overhead", compile_graph="step")


def _schedules():
    return {
        "full": FullSchedule(6),
        "static 2x": linear_for_speedup(6, target_speedup=2, expected_length=NEW),
        "linear": LinearSchedule(6, 1, 6, 2, 8),
    }


def _plans(schedule, steps=NEW - 1):
    return [tuple(schedule.static().active_layers(g)) for g in range(steps)]


def test_step_graphs_tokens_equal_eager_and_each_plan_is_recorded_once(decoders):
    eager, steps = decoders
    ids, mask = left_padded_batch([5, 9, 3, 7], seed=3)
    graphs = steps.compiled.steps
    for eos in ([], EOS_IDS):
        for name, schedule in _schedules().items():
            ref = eager.generate(ids, schedule, NEW, mask, eos_token_id=eos)
            out = steps.generate(ids, schedule, NEW, mask, eos_token_id=eos)
            assert out.stats.graph == "step" and out.stats.graph_fallback is None, name
            assert torch.equal(out.generated_ids, ref.generated_ids), (name, eos)
            assert out.stats.live_rows == ref.stats.live_rows, (name, eos)
            assert out.active_layers == ref.active_layers, (name, eos)
    finished = eager.generate(ids, FullSchedule(6), NEW, mask, eos_token_id=EOS_IDS)
    assert min(finished.stats.live_rows) < 4  # rows did finish: the stop test was exercised
    expected = {(4, 64, plan, stop) for s in _schedules().values() for plan in _plans(s)
                for stop in (False, True)}  # fmt: skip
    assert set(graphs.graphs) == expected and graphs.recorded == len(expected)
    seconds = steps.compiled.compile_seconds
    for schedule in _schedules().values():  # again: nothing recorded or compiled
        steps.generate(ids, schedule, NEW, mask, eos_token_id=EOS_IDS)
    assert graphs.recorded == len(expected) and steps.compiled.compile_seconds == seconds


def test_step_graphs_a_step_writes_only_its_state_and_the_cache_and_never_syncs(
    decoders, monkeypatch
):
    """The recorded step run eagerly (its compiled parts swapped for the plain functions) under
    watch: every tensor it writes in place is a state buffer or a pooled cache buffer, and
    nothing inside it reads a device value on the host. A fresh plan is recorded under watch
    too, so the recording run is checked as well as the replay."""
    _, steps = decoders
    graphs = steps.compiled.steps
    writes, syncs = Writes(), Syncs(monkeypatch)
    uncompiled(steps, monkeypatch)
    monkeypatch.setattr(graphs, "graphs", type(graphs.graphs)())  # record anew, watched
    step = graphs.step

    def watched(*args, **kwargs):
        with syncs.inside(), writes:
            return step(*args, **kwargs)

    monkeypatch.setattr(graphs, "step", watched)
    ids, mask = left_padded_batch([5, 9, 3, 7], seed=3)
    schedule = linear_for_speedup(6, target_speedup=2, expected_length=NEW)
    out = steps.generate(ids, schedule, NEW, mask, eos_token_id=EOS_IDS)
    assert out.stats.graph == "step" and out.stats.decode_steps == NEW - 1
    pool = pool_storages(steps)
    state = storages(t for s in graphs.states.values() for t in s.written())
    assert writes.mutated and writes.mutated <= pool | state
    assert writes.mutated & pool and writes.mutated & state
    assert syncs.names == []


def test_step_graphs_what_a_whole_step_cannot_do_runs_per_layer_graphs(decoders):
    eager, steps = decoders
    ids, mask = left_padded_batch([5, 9, 3, 7], seed=3)
    schedule = linear_for_speedup(6, target_speedup=2, expected_length=NEW)
    logits = steps.generate(ids, schedule, NEW, mask, eos_token_id=[], return_logits=True)
    assert logits.stats.graph == "layer"
    assert logits.stats.graph_fallback == "per-step logits were asked for"
    ref = eager.generate(ids, schedule, NEW, mask, eos_token_id=[], return_logits=True)
    assert torch.equal(logits.generated_ids, ref.generated_ids)
    torch.testing.assert_close(logits.step_logits, ref.step_logits, rtol=1e-4, atol=1e-4)
    sampled = steps.generate(ids, schedule, NEW, mask, eos_token_id=[], do_sample=True, seed=1)
    assert sampled.stats.graph_fallback == "sampling (whole steps choose greedily)"
    many = steps.generate(ids, schedule, NEW, mask, eos_token_id=list(range(3, 12)))
    assert many.stats.graph_fallback == "9 EOS ids (a whole step tests at most 8)"


def test_step_graphs_bound_falls_back_past_it_and_evicts_the_least_recent(monkeypatch):
    model = tiny_llama(6)
    eager = SkipDecoder(model)
    steps = uncompiled_steps(model, monkeypatch)
    graphs = steps.compiled.steps
    graphs.limit = 4
    ids, mask = left_padded_batch([5, 9, 3, 7], seed=3)
    linear = LinearSchedule(6, 1, 6, 2, 8)
    n = len(set(_plans(linear)))
    assert n > 4
    out = steps.generate(ids, linear, NEW, mask, eos_token_id=[])
    assert out.stats.graph == "layer"
    assert out.stats.graph_fallback == f"{n} distinct plans (the bound is 4)"
    ref = eager.generate(ids, linear, NEW, mask, eos_token_id=[])
    assert torch.equal(out.generated_ids, ref.generated_ids) and graphs.recorded == 0
    two_x = linear_for_speedup(6, target_speedup=2, expected_length=NEW)
    three_x = linear_for_speedup(6, target_speedup=3, expected_length=NEW)
    sequence = (two_x, FullSchedule(6), LinearSchedule(6, 1, 5, 3, 6), three_x, two_x)
    assert len({plan for schedule in sequence for plan in _plans(schedule)}) > 4
    for schedule in sequence:
        out = steps.generate(ids, schedule, NEW, mask, eos_token_id=[])
        ref = eager.generate(ids, schedule, NEW, mask, eos_token_id=[])
        assert out.stats.graph == "step" and torch.equal(out.generated_ids, ref.generated_ids)
        assert len(graphs.graphs) <= 4 and len(set(_plans(schedule))) <= 4
        assert list(graphs.graphs)[-1][2] == _plans(schedule)[-1]  # the latest, most recent
    assert graphs.evicted > 0 and graphs.evicted == graphs.recorded - len(graphs.graphs)


def test_step_graphs_refuse_to_replay_after_the_weights_move(monkeypatch):
    model = tiny_llama(6)
    steps = uncompiled_steps(model, monkeypatch)
    ids, mask = left_padded_batch([5, 9], seed=3)
    steps.generate(ids, FullSchedule(6), 4, mask, eos_token_id=[])
    weight = model.model.layers[2].mlp.up_proj.weight
    weight.data = weight.data.clone()
    with pytest.raises(RuntimeError, match="not at the addresses its whole-step graphs"):
        steps.generate(ids, FullSchedule(6), 4, mask, eos_token_id=[])


def test_step_graphs_only_on_the_cuda_graph_path():
    with pytest.raises(DecodeOptionsError, match=r"compile_graph: 'step' records the whole"):
        DecodeOptions(compile=True, compile_graph="step")
    assert DecodeOptions(compile="reduce-overhead", compile_graph="step").cuda_graphs
