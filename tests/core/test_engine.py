"""Exactness of the skip-aware engine against transformers and against itself (fp32)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import EOS, FAMILIES, PAD, left_padded_batch, tiny_opt
from transformers import BertConfig, BertForMaskedLM

from skipdecode.core.cache import CacheGapError
from skipdecode.core.engine import SkipDecoder
from skipdecode.schedules import FullSchedule, LinearSchedule, StaticSchedule, position_layer_mask

ATOL = 1e-5
LENGTHS = [5, 9, 3, 7]
SCHEDULES = {
    "full": lambda L: FullSchedule(L),
    "linear_w1": lambda L: LinearSchedule(L, 1, L - 1, 2, 6),
    "linear_w2_fast": lambda L: LinearSchedule(L, 2, 4, 3, 2),
    "linear_no_warmup": lambda L: LinearSchedule(L, 0, L, 1, 10),
}


# ---------------------------------------------------------------- (a) full teacher-forced logits
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_full_forward_equals_transformers_logits(family):
    model = FAMILIES[family]()
    ids, mask = left_padded_batch(LENGTHS)
    ref = model(input_ids=ids, attention_mask=mask).logits
    ours = SkipDecoder(model).forward(ids, mask)
    real = mask.bool()
    torch.testing.assert_close(ours[real], ref[real], atol=ATOL, rtol=0)


def test_opt_with_projections_and_post_norm_matches_transformers():
    # opt-350m's shape: word_embed_proj_dim != hidden_size (project_in/out), post-norm layers.
    model = tiny_opt(word_embed_proj_dim=16, do_layer_norm_before=False)
    assert model.model.decoder.project_in is not None
    assert model.model.decoder.final_layer_norm is None
    ids, mask = left_padded_batch(LENGTHS)
    ref = model(input_ids=ids, attention_mask=mask).logits
    ours = SkipDecoder(model).forward(ids, mask)
    torch.testing.assert_close(ours[mask.bool()], ref[mask.bool()], atol=ATOL, rtol=0)
    gen = SkipDecoder(model).generate(ids, FullSchedule(6), 8, mask, eos_token_id=[])
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=8,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    assert torch.equal(gen.sequences, hf)


# ---------------------------------------------------------------- (b) greedy == transformers
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_full_greedy_equals_transformers_generate(family):
    model = FAMILIES[family]()
    ids, mask = left_padded_batch(LENGTHS)
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=16,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    out = SkipDecoder(model).generate(
        ids, FullSchedule(6), 16, mask, eos_token_id=[], pad_token_id=PAD
    )
    assert torch.equal(out.sequences, hf)
    assert out.stats.theoretical_speedup == 1.0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_per_sequence_eos_stop_matches_transformers(family):
    model = FAMILIES[family]()
    ids, mask = left_padded_batch(LENGTHS)
    free = SkipDecoder(model).generate(ids, FullSchedule(6), 12, mask, eos_token_id=[])
    eos = int(free.generated_ids[0, 3])  # a token row 0 produces: makes row 0 stop early
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=12,
        eos_token_id=eos,
        pad_token_id=PAD,
    )
    out = SkipDecoder(model).generate(
        ids, FullSchedule(6), 12, mask, eos_token_id=eos, pad_token_id=PAD
    )
    n = hf.shape[1]
    assert torch.equal(out.sequences[:, :n], hf)
    assert (out.sequences[:, n:] == PAD).all()  # transformers stops when all rows are done
    assert out.stats.generated_lengths[0] <= 4
    row0 = out.generated_ids[0]
    first = int((row0 == eos).nonzero()[0])
    assert (row0[first + 1 :] == PAD).all()
    # a row is live at decode pass g (which feeds token g) until it has produced its EOS
    lengths = out.stats.generated_lengths
    assert out.stats.live_rows == [
        sum(n > g + 1 for n in lengths) for g in range(len(out.stats.live_rows))
    ]
    assert min(lengths) < 12


# ---------------------------------------------------------------- (c) cached decode == masked TF
@pytest.mark.parametrize("cache", ["static", "dynamic"])
@pytest.mark.parametrize("schedule_name", sorted(SCHEDULES))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cached_skip_decode_equals_teacher_forced(family, schedule_name, cache):
    model = FAMILIES[family]()
    schedule = SCHEDULES[schedule_name](6)
    ids, mask = left_padded_batch(LENGTHS)
    dec = SkipDecoder(model, cache=cache)
    N = 14
    out = dec.generate(ids, schedule, N, mask, eos_token_id=[], return_logits=True)
    B, P = ids.shape
    seq_mask = torch.cat([mask, torch.ones(B, N, dtype=mask.dtype)], 1)
    layer_mask = position_layer_mask(schedule, torch.full((B,), P), P + N)
    tf = dec.forward(out.sequences, seq_mask, layer_mask)
    torch.testing.assert_close(out.step_logits, tf[:, P - 1 : P - 1 + N], atol=ATOL, rtol=0)
    assert out.stats.budgets == [schedule.budget(g) for g in range(N - 1)]


def test_static_and_dynamic_cache_give_identical_tokens():
    model = FAMILIES["llama"]()
    ids, mask = left_padded_batch(LENGTHS)
    sched = LinearSchedule(6, 1, 5, 2, 5)
    a = SkipDecoder(model, cache="static").generate(
        ids, sched, 12, mask, eos_token_id=[], return_logits=True
    )
    b = SkipDecoder(model, cache="dynamic").generate(
        ids, sched, 12, mask, eos_token_id=[], return_logits=True
    )
    assert torch.equal(a.sequences, b.sequences)
    torch.testing.assert_close(a.step_logits, b.step_logits, atol=ATOL, rtol=0)


# ---------------------------------------------------------------- (d) skipped layers do no work
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_skipped_layers_do_no_work_and_caches_stop_growing(family):
    model = FAMILIES[family]()
    schedule = LinearSchedule(6, 1, 5, 2, 4)  # budgets 5, 4, 4, 3, 2, 2, ...
    ids, mask = left_padded_batch(LENGTHS)
    B, P = ids.shape
    N = 10
    dec = SkipDecoder(model)
    tokens_seen = [0] * 6
    hooks = [
        layer.register_forward_hook(
            lambda m, a, k, out, i=i: tokens_seen.__setitem__(
                i,
                tokens_seen[i] + k["hidden_states"].shape[1]
                if "hidden_states" in k
                else tokens_seen[i] + a[0].shape[1],
            ),
            with_kwargs=True,
        )
        for i, layer in enumerate(dec.adapter.layers)
    ]
    caches = []
    orig = dec.new_cache
    dec.new_cache = lambda *a: caches.append(orig(*a)) or caches[-1]
    try:
        dec.generate(ids, schedule, N, mask, eos_token_id=[])
    finally:
        for h in hooks:
            h.remove()
    runs = [sum(layer in schedule.active_layers(g) for g in range(N - 1)) for layer in range(6)]
    assert tokens_seen == [P + r for r in runs]  # prefill P positions + one per active decode step
    assert caches[0].lengths == [P + r for r in runs]
    assert runs[0] == runs[5] == N - 1  # warm-up and top layers every step
    assert runs[1] < runs[4]  # lower-middle layers stop first


# ---------------------------------------------------------------- the masked forward itself
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_prefix_sliced_forward_equals_naive_masked_forward(family):
    model = FAMILIES[family]()
    dec = SkipDecoder(model)
    # right-padded training batch: prompt lengths differ per row
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 90, (3, 16), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    mask[2, 9:] = 0
    prompt_lengths = torch.tensor([4, 6, 2])
    for schedule in (LinearSchedule(6, 1, 4, 2, 3), LinearSchedule(6, 0, 3, 1, 1), FullSchedule(6)):
        lm = position_layer_mask(schedule, prompt_lengths, 16)
        fast = dec.forward(ids, mask, lm)
        slow = dec.forward(ids, mask, lm, prefix_slicing=False)
        torch.testing.assert_close(fast[mask.bool()], slow[mask.bool()], atol=ATOL, rtol=0)


def test_masked_forward_gradients_skip_unused_layers():
    model = FAMILIES["opt"]().train()
    dec = SkipDecoder(model)
    ids = torch.randint(3, 90, (2, 10))
    schedule = LinearSchedule(6, 1, 3, 2, 2)  # layers 1, 2, 3 never run on targets; prompt runs all
    lm = position_layer_mask(schedule, torch.tensor([4, 4]), 10)
    lm[:, :, :4] = True
    lm[:, 3, :] = False  # layer 3 is skipped at every position, prompt included
    logits = dec.forward(ids, torch.ones_like(ids), lm)
    logits[:, 4:].sum().backward()
    grads = [p.grad for p in dec.adapter.layers[2].parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)  # prompt path still trains
    for p in dec.adapter.layers[3].parameters():  # a layer no position runs learns nothing
        assert p.grad is None or not p.grad.any()
    for p in dec.adapter.layers[5].parameters():  # the top layer runs on targets: it learns
        assert p.grad is not None


# ---------------------------------------------------------------- sampling and misc behaviour
def test_sampling_is_seeded_and_greedy_is_deterministic():
    model = FAMILIES["llama"]()
    ids, mask = left_padded_batch(LENGTHS)
    dec = SkipDecoder(model)
    s = LinearSchedule(6, 1, 5, 3, 4)
    kw = dict(eos_token_id=[], do_sample=True, temperature=1.5, top_p=0.9)
    a = dec.generate(ids, s, 12, mask, seed=7, **kw).generated_ids
    b = dec.generate(ids, s, 12, mask, seed=7, **kw).generated_ids
    c = dec.generate(ids, s, 12, mask, seed=8, **kw).generated_ids
    assert torch.equal(a, b) and not torch.equal(a, c)
    g1 = dec.generate(ids, s, 12, mask, eos_token_id=[]).generated_ids
    g2 = dec.generate(ids, s, 12, mask, eos_token_id=[]).generated_ids
    assert torch.equal(g1, g2)


def test_zero_new_tokens_and_stats_fields():
    model = FAMILIES["opt"]()
    ids, mask = left_padded_batch(LENGTHS)
    out = SkipDecoder(model).generate(ids, FullSchedule(6), 0, mask)
    assert out.generated_ids.shape == (4, 0) and torch.equal(out.sequences, ids)
    sched = LinearSchedule(6, 1, 4, 2, 3)
    out = SkipDecoder(model).generate(ids, sched, 8, mask, eos_token_id=[])
    d = out.stats.as_dict()
    assert d["decode_steps"] == 7 and d["budgets"] == [4, 3, 3, 2, 2, 2, 2]
    assert d["layers_per_token"] == pytest.approx(18 / 7)  # (4 + 3 + 3 + 2 + 2 + 2 + 2) / 7
    assert d["theoretical_speedup"] == pytest.approx(42 / 18)  # 6 layers / (18 / 7)
    assert d["batch_speedup"] == pytest.approx(42 / 18)  # every row live at every pass
    assert d["prefill_seconds"] > 0 and d["decode_seconds"] > 0


@pytest.mark.parametrize("L,speedup,n", [(6, 2, 9), (12, 3, 17), (8, 4, 6)])
def test_target_rule_predicts_the_engines_speedup(L, speedup, n):
    """One accounting: for a fixed-length generation the target rule's predicted speedup is
    exactly what the engine reports (token 0 from the prefill, n - 1 decode passes)."""
    from skipdecode.schedules import linear_for_speedup

    model = tiny_opt(num_layers=L)
    ids, mask = left_padded_batch(LENGTHS)
    schedule = linear_for_speedup(L, speedup, n)
    out = SkipDecoder(model).generate(ids, schedule, n, mask, eos_token_id=[])
    assert out.stats.decode_steps == n - 1
    assert out.stats.theoretical_speedup == pytest.approx(
        schedule.theoretical_speedup([n]), abs=1e-12
    )
    assert out.stats.batch_speedup == pytest.approx(schedule.theoretical_speedup([n]), abs=1e-12)


def test_text_prompts_with_tokenizer_left_pad(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<s>": 0, "</s>": EOS, **{c: i + 3 for i, c in enumerate("abcdefgh ")}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", bos_token="<s>"
    )
    model = FAMILIES["opt"]()
    dec = SkipDecoder(model, hf_tok)
    out = dec.generate(["abc", "a"], FullSchedule(6), 5, eos_token_id=[])
    assert out.sequences.shape == (2, 3 + 5)
    assert out.prompt_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert len(out.texts) == 2 and all(isinstance(t, str) for t in out.texts)
    assert hf_tok.padding_side == "right"  # restored


# ---------------------------------------------------------------- bad input
class _Increasing(StaticSchedule):
    name = "bad"

    def active_layers(self, step):
        return (0, 5) if step == 0 else (0, 1, 5)


def test_bad_inputs_raise_clear_errors():
    model = FAMILIES["opt"]()
    dec = SkipDecoder(model)
    ids, mask = left_padded_batch(LENGTHS)
    with pytest.raises(ValueError, match="empty batch"):
        dec.generate([], FullSchedule(6), 4)
    with pytest.raises(ValueError, match="non-empty"):
        dec.generate(torch.zeros(0, 3, dtype=torch.long), FullSchedule(6), 4)
    with pytest.raises(ValueError, match="max_new_tokens=-1"):
        dec.generate(ids, FullSchedule(6), -1, mask)
    with pytest.raises(ValueError, match="built for 24 layers but the model has 6"):
        dec.generate(ids, FullSchedule(24), 4, mask)
    with pytest.raises(ValueError, match="runs 128 positions"):
        dec.generate(torch.randint(3, 90, (1, 125)), FullSchedule(6), 4)
    with pytest.raises(ValueError, match="left-padded"):
        dec.generate(ids, FullSchedule(6), 4, mask.flip(-1))
    with pytest.raises(ValueError, match="not monotone"):
        dec.generate(ids, _Increasing(6), 4, mask)
    with pytest.raises(ValueError, match="layer_mask has shape"):
        dec.forward(ids, mask, torch.ones(4, 5, ids.shape[1], dtype=torch.bool))
    bert = BertForMaskedLM(
        BertConfig(num_hidden_layers=2, hidden_size=16, num_attention_heads=2, vocab_size=50)
    )
    with pytest.raises(
        NotImplementedError, match="model_type='bert'.*supported model types: .*gpt2"
    ):
        SkipDecoder(bert)


def test_cache_refuses_gaps():
    from skipdecode.core.cache import StaticKVCache

    cache = StaticKVCache(2, 1, 1, 4, 8, torch.float32, "cpu")
    cache.begin(0)
    cache.update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), 0)
    cache.begin(3)
    cache.update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4), 0)
    with pytest.raises(CacheGapError, match="layer 1 has 0 cached positions"):
        cache.update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4), 1)
    assert cache.lengths == [4, 0]
    cache.reset()
    assert cache.lengths == [0, 0]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_unpadded_batch_runs_maskless_and_stays_exact(family):
    # No padding: SDPA runs without a mask (causal prefill), as transformers does.
    model = FAMILIES[family]()
    ids, mask = left_padded_batch([6, 6, 6])
    hf = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=10,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    dec = SkipDecoder(model)
    assert torch.equal(dec.generate(ids, FullSchedule(6), 10, mask, eos_token_id=[]).sequences, hf)
    schedule = LinearSchedule(6, 1, 5, 2, 4)
    out = dec.generate(ids, schedule, 10, mask, eos_token_id=[], return_logits=True)
    B, P = ids.shape
    lm = position_layer_mask(schedule, torch.full((B,), P), P + 10)
    tf = dec.forward(out.sequences, torch.ones_like(out.sequences), lm)
    torch.testing.assert_close(out.step_logits, tf[:, P - 1 : P + 9], atol=ATOL, rtol=0)
