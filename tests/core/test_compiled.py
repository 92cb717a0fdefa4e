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

import pytest
import torch
from tiny_models import PAD, left_padded_batch, tiny_family, tiny_llama, tiny_opt
from torch._dynamo.utils import counters

from skipdecode.core.compiled import bucketed_capacity
from skipdecode.core.engine import SkipDecoder
from skipdecode.schedules import FullSchedule, LinearSchedule, linear_for_speedup

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


def test_compiled_reuses_its_graphs_and_keeps_compiling_out_of_decode_time(models):
    model = models["llama"]
    ids, mask = left_padded_batch(LENGTHS, seed=2)
    dec = SkipDecoder(model, compile=True)
    first = dec.generate(ids, FullSchedule(6), NEW, mask, eos_token_id=[])
    again = dec.generate(ids, linear_for_speedup(6, 2, NEW), NEW, mask, eos_token_id=[])
    assert first.stats.compile_seconds > 0  # a new decoder times its first calls apart
    assert again.stats.compile_seconds == 0.0  # same shapes: nothing compiled or set aside
    assert first.stats.decode_seconds >= 0 and again.stats.decode_seconds > 0


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
    with pytest.raises(ValueError, match="compile=True needs cache='static'"):
        SkipDecoder(model, cache="dynamic", compile=True)
    with pytest.raises(ValueError, match="compile mode 'fast' is not allowed"):
        SkipDecoder(model, compile="fast")
    assert [bucketed_capacity(n) for n in (1, 64, 65, 130)] == [64, 64, 128, 192]
