"""The lossless mode's sync-free round (``compile_graph="step"``), checked on a CPU where each
recorded round is called on its static buffers: tokens equal the full model's (EOS off, and on
with rows leaving and the batch compacting), its counts equal the host-driven round's, a round
writes only its state and the pooled cache and never reads a device value on the host, the host
reads far fewer times than rounds run, and what the round cannot do runs the host-driven one
with the reason in the stats."""

from __future__ import annotations

import pytest
import torch
from device_watch import Syncs, Writes, pool_storages, storages, uncompiled_steps
from tiny_models import PAD, left_padded_batch, tiny_llama

from skipdecode.core import compiled as compiled_module
from skipdecode.core import device_rounds
from skipdecode.core.engine import SkipDecoder
from skipdecode.schedules import FullSchedule, build_schedule

NEW = 12
CONSTANT = {"name": "budgets", "budgets": [3], "warmup_layers": 1}
#: The prompts' lengths of the compiled rounds' tests: one batch shape, compiled once for the
#: module (each new batch size compiles its layer step, head and the round's ends anew).
LENGTHS = [5, 9, 4, 6, 7, 3]


@pytest.fixture(scope="module")
def decoders():
    model = tiny_llama(6)
    return SkipDecoder(model), SkipDecoder(model, compile="reduce-overhead", compile_graph="step")


def _lossless(k: int, draft=CONSTANT, new=NEW, **settings):
    return build_schedule({"name": "speculative", "draft": draft, "k": k, **settings}, 6, new)


def test_device_rounds_equal_the_full_model_and_count_as_the_host_driven_round(
    decoders, monkeypatch
):
    """k = 2 on the compiled rounds; k = 3 with rows stopping, the batch compacting into the
    pool's buckets, on rounds recorded from the plain functions (``uncompiled``: each bucket's
    shapes would compile anew, most of this test's time, and compiled rounds are checked at
    k = 2)."""
    eager, steps = decoders
    plain = uncompiled_steps(eager.model, monkeypatch)
    ids, mask = left_padded_batch(LENGTHS, seed=6)
    ref = eager.generate(ids, FullSchedule(6), NEW, mask, eos_token_id=[])
    eos = int(ref.generated_ids[0, 3])  # rows stop early, the batch compacts
    stops = {"eos_token_id": [eos], "pad_token_id": PAD}
    full_eos = eager.generate(ids, FullSchedule(6), NEW, mask, **stops)
    assert min(full_eos.stats.generated_lengths) < NEW // 2
    # each draft length once, one of them with rows stopping (compiling every pair costs twice)
    for k, full, kw, rounds in ((2, ref, {"eos_token_id": []}, steps), (3, full_eos, stops, plain)):
        host = eager.generate(ids, _lossless(k), NEW, mask, **kw)
        out = rounds.generate(ids, _lossless(k), NEW, mask, **kw)
        assert out.stats.graph == "round" and out.stats.graph_fallback is None
        assert torch.equal(out.generated_ids, full.generated_ids), (k, kw)
        assert out.stats.generated_lengths == full.stats.generated_lengths
        mine, theirs = out.stats.speculation, host.stats.speculation
        for name in ("rounds", "row_rounds", "drafted", "accepted", "by_budget"):
            assert getattr(mine, name) == getattr(theirs, name), (k, kw, name)
    shapes = {batch for batch, _ in plain.pool.shapes}
    assert {6, 4}.issubset(shapes)  # compacted into the pool's buckets


def test_device_rounds_write_only_their_state_and_the_cache_and_never_sync(decoders, monkeypatch):
    """The recorded round run eagerly (its compiled layer step and head swapped for the plain
    functions) under watch, recorded anew so the recording run is watched too."""
    _, steps = decoders
    compiled = steps.compiled
    ids, mask = left_padded_batch(LENGTHS, seed=6)
    steps.generate(ids, _lossless(2), 4, mask, eos_token_id=[])  # the rounds' graphs exist
    monkeypatch.setattr(compiled, "_layer", compiled_module._layer_step)
    monkeypatch.setattr(compiled, "_head", steps.adapter.head)
    graphs = compiled.rounds
    monkeypatch.setattr(graphs, "graphs", type(graphs.graphs)())  # record anew, watched
    writes, syncs = Writes(), Syncs(monkeypatch)
    one_round, rounds = graphs.round, []

    def watched(*args, **kwargs):
        rounds.append(1)
        with syncs.inside(), writes:
            return one_round(*args, **kwargs)

    monkeypatch.setattr(graphs, "round", watched)
    out = steps.generate(ids, _lossless(2), NEW, mask, eos_token_id=[])
    assert out.stats.graph == "round" and rounds
    pool = pool_storages(steps)
    state = storages(t for s in graphs.states.values() for t in s.tensors())
    assert writes.mutated and writes.mutated <= pool | state
    assert writes.mutated & pool and writes.mutated & state
    assert syncs.names == []


def test_device_rounds_read_the_host_far_less_often_than_they_run(decoders, monkeypatch):
    """On rounds recorded from the plain functions (``uncompiled``): rows that finish at
    different rounds compact the batch into buckets down to one row, each of which would
    compile its own layer step and head, and what the host reads does not depend on them."""
    eager, _ = decoders
    steps = uncompiled_steps(eager.model, monkeypatch)
    new = 40
    ids, mask = left_padded_batch(LENGTHS, seed=6)
    steps.generate(ids, _lossless(2), 4, mask, eos_token_id=[])  # the rounds' graphs exist
    reads, rounds = Syncs(monkeypatch), []
    one_round = steps.compiled.rounds.round
    monkeypatch.setattr(
        steps.compiled.rounds, "round", lambda *a, **k: (rounds.append(1), one_round(*a, **k))
    )
    generate = device_rounds.device_generate

    def watched(*args, **kwargs):
        with reads.inside():
            return generate(*args, **kwargs)

    monkeypatch.setattr("skipdecode.core.engine.device_generate", watched)
    out = steps.generate(ids, _lossless(2, new=new), new, mask, eos_token_id=[])
    assert out.stats.graph == "round"
    assert len(rounds) == out.stats.speculation.rounds >= (new - 1) // 3
    # the reads between rounds, and the lengths and counts once at the end
    assert len(reads.names) <= len(rounds) // 2, (reads.names, len(rounds))


@pytest.mark.parametrize(
    "settings, reason",
    [
        ({"threshold": 0.5}, "a confidence threshold (rows would stop drafting)"),
        ({"auto_off": True}, "auto_off (it times rounds on the host)"),
        ({"draft": {"name": "target", "target_speedup": 2, "expected_length": NEW}},
         "a draft plan of 3 layer sets (a constant one is needed)"),
    ],
)  # fmt: skip
def test_device_rounds_what_they_cannot_do_runs_the_host_driven_round(decoders, settings, reason):
    eager, steps = decoders
    ids, mask = left_padded_batch(LENGTHS, seed=6)
    ref = eager.generate(ids, FullSchedule(6), NEW, mask, eos_token_id=[])
    out = steps.generate(ids, _lossless(2, **settings), NEW, mask, eos_token_id=[])
    assert out.stats.graph == "layer" and out.stats.graph_fallback == reason
    assert torch.equal(out.generated_ids, ref.generated_ids)
    watched = steps.generate(ids, _lossless(2), NEW, mask, eos_token_id=[], on_round=print)
    assert watched.stats.graph_fallback.startswith("on_round or profile_rounds")


def test_device_rounds_refuse_moved_weights_and_a_rotary_scaling_they_cannot_record(monkeypatch):
    model = tiny_llama(6)
    steps = uncompiled_steps(model, monkeypatch)
    ids, mask = left_padded_batch([5, 9], seed=6)
    assert steps.generate(ids, _lossless(2), 6, mask, eos_token_id=[]).stats.graph == "round"
    model.config.rope_scaling = {"rope_type": "dynamic", "factor": 2.0}
    out = steps.generate(ids, _lossless(2), 6, mask, eos_token_id=[])
    assert out.stats.graph_fallback == "a rotary scaling that reads the positions on the host"
    model.config.rope_scaling = None
    weight = model.model.layers[1].self_attn.q_proj.weight
    weight.data = weight.data.clone()
    with pytest.raises(RuntimeError, match="not at the addresses its whole-step graphs"):
        steps.generate(ids, _lossless(2), 6, mask, eos_token_id=[])
