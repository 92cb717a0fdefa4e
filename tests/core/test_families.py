"""Every supported decoder family, exact: tiny random configs of each (fp32).

For each family: the full schedule's teacher-forced logits equal the model's own (padded and
unpadded) and greedy tokens equal ``generate``; cached skip decoding equals the masked
teacher-forced forward; CALM's ``fill_kv`` writes exactly the keys/values the layer writes;
sliding-window models are exact within the window and refuse longer sequences; mixture-of-experts
layers that are skipped do no work; one Lightning training step runs and the export reloads with
identical logits. The table of families in docs/FAMILIES.md is generated from the registry.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from tiny_models import ARCHS, PAD, VOCAB, left_padded_batch, tiny_family

from skipdecode.core.adapters import UnsupportedModelError, get_adapter
from skipdecode.core.cache import DynamicKVCache
from skipdecode.core.engine import SkipDecoder
from skipdecode.core.families import FAMILIES, families_table
from skipdecode.schedules import FullSchedule, LinearSchedule, position_layer_mask

L = 4
LENGTHS = [5, 9, 3, 7]
ATOL = 1e-5
ALL = sorted(ARCHS)
FAMILIES_DOC = Path(__file__).resolve().parents[2] / "docs" / "FAMILIES.md"


def test_every_registered_family_has_a_tiny_config():
    assert set(ARCHS) == set(FAMILIES)


@pytest.mark.parametrize("model_type", ALL)
def test_full_forward_and_greedy_equal_transformers(model_type):
    model = tiny_family(model_type, L)
    dec = SkipDecoder(model)
    ids, mask = left_padded_batch(LENGTHS)
    # positions count real tokens only, as generate() gives them (absolute-position families
    # such as GPT-2 would otherwise see the padding shift their positions)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits
        ours = dec.forward(ids, mask)
        real = mask.bool()
        torch.testing.assert_close(ours[real], ref[real], atol=ATOL, rtol=0)
        flat = ids[:, -3:]  # no padding
        torch.testing.assert_close(
            dec.forward(flat), model(input_ids=flat).logits, atol=ATOL, rtol=0
        )
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=10,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    out = dec.generate(ids, FullSchedule(L), 10, mask, eos_token_id=[], pad_token_id=PAD)
    assert torch.equal(out.sequences, hf)


@pytest.mark.parametrize("model_type", ALL)
def test_cached_skip_decode_equals_teacher_forced(model_type):
    model = tiny_family(model_type, L)
    dec = SkipDecoder(model)
    ids, mask = left_padded_batch(LENGTHS)
    schedule = LinearSchedule(L, 1, L, 2, 6)
    N = 10
    out = dec.generate(ids, schedule, N, mask, eos_token_id=[], return_logits=True)
    B, P = ids.shape
    seq_mask = torch.cat([mask, torch.ones(B, N, dtype=mask.dtype)], 1)
    layer_mask = position_layer_mask(schedule, torch.full((B,), P), P + N)
    with torch.no_grad():
        tf = dec.forward(out.sequences, seq_mask, layer_mask)
    torch.testing.assert_close(out.step_logits, tf[:, P - 1 : P - 1 + N], atol=ATOL, rtol=0)
    assert out.stats.budgets == [schedule.budget(g) for g in range(N - 1)]


@pytest.mark.parametrize("model_type", ALL)
def test_fill_kv_writes_what_the_layer_writes(model_type):
    model = tiny_family(model_type, L)
    adapter = get_adapter(model)
    ids = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(5)[None].expand(2, -1)
    with torch.no_grad():
        hidden = adapter.embed(ids, pos)
        kwargs = adapter.layer_kwargs(hidden, pos)
        for layer_idx in range(L):
            ran, filled = DynamicKVCache(L), DynamicKVCache(L)
            adapter.run_layer(layer_idx, hidden, None, kwargs, ran)
            adapter.fill_kv(layer_idx, hidden, kwargs, filled)
            torch.testing.assert_close(filled.keys[layer_idx], ran.keys[layer_idx], atol=0, rtol=0)
            torch.testing.assert_close(
                filled.values[layer_idx], ran.values[layer_idx], atol=0, rtol=0
            )
            kv_heads, head_dim = adapter.kv_shape
            assert ran.keys[layer_idx].shape == (2, kv_heads, 5, head_dim)


@pytest.mark.parametrize("model_type", ["mistral", "gemma2", "gemma3_text"])
def test_sliding_window_exact_within_and_refused_beyond(model_type):
    model = tiny_family(model_type, L)
    dec = SkipDecoder(model)
    window = model.config.sliding_window
    assert dec.adapter.max_positions == window
    ids, mask = left_padded_batch([6, 9])
    out = dec.generate(ids, FullSchedule(L), window - ids.shape[1], mask, eos_token_id=[])
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=window - ids.shape[1],
        eos_token_id=None,
        pad_token_id=PAD,
    )
    assert torch.equal(out.sequences, hf)
    with pytest.raises(ValueError, match=f"runs {window} positions"):
        dec.generate(ids, FullSchedule(L), window, mask)


@pytest.mark.parametrize("model_type", ["mixtral", "qwen3_moe"])
def test_skipped_moe_layers_do_no_work(model_type):
    model = tiny_family(model_type, L)
    dec = SkipDecoder(model)
    calls = [0] * L
    hooks = [
        layer.mlp.register_forward_hook(lambda m, a, o, i=i: calls.__setitem__(i, calls[i] + 1))
        for i, layer in enumerate(dec.adapter.layers)
    ]
    try:
        ids, mask = left_padded_batch(LENGTHS)
        schedule = LinearSchedule(L, 1, 2, 2, 1)  # layers 0 and 3 after the prompt
        dec.generate(ids, schedule, 6, mask, eos_token_id=[])
    finally:
        for h in hooks:
            h.remove()
    # the prefill runs every layer once; then 5 decode passes run layers 0 and 3 only
    assert calls == [6, 1, 1, 6]


def test_unknown_family_with_the_common_shape_runs_and_one_that_differs_is_refused():
    llama = tiny_family("llama", L)
    llama.config.model_type = "my_llama_variant"  # not registered, same shape
    assert type(get_adapter(llama)).__name__ == "GenericAdapter"
    granite = tiny_family("granite", L)
    granite.config.model_type = "granite_clone"  # its multipliers are not in the common shape
    with pytest.raises(UnsupportedModelError, match="granite_clone.*does not reproduce"):
        get_adapter(granite)


def test_readme_lists_the_registered_families():
    text = FAMILIES_DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- families:start -->\n(.*?)<!-- families:end -->", text, re.S)
    assert block, "docs/FAMILIES.md has no families table between its markers"
    assert block.group(1) == families_table()
