"""Every layer-skipping method: properties, errors, and cached decode == teacher-forced forward."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import FAMILIES, left_padded_batch

from skipdecode.core.engine import SkipDecoder
from skipdecode.core.loss import IGNORE_INDEX, next_token_targets, token_loss_sums
from skipdecode.schedules import (
    AdaptiveSchedule,
    CALMSchedule,
    ScheduleError,
    build_schedule,
    position_layer_mask,
)
from skipdecode.schedules.adaptive import random_monotone_budgets
from skipdecode.schedules.baselines import (
    EarlyExitSchedule,
    PowerLawSchedule,
    UnifiedSkipSchedule,
    power_law_for_speedup,
)
from skipdecode.schedules.layout import BudgetSchedule

ATOL = 1e-5
LENGTHS = [5, 9, 3, 7]
L = 6


def _teacher_forced(dec, out, mask, layer_mask):
    B, P = mask.shape
    N = out.generated_ids.shape[1]
    seq_mask = torch.cat([mask, torch.ones(B, N, dtype=mask.dtype)], 1)
    return dec.forward(out.sequences, seq_mask, layer_mask)[:, P - 1 : P - 1 + N]


# ------------------------------------------------------------------ static baselines
@pytest.mark.parametrize(
    "schedule",
    [
        EarlyExitSchedule(L, 3),
        UnifiedSkipSchedule(L, 3),
        PowerLawSchedule(L, 1, 6, 2, 0.7),
        BudgetSchedule(L, 1, [6, 5, 5, 3, 2]),
    ],
    ids=lambda s: s.name,
)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_static_methods_cached_decode_equals_teacher_forced(family, schedule):
    dec = SkipDecoder(FAMILIES[family]())
    ids, mask = left_padded_batch(LENGTHS)
    out = dec.generate(ids, schedule, 10, mask, eos_token_id=[], return_logits=True)
    lm = position_layer_mask(schedule, torch.full((4,), ids.shape[1]), ids.shape[1] + 10)
    torch.testing.assert_close(
        out.step_logits, _teacher_forced(dec, out, mask, lm), atol=ATOL, rtol=0
    )
    assert out.stats.budgets == [schedule.budget(g) for g in range(9)]


def test_static_layouts():
    assert EarlyExitSchedule(24, 8).active_layers(5) == tuple(range(8))
    assert UnifiedSkipSchedule(24, 6).active_layers(0) == (0, 5, 9, 14, 18, 23)
    assert UnifiedSkipSchedule(24, 12).theoretical_speedup([10]) == 2.0
    p = PowerLawSchedule(24, 1, 24, 2, 0.5)
    assert [p.budget(g) for g in (0, 3, 15, 1000)] == [24, 12, 6, 2]
    assert set(p.active_layers(15)) == {0, 19, 20, 21, 22, 23}


@pytest.mark.parametrize("speedup", [2, 3, 4])
def test_power_law_fits_target_speedup(speedup):
    s = power_law_for_speedup(24, speedup, 32)
    assert abs(s.mean_layers([32]) - 24 / speedup) <= 0.5
    assert s.budget(0) == 24


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 200), st.integers(2, 24), st.integers(0, 2**31 - 1))
def test_random_monotone_budgets_never_increase(length, top, seed):
    floor = max(2, top // 4)
    b = random_monotone_budgets(
        length, top, floor, (top + floor) / 2, torch.Generator().manual_seed(seed)
    )
    assert len(b) == length
    assert all(x >= y for x, y in zip(b, b[1:]))
    assert all(floor <= x <= top for x in b)
    BudgetSchedule(24, 1, b)  # a valid schedule


# ------------------------------------------------------------------ adaptive monotone SkipDecode
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_adaptive_budgets_never_increase_and_decode_equals_teacher_forced(family):
    dec = SkipDecoder(FAMILIES[family]())
    ids, mask = left_padded_batch(LENGTHS)
    # random tiny models are unconfident (top-1 ~ 1/V), so scale the mapping to see it move
    policy = AdaptiveSchedule(L, 1, 6, 2)
    # random tiny models are unconfident (top-1 ~ 1/V): map their own confidence range onto budgets
    conf = _decode_confidences(dec, ids, mask)
    lo, hi = float(conf.quantile(0.05)), float(conf.quantile(0.95))
    policy.budget_for_confidence = lambda c: max(2, min(6, round(6 - 4 * (c - lo) / (hi - lo))))
    out = dec.generate(ids, policy, 12, mask, eos_token_id=[], return_logits=True)
    budgets = out.stats.budgets
    assert all(a >= b for a, b in zip(budgets, budgets[1:]))
    assert budgets[0] == 6 and budgets[-1] < 6, budgets
    replay = BudgetSchedule(L, 1, budgets)
    lm = position_layer_mask(replay, torch.full((4,), ids.shape[1]), ids.shape[1] + 12)
    torch.testing.assert_close(
        out.step_logits, _teacher_forced(dec, out, mask, lm), atol=ATOL, rtol=0
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_adaptive_shipped_mapping_calibrates_to_its_target_and_stays_exact(family):
    dec = SkipDecoder(FAMILIES[family]())
    ids, mask = left_padded_batch(LENGTHS)
    schedule = build_schedule({"name": "adaptive", "target_speedup": 2}, L, expected_length=12)
    assert schedule.needs_calibration and schedule.sharpness is None
    with pytest.raises(ValueError, match="calibrate it first"):
        dec.generate(ids, schedule, 12, mask)
    tuned, info = schedule.calibrate(dec, [(ids, mask)], 12, iterations=10)
    assert not tuned.needs_calibration and info["sharpness"] == tuned.sharpness
    # the shipped mapping at its default sharpness (1) barely skips on an unconfident model;
    # calibration moves the achieved speedup to the target
    default = dec.generate(ids, schedule.with_sharpness(1.0), 12, mask, eos_token_id=[])
    out = dec.generate(ids, tuned, 12, mask, eos_token_id=[], return_logits=True)
    assert out.stats.theoretical_speedup == pytest.approx(info["theoretical_speedup"])
    assert abs(info["theoretical_speedup"] - 2) < abs(default.stats.theoretical_speedup - 2)
    assert abs(info["theoretical_speedup"] - 2) < 0.35, info
    budgets = out.stats.budgets
    assert all(a >= b for a, b in zip(budgets, budgets[1:]))
    replay = BudgetSchedule(L, 1, budgets)
    lm = position_layer_mask(replay, torch.full((4,), ids.shape[1]), ids.shape[1] + 12)
    torch.testing.assert_close(
        out.step_logits, _teacher_forced(dec, out, mask, lm), atol=ATOL, rtol=0
    )
    # training draws budget sequences as long as the expected generation length
    assert (
        schedule.training_plan(torch.Generator().manual_seed(0)).describe()["budgets"].__len__()
        == 12
    )


def test_adaptive_mapping_and_training_schedules():
    p = AdaptiveSchedule(24, 1, 18, 4, target_mean=12)
    assert p.budget_for_confidence(1.0) == 4 and p.budget_for_confidence(0.0) == 18
    assert p.budget_for_confidence(0.5) == 11
    g = torch.Generator().manual_seed(0)
    draws = [p.training_plan(g) for _ in range(20)]
    assert len({tuple(d.budgets(range(40)).tolist()) for d in draws}) > 10  # varied
    for d in draws:
        b = d.budgets(range(256)).tolist()
        assert all(x >= y for x, y in zip(b, b[1:])) and 4 <= min(b) and max(b) <= 18


# ------------------------------------------------------------------ CALM
def _decode_confidences(dec, ids, mask, n=12):
    """Top-1 probabilities every layer's exit gives at the decode positions of a full run."""
    full = dec.generate(ids, build_schedule({"name": "full"}, L), n, mask, eos_token_id=[])
    seq_mask = torch.cat([mask, torch.ones(mask.shape[0], n, dtype=mask.dtype)], 1)
    with torch.no_grad():
        exits = dec.forward_exits(full.sequences, seq_mask, list(range(L)))
    P = ids.shape[1]
    return torch.stack([v[:, P:].softmax(-1).amax(-1) for v in exits.values()]).flatten()


def _varied_calm_run(dec, ids, mask):
    conf = _decode_confidences(dec, ids, mask)
    for q in (0.5, 0.3, 0.7, 0.2, 0.8, 0.1, 0.9):
        policy = CALMSchedule(L, float(conf.quantile(q)), check_every=1, allow_batching=True)
        out = dec.generate(ids, policy, 12, mask, eos_token_id=[], return_logits=True)
        depths = torch.tensor(out.stats.token_layers)
        if len(set(depths.flatten().tolist())) > 2:
            return out, depths
    raise AssertionError("no threshold gave varied exits")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_calm_decode_equals_teacher_forced_with_state_copying(family):
    dec = SkipDecoder(FAMILIES[family]())
    ids, mask = left_padded_batch(LENGTHS)
    out, depths = _varied_calm_run(dec, ids, mask)  # (steps, B) depth of each token
    assert depths.min() < L
    # the batch runs until its deepest token exits
    assert out.stats.budgets == depths.amax(1).tolist()
    assert out.stats.batch_speedup <= out.stats.theoretical_speedup
    B, P = ids.shape
    lm = torch.ones(B, L, P + 12, dtype=torch.bool)
    for g in range(depths.shape[0]):
        for b in range(B):
            lm[b, int(depths[g, b]) :, P + g] = False
    torch.testing.assert_close(
        out.step_logits, _teacher_forced(dec, out, mask, lm), atol=ATOL, rtol=0
    )


def test_calm_threshold_one_runs_every_layer_like_full():
    dec = SkipDecoder(FAMILIES["llama"]())
    ids, mask = left_padded_batch([4])
    full = dec.generate(ids, build_schedule({"name": "full"}, L), 8, mask, eos_token_id=[])
    calm = dec.generate(ids, CALMSchedule(L, 1.0), 8, mask, eos_token_id=[])
    assert torch.equal(full.sequences, calm.sequences)
    assert calm.stats.theoretical_speedup == 1.0


def test_calm_loss_weights_and_exit_logits():
    p = CALMSchedule(12, 0.9, check_every=4)
    assert p.exit_checks() == [3, 7]
    w = p.intermediate_loss_weights()
    assert (
        list(w) == [3, 7, 11]
        and w[11] == pytest.approx(12 / 24)
        and sum(w.values()) == pytest.approx(1)
    )
    dec = SkipDecoder(FAMILIES["opt"]())
    ids, mask = left_padded_batch(LENGTHS)
    exits = dec.forward_exits(ids, mask, [2, 5])
    torch.testing.assert_close(
        exits[5][mask.bool()], dec.forward(ids, mask)[mask.bool()], atol=ATOL, rtol=0
    )


def test_calm_training_loss_reads_out_only_scored_positions_and_equals_full_readout():
    """CALM's loss heads only the positions that predict a target token; the sum and its
    gradients equal the weighted cross-entropies of full ``(B, T, V)`` readouts."""
    dec = SkipDecoder(FAMILIES["llama"]())
    ids, mask = left_padded_batch(LENGTHS)
    labels = ids.clone()
    labels[:, : ids.shape[1] - 3] = IGNORE_INDEX  # the last three tokens are targets
    labels[mask == 0] = IGNORE_INDEX
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    calm = CALMSchedule(L, 0.9, check_every=2)
    weights = calm.intermediate_loss_weights()

    loss, count = calm.loss_sums(dec, batch)
    grads = torch.autograd.grad(loss, list(dec.model.parameters()), allow_unused=True)
    exits = dec.forward_exits(ids, mask, list(weights))
    reference = sum(w * token_loss_sums(exits[i], labels)[0] for i, w in weights.items())
    reference_grads = torch.autograd.grad(
        reference, list(dec.model.parameters()), allow_unused=True
    )

    assert int(count) == int(token_loss_sums(exits[L - 1], labels)[1]) == 3 * len(LENGTHS)
    torch.testing.assert_close(loss, reference, atol=1e-5, rtol=1e-6)
    for g, r in zip(grads, reference_grads):
        assert (g is None) == (r is None)
        if g is not None:
            torch.testing.assert_close(g, r, atol=1e-6, rtol=1e-5)
    positions, targets = next_token_targets(labels)
    some = dec.forward_exits(ids, mask, [1, 4], positions)
    assert some[4].shape == (3 * len(LENGTHS), exits[L - 1].shape[-1])
    torch.testing.assert_close(some[4], dec.forward_exits(ids, mask, [4])[4][positions])
    assert torch.equal(targets, labels[:, 1:][positions[:, :-1]])


# ------------------------------------------------------------------ config and errors
def test_build_policy_every_method_from_target_speedup():
    for name in ["full", "target", "early_exit", "unified", "power_law", "adaptive"]:
        pol = build_schedule({"name": name, "target_speedup": 2}, 24, expected_length=32)
        assert pol.describe()["name"] == {"target": "linear"}.get(name, name)  # SkipDecode's
        if pol.static() is not None and name != "full":
            assert abs(pol.static().theoretical_speedup([32]) - 2) < 0.25
    calm = build_schedule({"name": "calm", "threshold": 0.9, "check_every": 2}, 24)
    assert isinstance(calm, CALMSchedule) and calm.exit_checks()[0] == 1


def test_bad_method_values_raise_clear_errors():
    with pytest.raises(ScheduleError, match=r"schedule\.threshold=1\.5"):
        CALMSchedule(L, 1.5)
    with pytest.raises(ScheduleError, match=r"schedule\.threshold=0"):
        CALMSchedule(L, 0)
    with pytest.raises(ScheduleError, match=r"schedule\.exit_layers=9 .*beyond the model"):
        EarlyExitSchedule(L, 9)
    with pytest.raises(ScheduleError, match=r"schedule\.min_exit_layers=7"):
        CALMSchedule(L, 0.5, min_exit_layers=7)
    with pytest.raises(ScheduleError, match="threshold is not set"):
        build_schedule({"name": "calm"}, L)
    uncalibrated = build_schedule({"name": "calm", "target_speedup": 2}, L)
    assert uncalibrated.threshold is None
    with pytest.raises(ValueError, match="calibrate it first"):
        SkipDecoder(FAMILIES["opt"]()).generate(*left_padded_batch([3])[:1], uncalibrated, 4)
    assert uncalibrated.with_threshold(0.5).threshold == 0.5
    with pytest.raises(ScheduleError, match="schedule.name='nope'"):
        build_schedule({"name": "nope"}, L)
    dec = SkipDecoder(FAMILIES["opt"]())
    ids, mask = left_padded_batch(LENGTHS)
    with pytest.raises(ValueError, match="allow_batching=true"):
        dec.generate(ids, CALMSchedule(L, 0.5), 4, mask)
    with pytest.raises(ValueError, match="outside the model's layers"):
        dec.forward_exits(ids, mask, [6])


def test_a_misspelt_missing_or_mistyped_setting_is_refused_by_name():
    """Nothing a schedule config holds is ignored: a key no builder reads is refused with the
    keys allowed (a nested draft's too), and a missing or mistyped number names its key."""
    with pytest.raises(
        ScheduleError,
        match=r"schedule\.warmpu_layers is not a setting of "
        r"schedule\.name=target; allowed: .*warmup_layers",
    ):
        build_schedule({"name": "target", "target_speedup": 2, "warmpu_layers": 3}, 24, 32)
    with pytest.raises(ScheduleError, match=r"schedule\.kk is not a setting of .*speculative"):
        build_schedule({"name": "speculative", "draft": {"name": "full"}, "kk": 8}, L)
    draft = {"name": "budgets", "budgets": [3], "warmup": 1}
    with pytest.raises(ScheduleError, match=r"schedule\.warmup is not a setting of .*budgets"):
        build_schedule({"name": "speculative", "draft": draft}, L)
    with pytest.raises(
        ScheduleError,
        match=r"schedule\.target_speedup is required for "
        r"schedule\.name=target",
    ):
        build_schedule({"name": "target"}, 24, 32)
    for bad in ("2x", None, True):
        with pytest.raises(ScheduleError, match=rf"schedule\.target_speedup={bad!r} is not"):
            build_schedule({"name": "target", "target_speedup": bad}, 24, 32)
    with pytest.raises(ScheduleError, match=r"schedule\.min_layers is required for .*linear"):
        build_schedule(
            {"name": "linear", "warmup_layers": 1, "max_layers": 6, "decay_tokens": 8}, L
        )
    with pytest.raises(ScheduleError, match=r"schedule\.allow_batching='no' is not allowed"):
        build_schedule({"name": "calm", "threshold": 0.9, "allow_batching": "no"}, L)
    with pytest.raises(ScheduleError, match=r"schedule\.exit_layers=0 is not allowed"):
        build_schedule({"name": "early_exit", "exit_layers": 0}, L)  # 0 is not "unset"
    with pytest.raises(ScheduleError, match=r"schedule\.keep_layers=0 is not allowed"):
        build_schedule({"name": "unified", "keep_layers": 0, "target_speedup": 2}, L)
    assert (
        build_schedule(
            {"name": "target", "target_speedup": 2.0, "warmup_layers": 1.0}, 24, 32
        ).warmup_layers
        == 1
    )  # a whole float is a count
    from skipdecode.evaluation.record import described_schedule

    made = build_schedule({"name": "target", "target_speedup": 2}, 24, 32)
    section = {  # a record's schedule: describe() and what the evaluation added beside it
        **made.describe(),
        **{"calibration": None, "origin": "checkpoint", "expected_length": 32},
        "expected_length_source": "skipdecode.json",
    }
    with pytest.raises(ScheduleError, match=r"schedule\.calibration, .* is not a setting"):
        build_schedule(section, 24)
    assert build_schedule(described_schedule(section), 24).describe() == made.describe()


def test_calm_threshold_calibration_moves_toward_target():
    from skipdecode.schedules.calm import calibrate_calm_threshold

    dec = SkipDecoder(FAMILIES["opt"]())
    ids, mask = left_padded_batch(LENGTHS)
    lo_thr, lo_speed = calibrate_calm_threshold(
        dec, [(ids, mask)], 1.5, 6, iterations=5, eos_token_id=[]
    )
    hi_thr, hi_speed = calibrate_calm_threshold(
        dec, [(ids, mask)], 4.0, 6, iterations=5, eos_token_id=[]
    )
    assert hi_thr < lo_thr and hi_speed > lo_speed
    out = dec.generate(ids, CALMSchedule(L, lo_thr, allow_batching=True), 6, mask, eos_token_id=[])
    assert out.stats.theoretical_speedup == pytest.approx(lo_speed)


def test_calibration_speedup_over_batches_weighs_each_batch_by_its_tokens():
    """Calibration decodes its prompts in the evaluation's batches: the speedup it tunes is
    L x all tokens / all layers over those batches, not a mean of per-batch speedups."""
    from skipdecode.schedules.base import batched_speedup

    dec = SkipDecoder(FAMILIES["llama"]())
    ids, mask = left_padded_batch(LENGTHS)
    halves = [(ids[:1], mask[:1]), (ids[1:], mask[1:])]
    schedule = CALMSchedule(L, 0.3, allow_batching=True)
    stats = [dec.generate(i, schedule, 6, m, eos_token_id=[]).stats for i, m in halves]
    tokens = sum(s.token_count for s in stats)
    layers = sum(s.layers_per_token * s.token_count for s in stats)
    combined = batched_speedup(dec, schedule, halves, 6, eos_token_id=[])
    assert combined == pytest.approx(L * tokens / layers)
    assert tokens > 0 and min(s.token_count for s in stats) != max(s.token_count for s in stats)
