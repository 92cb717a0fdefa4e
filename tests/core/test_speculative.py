"""Lossless speculative decoding: the full model's output token for token (greedy) and in
distribution (sampling), the full model's cache at accepted positions, clear errors."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from tiny_models import EOS, FAMILIES, PAD, left_padded_batch
from transformers import OPTConfig, OPTForCausalLM

from skipdecode.core.acceptance import accept_sampled
from skipdecode.core.engine import SkipDecoder
from skipdecode.core.rounds import JUDGE_ROUNDS, Pace, PaceBook
from skipdecode.schedules import FullSchedule, ScheduleError, SpeculativeSchedule, build_schedule
from skipdecode.schedules.base import (
    StaticSchedule,
    batched_speedup,
    plan_logits,
    plan_loss_sums,
)
from skipdecode.schedules.speculative import THRESHOLDS

L = 8
N = 24
DRAFTS = {
    "target_2x": {"name": "target", "target_speedup": 2, "expected_length": N},
    "target_4x": {"name": "target", "target_speedup": 4, "expected_length": N},
    "early_exit": {"name": "early_exit", "exit_layers": 3},
    "unified": {"name": "unified", "target_speedup": 2},
}


def speculative(draft: str = "target_2x", k: int = 3, **extra) -> SpeculativeSchedule:
    cfg = {"name": "speculative", "draft": DRAFTS[draft], "k": k, **extra}
    return build_schedule(cfg, L, N)  # type: ignore[return-value]


def _eos_mid_generation(decoder: SkipDecoder, ids, mask) -> int:
    """A token the full model's greedy output holds in one row but not at its start, so rows
    stop at EOS at different steps when it is the EOS."""
    ref = decoder.generate(ids, FullSchedule(L), N, mask, stop_at_eos=False, decode_texts=False)
    return int(ref.generated_ids[1, N // 3])


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("draft", sorted(DRAFTS))
def test_greedy_output_is_the_full_models_token_for_token(family, k, draft):
    decoder = SkipDecoder(FAMILIES[family](num_layers=L))
    ids, mask = left_padded_batch([5, 11, 3, 8, 6])
    eos = _eos_mid_generation(decoder, ids, mask)
    for stop in (False, True):
        kwargs = dict(stop_at_eos=stop, eos_token_id=eos, pad_token_id=PAD, decode_texts=False)
        full = decoder.generate(ids, FullSchedule(L), N, mask, **kwargs)
        spec = decoder.generate(ids, speculative(draft, k), N, mask, **kwargs)
        assert torch.equal(spec.generated_ids, full.generated_ids), (stop, spec.stats.speculation)
        assert spec.stats.generated_lengths == full.stats.generated_lengths
    counts = spec.stats.speculation
    assert counts.drafted > 0 and 0 <= counts.accepted <= counts.drafted
    assert counts.verify_passes == counts.rounds and counts.draft_passes >= counts.rounds - 1
    assert min(spec.stats.generated_lengths) < N  # some rows stopped at EOS
    rows = spec.stats.live_rows  # the batch shrinks only to at most half of its rows
    assert all(b == a or 2 * b <= a for a, b in zip(rows, rows[1:], strict=False))


#: bfloat16 keeps 8 significant bits: a near tie is a top-two gap within a few of its units
BF16_TIE = 2.0**-6


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_in_bfloat16_greedy_output_leaves_the_full_models_only_at_a_near_tie(family):
    """What "identical" means in low precision: a verify pass (k + 1 positions) and a plain step
    (one) multiply differently shaped matrices, so their bf16 logits differ by rounding. Each
    row's output is the plain run's up to its first difference, and there the plain run's top
    two logits lie within BF16_TIE of the largest |logit| (a near tie the rounding can flip)."""
    decoder = SkipDecoder(FAMILIES[family](num_layers=L).to(torch.bfloat16))
    ids, mask = left_padded_batch([5, 11, 3, 8, 6])
    kwargs = dict(stop_at_eos=False, pad_token_id=PAD, decode_texts=False)
    full = decoder.generate(ids, FullSchedule(L), N, mask, return_logits=True, **kwargs)
    for k in (1, 3, 5):
        spec = decoder.generate(ids, speculative("target_2x", k), N, mask, **kwargs)
        for row, differs in enumerate(spec.generated_ids != full.generated_ids):
            if not differs.any():
                continue
            step = int(differs.nonzero()[0])
            logits = full.step_logits[row, step].float()
            top = logits.topk(2).values
            gap = float((top[0] - top[1]) / logits.abs().max())
            assert gap <= BF16_TIE, (k, row, step, gap)


def _staggered_eos(generated: torch.Tensor) -> list[int]:
    """EOS ids that stop the rows of a greedy output at as many different steps as they can
    (none before step 2): tokens taken greedily by how far they spread the rows' ends."""
    steps = generated.shape[1]
    first = {}
    for token in set(generated.flatten().tolist()):
        hits = [(row == token).nonzero() for row in generated]
        first[token] = [int(h[0]) if len(h) else steps for h in hits]
    chosen, ends = [], [steps] * len(generated)
    for token, at in sorted(first.items(), key=lambda kv: (-len(set(kv[1])), kv[0])):
        new = [min(a, b) for a, b in zip(ends, at, strict=True)]
        if len(set(new)) > len(set(ends)) and min(new) >= 2:
            chosen, ends = [*chosen, token], new
    return chosen


def test_finished_rows_leave_the_batch_rarely(monkeypatch):
    """A finished row stays (proposing and emitting nothing) until at most half the rows are
    live: a batch of 8 copies its cache at most 3 times, and the output is the full model's."""
    from skipdecode.core.cache import StaticKVCache

    copies = []
    original = StaticKVCache.select_rows

    def counted(self, index):
        copies.append(len(index))
        return original(self, index)

    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    ids, mask = left_padded_batch([5, 11, 3, 8, 6, 9, 4, 7], seed=2)
    ref = decoder.generate(ids, FullSchedule(L), N, mask, stop_at_eos=False, decode_texts=False)
    eos = _staggered_eos(ref.generated_ids)
    kwargs = dict(eos_token_id=eos, pad_token_id=PAD, decode_texts=False)
    full = decoder.generate(ids, FullSchedule(L), N, mask, **kwargs)
    monkeypatch.setattr(StaticKVCache, "select_rows", counted)
    out = decoder.generate(ids, speculative(k=1), N, mask, **kwargs)  # a token or two a round
    assert torch.equal(out.generated_ids, full.generated_ids)
    assert out.stats.generated_lengths == full.stats.generated_lengths
    ends = {n for n in full.stats.generated_lengths if n < N}
    assert len(ends) >= 5  # rows stop one by one: compacting each time would copy 5+ times
    assert 1 <= len(copies) <= 3 and copies == sorted(copies, reverse=True)
    assert out.stats.speculation.row_rounds < len(ids) * out.stats.speculation.rounds


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_adaptive_draft_length_and_both_caches_stay_exact(cache):
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L), cache=cache)
    ids, mask = left_padded_batch([4, 9, 7])
    full = decoder.generate(ids, FullSchedule(L), N, mask, stop_at_eos=False, decode_texts=False)
    for threshold in (None, 0.02, 0.5):
        out = decoder.generate(
            ids, speculative(k=4, threshold=threshold), N, mask, stop_at_eos=False
        )
        assert torch.equal(out.generated_ids, full.generated_ids), threshold
        if threshold == 0.5:  # a random model is never that sure: one proposal per round,
            c = out.stats.speculation  # the token its paid draft pass made, kept for the verify
            assert 0 < c.drafted <= c.row_rounds and c.draft_passes <= c.rounds


def test_cache_after_every_round_holds_the_full_models_keys_and_values():
    model = FAMILIES["llama"](num_layers=L)
    decoder = SkipDecoder(model)
    ids, mask = left_padded_batch([6, 2, 9])
    seen = []

    def snapshot(view) -> None:
        for r, row in enumerate(view.rows.tolist()):
            cols = view.visible[r].nonzero().squeeze(1)
            keys = [view.cache.keys[layer][r][:, cols].clone() for layer in range(L)]
            values = [view.cache.values[layer][r][:, cols].clone() for layer in range(L)]
            seen.append((row, int(view.lengths[r]), keys, values))

    out = decoder.generate(
        ids, speculative("early_exit", k=3), N, mask, stop_at_eos=False, on_round=snapshot
    )
    assert len({row for row, *_ in seen}) == len(ids) and len(seen) > len(ids)
    for row, length, keys, values in seen:
        prompt = ids[row][mask[row].bool()]
        tokens = torch.cat([prompt, out.generated_ids[row, : length - 1]])[None]
        ref = model(tokens, use_cache=True).past_key_values
        for layer in range(L):
            ref_k, ref_v = ref.layers[layer].keys[0], ref.layers[layer].values[0]
            torch.testing.assert_close(keys[layer], ref_k, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(values[layer], ref_v, atol=1e-5, rtol=1e-5)


def _tiny_vocab_model() -> OPTForCausalLM:
    torch.manual_seed(3)
    cfg = OPTConfig(
        vocab_size=6,
        hidden_size=16,
        num_hidden_layers=4,
        ffn_dim=32,
        num_attention_heads=2,
        max_position_embeddings=32,
        word_embed_proj_dim=16,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=5,
        dropout=0.0,
    )
    cfg._attn_implementation = "sdpa"
    model = OPTForCausalLM(cfg).eval()
    with torch.no_grad():  # sharp logits, and upper layers that matter: the draft differs
        model.lm_head.weight.mul_(6.0)
        for layer in model.model.decoder.layers[1:]:
            layer.fc2.weight.mul_(10.0)
    return model


def test_sampling_follows_the_full_models_distribution():
    """Many seeded draws of one prompt: each context's second and third tokens are distributed
    as the full model says (chi-square, fixed seed); the draft's own distribution is rejected
    by the same test, so the test can tell them apart."""
    model = _tiny_vocab_model()
    decoder = SkipDecoder(model)
    rows = 6000
    ids = torch.tensor([[1, 2, 3]]).repeat(rows, 1)
    sched = SpeculativeSchedule(
        build_schedule({"name": "early_exit", "exit_layers": 1}, 4), k=2
    )  # a poor draft: many rejections, so the residual draws are exercised
    out = decoder.generate(
        ids, sched, 3, do_sample=True, seed=7, stop_at_eos=False, decode_texts=False
    )
    gen = out.generated_ids
    assert out.stats.speculation.accepted < out.stats.speculation.drafted
    with torch.no_grad():
        for pos in (1, 2):  # the tokens the speculative rounds produced
            contexts = torch.cat([ids, gen[:, :pos]], 1)
            full_p = model(contexts).logits[:, -1].detach().float().softmax(-1)  # (rows, V)
            draft = SkipDecoder(model).forward(
                contexts, layer_mask=_only_first_layer(contexts.shape)
            )
            draft_p = draft[:, -1].detach().float().softmax(-1)
            observed = torch.bincount(gen[:, pos], minlength=6).double()
            good = chisquare(observed, _expected(full_p, rows)).pvalue
            bad = chisquare(observed, _expected(draft_p, rows)).pvalue
            assert good > 1e-3, (pos, good)
            assert bad < 1e-6, (pos, bad)


def _expected(probs: torch.Tensor, rows: int) -> torch.Tensor:
    counts = probs.double().sum(0)
    return counts * (rows / counts.sum())


def _only_first_layer(shape: tuple[int, int]) -> torch.Tensor:
    mask = torch.ones(shape[0], 4, shape[1], dtype=torch.bool)
    mask[:, 1:, -1] = False  # the last position runs layer 0 only: the draft's view
    return mask


def test_acceptance_rule_emits_p_exactly():
    """The rule's output token, over many independent rows drafting from ``q``, has the
    distribution ``p`` (first position), and ``p`` at the next position after an acceptance."""
    g = torch.Generator().manual_seed(0)
    V, n = 5, 400_000
    p = torch.tensor([[0.5, 0.2, 0.1, 0.1, 0.1], [0.05, 0.05, 0.1, 0.2, 0.6]])
    q = torch.tensor([[0.1, 0.1, 0.2, 0.3, 0.3]])
    drafts = torch.multinomial(q.expand(n, V), 1, replacement=True, generator=g)
    accepted, nxt = accept_sampled(
        drafts, torch.ones(n, dtype=torch.long), p.expand(n, 2, V), q.expand(n, 1, V), g
    )
    first = torch.where(accepted == 1, drafts[:, 0], nxt)
    freq = torch.bincount(first, minlength=V).double() / n
    torch.testing.assert_close(freq, p[0].double(), atol=3e-3, rtol=0)
    expected_accept = torch.minimum(q[0], p[0]).sum()  # sum_x min(p, q)
    assert abs(accepted.double().mean() - expected_accept) < 3e-3
    bonus = torch.bincount(nxt[accepted == 1], minlength=V).double() / int(accepted.sum())
    torch.testing.assert_close(bonus, p[1].double(), atol=5e-3, rtol=0)


def _training_batch() -> dict[str, torch.Tensor]:
    """Two rows of 7 tokens, the first 3 the prompt (no loss), as the training loader gives."""
    ids, mask = left_padded_batch([7, 7])
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": ids.masked_fill(torch.arange(7) < 3, -100),
        "prompt_lengths": torch.tensor([3, 3]),
    }


def test_joint_recipe_trains_the_full_and_the_draft_plan():
    decoder = SkipDecoder(FAMILIES["opt"](num_layers=L))
    batch = _training_batch()
    sched = speculative("target_2x", draft_weight=0.5)
    full_sum, count = plan_loss_sums(decoder, batch, FullSchedule(L))
    draft_sum, _ = plan_loss_sums(decoder, batch, sched.draft)
    total, n = sched.loss_sums(decoder, batch)
    torch.testing.assert_close(total, full_sum + 0.5 * draft_sum)
    assert int(n) == int(count)
    torch.testing.assert_close(speculative(recipe="draft").loss_sums(decoder, batch)[0], draft_sum)
    assert sched.validation_plan().runs_every_layer
    again = build_schedule(sched.describe(), L)
    assert again.describe() == sched.describe()


def test_distilled_draft_learns_the_full_plans_distribution():
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    batch = _training_batch()
    sched = speculative("target_2x", draft_weight=0.5, draft_target="full")
    full_logits = plan_logits(decoder, batch, FullSchedule(L))
    draft_logits = plan_logits(decoder, batch, sched.draft)
    scored = batch["labels"][:, 1:] != -100  # position t predicts label t + 1
    p = full_logits[:, :-1][scored].softmax(-1)
    log_q = draft_logits[:, :-1][scored].log_softmax(-1)
    kl = (p * (p.log() - log_q)).sum()  # KL(full || draft), by hand
    full_sum, count = plan_loss_sums(decoder, batch, FullSchedule(L))
    total, n = sched.loss_sums(decoder, batch)
    torch.testing.assert_close(total, full_sum + 0.5 * kl)
    assert int(n) == int(count) == int(scored.sum()) and kl.item() > 0
    only_draft = speculative("target_2x", recipe="draft", draft_target="full")
    torch.testing.assert_close(only_draft.loss_sums(decoder, batch)[0], kl)
    assert build_schedule(sched.describe(), L).describe() == sched.describe()
    assert "draft_target" not in speculative().describe()  # the default keeps old records
    # the full plan's logits are a target: its gradient comes from its own cross-entropy only
    params = [q for q in decoder.model.parameters() if q.requires_grad]

    def gradient(loss):
        return torch.autograd.grad(loss, params, allow_unused=True)

    fixed = full_logits[:, :-1][scored].detach().softmax(-1)
    by_hand = (fixed * (fixed.log() - log_q)).sum()
    joint = gradient(sched.loss_sums(decoder, batch)[0])
    for got, want in zip(joint, gradient(full_sum + 0.5 * by_hand), strict=True):
        if want is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"draft_target": "teacher"}, r"schedule\.draft_target='teacher' .*labels"),
        ({"recipe": "full", "draft_target": "full"}, r"schedule\.draft_target='full' .*full"),
        ({"k": 0}, r"schedule\.k=0 .*integer >= 1"),
        ({"k": 2.5}, r"schedule\.k=2\.5"),
        ({"threshold": 1.5}, r"schedule\.threshold=1\.5 .*\(0, 1\)"),
        ({"draft": {"name": "full"}}, r"schedule\.draft=.*skips layers"),
        ({"draft": {"name": "adaptive", "target_speedup": 2}}, r"schedule\.draft\.name='adaptive'"),
        ({"draft": {"name": "speculative"}}, r"schedule\.draft\.name='speculative'"),
        ({"draft": None}, r"schedule\.draft=None"),
        ({"recipe": "both"}, r"schedule\.recipe='both' .*joint"),
        ({"auto_off": "yes"}, r"schedule\.auto_off='yes' .*true or false"),
        ({"threshold": "sometimes"}, r"schedule\.threshold='sometimes'.*or calibrate"),
    ],
)
def test_bad_settings_are_refused_clearly(cfg, match):
    full_cfg = {"name": "speculative", "draft": DRAFTS["target_2x"], "k": 2, **cfg}
    with pytest.raises((ScheduleError, ValueError), match=match):
        build_schedule(full_cfg, L, N)


def test_threshold_calibration_keeps_the_best_layer_count_speedup_and_stays_exact():
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    ids, mask = left_padded_batch([4, 9, 7])
    sched = speculative(k=4, threshold="calibrate")
    assert sched.needs_calibration and sched.describe()["threshold"] == "calibrate"
    with pytest.raises(ScheduleError, match="threshold=calibrate is chosen on validation"):
        decoder.generate(ids, sched, N, mask)
    batches = [(ids, mask), left_padded_batch([6, 2], seed=1)]
    tuned, info = sched.calibrate(decoder, batches, N)
    assert not tuned.needs_calibration and tuned.threshold == info["threshold"] in THRESHOLDS
    found = info["speedup_by_threshold"]
    assert set(found) == {str(t) for t in THRESHOLDS}
    assert len(set(found.values())) > 1  # the threshold matters on this model
    assert info["theoretical_speedup"] == max(found.values()) == found[str(tuned.threshold)]
    assert batched_speedup(decoder, tuned, batches, N) == info["theoretical_speedup"]
    full = decoder.generate(ids, FullSchedule(L), N, mask)
    assert torch.equal(decoder.generate(ids, tuned, N, mask).generated_ids, full.generated_ids)
    settled = speculative(k=4, threshold=0.5)
    assert settled.calibrate(decoder, batches, N) == (settled, {})  # nothing to choose


def test_speculative_schedule_is_not_a_step_runner():
    with pytest.raises(TypeError, match="SkipDecoder.generate"):
        speculative().start(2)
    ids, mask = left_padded_batch([3, 4])
    with pytest.raises(ValueError, match="return_logits"):
        SkipDecoder(FAMILIES["opt"](num_layers=L)).generate(
            ids, speculative(), 4, mask, return_logits=True
        )
    assert EOS != PAD


class _RisingDraft(StaticSchedule):
    """A draft plan whose budget rises (2, 3, 4 ... layers): never nested over the sequence."""

    name = "rising"

    def budget(self, step: int) -> int:
        return min(2 + step, self.num_layers - 1)

    def active_layers(self, step: int) -> tuple[int, ...]:
        return tuple(range(self.budget(step)))


@pytest.mark.parametrize("family", ["llama", "opt"])
def test_a_draft_need_only_nest_within_a_round(family):
    """A rising plan would leave gaps in a plain SkipDecode cache; as a draft each pass runs
    the layers every earlier pass of its round ran, and the output stays the full model's."""
    decoder = SkipDecoder(FAMILIES[family](num_layers=L))
    ids, mask = left_padded_batch([5, 11, 3])
    kwargs = dict(stop_at_eos=False, decode_texts=False)
    full = decoder.generate(ids, FullSchedule(L), N, mask, **kwargs)
    spec = decoder.generate(ids, SpeculativeSchedule(_RisingDraft(L), k=4), N, mask, **kwargs)
    assert torch.equal(spec.generated_ids, full.generated_ids)
    rounds, current = [], []  # the draft budgets of each round
    for budget in spec.stats.budgets:
        if budget == L:
            rounds.append(current)
            current = []
        else:
            current.append(budget)
    assert all(len(set(r)) <= 1 for r in rounds)  # the round's first pass bounds the rest
    assert len({r[0] for r in rounds if r}) > 1  # while the plan rises from round to round


def test_rounds_count_acceptance_per_budget_and_time_their_parts():
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    ids, mask = left_padded_batch([6, 2, 9])
    plain = decoder.generate(ids, speculative(k=4), N, mask, stop_at_eos=False)
    timed = decoder.generate(ids, speculative(k=4), N, mask, stop_at_eos=False, profile_rounds=True)
    assert torch.equal(plain.generated_ids, timed.generated_ids)
    c = timed.stats.speculation
    assert sum(n for n, _ in c.by_budget.values()) == c.drafted
    assert sum(a for _, a in c.by_budget.values()) == c.accepted
    assert set(c.by_budget) <= set(timed.stats.budgets) and len(c.by_budget) > 1  # it decays
    parts = {"draft_layers", "draft_head", "verify", "accept", "bookkeeping"}
    assert set(c.phase_seconds) == parts and all(t > 0 for t in c.phase_seconds.values())
    assert sum(c.phase_seconds.values()) <= timed.stats.decode_seconds + 1e-3
    assert plain.stats.speculation.phase_seconds == {}


def test_each_round_starts_after_the_furthest_accepted_position():
    """Columns every row rejected are rewritten by the next round, not left as holes."""
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    ids, mask = left_padded_batch([6, 2, 9])
    ends = []

    def last_column(view) -> None:
        ends.append(bool(view.visible[:, -1].any()))  # the round's last column is someone's

    decoder.generate(
        ids, speculative("target_4x", k=5), N, mask, stop_at_eos=False, on_round=last_column
    )
    assert ends and all(ends)


def test_pace_turns_speculation_off_once_it_is_slower_than_plain_steps():
    slow = Pace()
    slow.record(1.0, 1.0)  # the plain round: one token per row in 1 s
    assert slow.plain_s == 1.0 and not slow.plain
    for _ in range(JUDGE_ROUNDS - 1):
        slow.record(2.0, 1.5)  # 1.5 tokens in 2 s: slower than plain, but not judged yet
        assert not slow.off
    slow.record(2.0, 1.5)
    assert slow.off and slow.plain and slow.rounds == JUDGE_ROUNDS
    slow.record(0.1, 5.0)  # once off, rounds are plain and not counted
    assert slow.rounds == JUDGE_ROUNDS and slow.off
    fast = Pace()
    fast.record(1.0, 1.0)
    for _ in range(2 * JUDGE_ROUNDS):
        fast.record(1.5, 3.0)  # 3 tokens in 1.5 s: twice as fast as plain
    assert fast.pays() and not fast.off


@pytest.mark.parametrize("pays", [True, False])
def test_auto_off_keeps_the_output_and_stops_drafting_when_it_does_not_pay(monkeypatch, pays):
    """The clock's verdict is forced both ways: the output is the full model's either way; a
    batch that does not pay stops drafting after the judged rounds and runs plain rounds."""
    monkeypatch.setattr(Pace, "pays", lambda self: pays)
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    ids, mask = left_padded_batch([6, 2, 9])
    full = decoder.generate(ids, FullSchedule(L), N, mask, stop_at_eos=False)
    out = decoder.generate(ids, speculative(k=3, auto_off=True), N, mask, stop_at_eos=False)
    assert torch.equal(out.generated_ids, full.generated_ids)
    c = out.stats.speculation
    assert c.plain_rounds >= 1 and out.stats.budgets[0] == L  # the first round is plain
    if pays:
        assert c.turned_off == 0 and c.plain_rounds == 1
        assert c.draft_passes >= c.rounds - 1  # every round after the first drafted
    else:
        assert c.turned_off == 1 and c.draft_passes <= 3 * JUDGE_ROUNDS
        assert c.rounds == 1 + JUDGE_ROUNDS + (c.plain_rounds - 1)  # then plain to the end
        after = c.plain_rounds - 1
        assert after > 0 and out.stats.budgets[-after:] == [L] * after  # no draft pass after
    assert speculative(k=3, auto_off=True).describe()["auto_off"] is True
    assert "auto_off" not in speculative(k=3).describe()  # published configs unchanged


def test_a_decoder_remembers_a_batch_size_that_did_not_pay(monkeypatch):
    monkeypatch.setattr(Pace, "pays", lambda self: False)
    decoder = SkipDecoder(FAMILIES["llama"](num_layers=L))
    sched = speculative(k=3, auto_off=True)
    ids, mask = left_padded_batch([6, 2, 9])
    full = decoder.generate(ids, FullSchedule(L), N, mask, stop_at_eos=False)
    first = decoder.generate(ids, sched, N, mask, stop_at_eos=False)
    again = decoder.generate(ids, sched, N, mask, stop_at_eos=False)
    assert first.stats.speculation.turned_off == 1
    c = again.stats.speculation  # plain from the start: no measuring, no judged rounds
    assert c.draft_passes == 0 and c.plain_rounds == c.rounds and c.turned_off == 0
    assert c.started_off == 1 and first.stats.speculation.started_off == 0
    assert torch.equal(again.generated_ids, full.generated_ids)
    two, two_mask = left_padded_batch([5, 7])  # another batch size is judged on its own
    other = decoder.generate(two, sched, N, two_mask, stop_at_eos=False)
    assert other.stats.speculation.turned_off == 1 and other.stats.speculation.draft_passes > 0


def test_pace_book_judges_a_batch_size_again_after_retry_every_calls():
    book, spec = PaceBook(retry_every=2), object()
    judged = book.start(spec, 8)
    assert not judged.off
    judged.off = True  # this call found speculation slower
    book.finish(spec, 8, judged)
    for _ in range(2):
        plain = book.start(spec, 8)
        assert plain.off and plain.plain and plain.judged_before
        book.finish(spec, 8, plain)
    assert not book.start(spec, 8).off  # the third call measures again
    assert not book.start(spec, 4).off and not book.start(object(), 8).off
