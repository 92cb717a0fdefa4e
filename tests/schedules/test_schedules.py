"""Skip schedules: properties, the speedup rule, presets and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from skipdecode.schedules import (
    FullSchedule,
    LinearSchedule,
    ScheduleError,
    build_schedule,
    linear_for_speedup,
    position_layer_mask,
)

CONF = Path(__file__).resolve().parents[2] / "conf" / "schedule"


@st.composite
def linear_schedules(draw):
    L = draw(st.integers(2, 48))
    w = draw(st.integers(0, L - 1))
    mn = draw(st.integers(w + 1, L))
    mx = draw(st.integers(mn, L))
    T = draw(st.integers(1, 300))
    return LinearSchedule(L, w, mx, mn, T)


@settings(max_examples=200, deadline=None)
@given(linear_schedules(), st.integers(0, 400))
def test_budget_never_increases_and_sets_are_nested(s: LinearSchedule, g: int):
    assert s.budget(g + 1) <= s.budget(g)
    assert set(s.active_layers(g + 1)) <= set(s.active_layers(g))


@settings(max_examples=200, deadline=None)
@given(linear_schedules(), st.integers(0, 400))
def test_warmup_and_top_layers_always_run(s: LinearSchedule, g: int):
    active = s.active_layers(g)
    assert set(range(s.warmup_layers)) <= set(active)
    assert s.num_layers - 1 in active
    assert len(active) == s.budget(g)
    assert s.min_layers <= s.budget(g) <= s.max_layers
    # the top budget - w layers form one contiguous block ending at the top layer
    top = [layer for layer in active if layer >= s.warmup_layers]
    assert top == list(range(s.num_layers - len(top), s.num_layers))


@settings(max_examples=100, deadline=None)
@given(linear_schedules(), st.lists(st.integers(2, 120), min_size=1, max_size=6))
def test_speedup_formula(s: LinearSchedule, lengths: list[int]):
    # token 0 comes from the prefill; token g >= 1 from decode pass g - 1 (budget(g - 1))
    per_token = [s.budget(g - 1) for n in lengths for g in range(1, n)]
    expected = s.num_layers / (sum(per_token) / len(per_token))
    assert s.theoretical_speedup(lengths) == pytest.approx(expected)


def test_layers_per_token_by_hand():
    s = LinearSchedule(24, warmup_layers=2, max_layers=20, min_layers=8, decay_tokens=4)
    # budgets 20, 17, 14, 11, 8: three tokens cost two decode passes, (20 + 17) / 2
    assert s.mean_layers([3]) == 18.5
    # a one-token sequence adds no decode pass; [3, 5] -> (20 + 17 + 20 + 17 + 14 + 11) / 6
    assert s.mean_layers([1, 3]) == 18.5
    assert s.mean_layers([3, 5]) == pytest.approx(99 / 6)
    assert s.theoretical_speedup([3]) == pytest.approx(24 / 18.5)
    with pytest.raises(ScheduleError, match="a length >= 2"):
        s.mean_layers([1, 1])


def test_linear_budget_by_hand():
    s = LinearSchedule(24, warmup_layers=2, max_layers=20, min_layers=8, decay_tokens=4)
    # 20 - 12 * g/4 -> 20, 17, 14, 11, 8, 8 ...
    assert [s.budget(g) for g in range(7)] == [20, 17, 14, 11, 8, 8, 8]
    assert s.active_layers(4) == (0, 1, 18, 19, 20, 21, 22, 23)
    # round half up: 21 - 3 * 1/2 = 19.5 -> 20
    assert LinearSchedule(24, 1, 21, 18, 2).budget(1) == 20


def test_layer_mask_and_budgets_views():
    s = LinearSchedule(6, 1, 5, 2, 3)
    m = s.layer_mask([0, 1, 2, 3, 10])
    assert m.shape == (5, 6)
    assert m.sum(1).tolist() == s.budgets([0, 1, 2, 3, 10]).tolist() == [5, 4, 3, 2, 2]
    assert m[:, 0].all() and m[:, -1].all()
    assert FullSchedule(6).layer_mask(range(4)).all()
    assert FullSchedule(6).theoretical_speedup([5, 7]) == 1.0


def test_position_layer_mask_right_padded():
    s = LinearSchedule(4, 1, 3, 2, 1)  # budgets 3, 2, 2, ...
    mask = position_layer_mask(s, torch.tensor([2, 3]), seq_len=5)
    assert mask.shape == (2, 4, 5)
    # row 0: prompt positions 0,1 all layers; position 2 is step 0 (budget 3), 3+ budget 2
    assert mask[0, :, :2].all()
    assert mask[0, :, 2].tolist() == [True, False, True, True]
    assert mask[0, :, 3].tolist() == [True, False, False, True]
    # row 1: three prompt positions
    assert mask[1, :, :3].all()
    assert mask[1, :, 3].tolist() == [True, False, True, True]


@pytest.mark.parametrize("L", [8, 24, 30, 32])
@pytest.mark.parametrize("speedup", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("N", [16, 32, 100])
def test_target_speedup_rule_meets_target_within_rounding(L, speedup, N):
    w = 1
    if L / speedup < w + 0.5:
        pytest.skip("unreachable with one warm-up layer")
    s = linear_for_speedup(L, speedup, N, warmup_layers=w)
    assert abs(s.mean_layers([N]) - L / speedup) <= 0.5
    assert s.decay_tokens == N
    assert s.max_layers >= s.min_layers >= w + 1


def test_target_speedup_that_cannot_be_met():
    with pytest.raises(ScheduleError, match="warmup_layers=3"):
        linear_for_speedup(8, 4, 32, warmup_layers=3)
    with pytest.raises(ScheduleError, match="target_speedup"):
        linear_for_speedup(24, 0.5, 32)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        (dict(warmup_layers=1, max_layers=10, min_layers=12, decay_tokens=5), "min_layers"),
        (dict(warmup_layers=1, max_layers=30, min_layers=4, decay_tokens=5), "max_layers"),
        (dict(warmup_layers=6, max_layers=10, min_layers=5, decay_tokens=5), "min_layers"),
        (dict(warmup_layers=-1, max_layers=10, min_layers=5, decay_tokens=5), "warmup_layers"),
        (dict(warmup_layers=1, max_layers=10, min_layers=5, decay_tokens=0), "decay_tokens"),
    ],
)
def test_bad_values_name_the_key(kwargs, key):
    with pytest.raises(ScheduleError, match=rf"schedule\.{key}="):
        LinearSchedule(24, **kwargs)


def test_build_schedule_from_config_and_mismatch():
    assert isinstance(build_schedule({"name": "full"}, 12), FullSchedule)
    s = build_schedule({"name": "target", "target_speedup": 2}, 12, expected_length=20)
    assert abs(s.mean_layers([20]) - 6) <= 0.5
    with pytest.raises(ScheduleError, match="expected_length"):
        build_schedule({"name": "target", "target_speedup": 2}, 12)
    with pytest.raises(ScheduleError, match="does not match the model's 30 layers"):
        build_schedule(yaml.safe_load((CONF / "skipdecode_2x_24l.yaml").read_text()), 30)
    with pytest.raises(ScheduleError, match="schedule.name='nope'"):
        build_schedule({"name": "nope"}, 12)


@pytest.mark.parametrize("path", sorted(CONF.glob("skipdecode_*x_*l.yaml")), ids=lambda p: p.stem)
def test_presets_follow_the_rule(path: Path):
    cfg = yaml.safe_load(path.read_text())
    s = build_schedule(cfg, cfg["num_layers"])
    rebuilt = linear_for_speedup(
        cfg["num_layers"], cfg["target_speedup"], cfg["decay_tokens"], cfg["warmup_layers"]
    )
    assert s.describe() == rebuilt.describe()
    assert (
        abs(s.mean_layers([cfg["decay_tokens"]]) - cfg["num_layers"] / cfg["target_speedup"]) <= 0.5
    )


def _presets_script(argv: list[str], monkeypatch) -> None:
    import importlib.util
    import sys

    script = CONF.parents[1] / "scripts" / "make_schedule_presets.py"
    spec = importlib.util.spec_from_file_location("make_schedule_presets", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["make_schedule_presets.py", *argv])
    module.main()


def test_the_preset_script_makes_the_committed_presets_or_writes_none(tmp_path, monkeypatch):
    _presets_script(["--out", str(tmp_path / "made")], monkeypatch)
    made = sorted((tmp_path / "made").iterdir())
    assert [p.name for p in made] == sorted(p.name for p in CONF.glob("skipdecode_*x_*l.yaml"))
    assert all(p.read_text() == (CONF / p.name).read_text() for p in made)
    with pytest.raises(SystemExit):  # 3x cannot be met on 24 layers with 8 warm-up layers
        _presets_script(["--warmup-layers", "8", "--out", str(tmp_path / "none")], monkeypatch)
    assert not (tmp_path / "none").exists()


def test_target_rule_fitted_to_a_length_distribution_meets_its_mean_there():
    """``lengths``: the mean budget per generated token over sequences of those lengths is the
    target within rounding; short and long outputs pull it away from the median-only fit."""
    L, N = 30, 29
    lengths = [12] * 40 + [29] * 20 + [60] * 40  # median 29, widely spread
    median_fit = linear_for_speedup(L, 2, N)
    spread_fit = linear_for_speedup(L, 2, N, lengths=lengths)
    assert abs(spread_fit.mean_layers(lengths) - L / 2) <= 0.5
    assert abs(median_fit.mean_layers(lengths) - L / 2) > abs(
        spread_fit.mean_layers(lengths) - L / 2
    )
    assert spread_fit.decay_tokens == N  # the decay still spans the expected length


def test_target_schedule_built_from_validation_lengths_only_when_asked_and_given():
    cfg = {"name": "target", "target_speedup": 2, "lengths": "validation"}
    lengths = [12] * 40 + [29] * 20 + [60] * 40
    built = build_schedule(cfg, 30, 29, lengths)
    assert built.describe() == linear_for_speedup(30, 2, 29, lengths=lengths).describe()
    same = build_schedule({**cfg, "lengths": "median"}, 30, 29, lengths)
    assert (
        same.describe()
        == build_schedule({"name": "target", "target_speedup": 2}, 30, 29).describe()
    )
    unset = build_schedule({**cfg, "lengths": None}, 30, 29, lengths)  # null: the default
    assert unset.describe() == same.describe()
    with pytest.raises(ScheduleError, match="schedule.draft.lengths='validation'; allowed: median"):
        build_schedule({"name": "speculative", "draft": cfg, "k": 4}, 30, 29, lengths)
    with pytest.raises(ScheduleError, match="schedule.lengths=validation .* none were given"):
        build_schedule(cfg, 30, 29)
    with pytest.raises(ScheduleError, match="schedule.lengths='mean'; allowed: median, validation"):
        build_schedule({**cfg, "lengths": "mean"}, 30, 29, lengths)
    with pytest.raises(
        ScheduleError, match="applies to schedule.name=target only, not 'early_exit'"
    ):
        build_schedule(
            {"name": "early_exit", "target_speedup": 2, "lengths": "validation"}, 30, 29, lengths
        )
