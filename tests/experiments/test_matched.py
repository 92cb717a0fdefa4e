"""Quality at a common reached speed: each method read off its own curve, seed by seed."""

from __future__ import annotations

import pytest

from skipdecode.experiments.sweeps.matched import format_matched, interpolate, matched_rows


def _cell(method, seed, speed, bleu, bert=0.8, status="ok", **extra):
    return {
        **extra,
        "status": status,
        "dataset": "e2e",
        "model": "m",
        "method": method,
        "schedule": f"{method}_{speed}",
        "seed": seed,
        "theoretical_speedup": speed,
        "measured_speedup_decode": None,
        "bleu": bleu,
        "bertscore_f1": bert,
    }


def test_interpolate_between_neighbours_and_never_beyond():
    pts = [(3.0, 40.0), (1.0, 60.0), (2.0, 50.0)]
    assert interpolate(pts, 1.5) == pytest.approx(55.0)
    assert interpolate(pts, 2.5) == pytest.approx(45.0)
    assert interpolate(pts, 3.0) == pytest.approx(40.0)
    assert interpolate(pts, 3.5) is None and interpolate(pts, 0.5) is None


def test_methods_compared_at_the_same_speed_with_seed_intervals():
    cells = [
        _cell("full", 1, 1.0, 60.0, 0.90),
        _cell("full", 2, 1.0, 62.0, 0.92),
        # method A reaches 2x and 4x; method B only 1.6x (its nominal "2x"), then 3x
        _cell("a", 1, 2.0, 50.0),
        _cell("a", 1, 4.0, 30.0),
        _cell("a", 2, 2.0, 54.0),
        _cell("a", 2, 4.0, 34.0),
        _cell("b", 1, 1.6, 58.0),
        _cell("b", 1, 3.0, 44.0),
        _cell("b", 2, 1.6, 58.0, status="failed"),
        _cell("speculative", 1, 1.3, 61.0),  # lossless: not a quality-speed trade-off
    ]
    rows = {(r["method"], r["speedup"]): r for r in matched_rows(cells, speedups=(2.0, 3.5))}
    assert set(rows) == {("a", 2.0), ("a", 3.5), ("b", 2.0)}  # b never reaches 3.5x
    a2 = rows[("a", 2.0)]
    assert a2["seeds"] == "1 2" and a2["bleu"] == pytest.approx(52.0)
    assert a2["bleu_delta"] == pytest.approx(-9.0)  # (50-60, 54-62) -> -10, -8
    assert a2["bleu_delta_low"] < -9.0 < a2["bleu_delta_high"]
    assert rows[("a", 3.5)]["bleu"] == pytest.approx((35.0 + 39.0) / 2)
    b2 = rows[("b", 2.0)]  # seed 2 failed: one seed, no interval
    assert b2["seeds"] == "1" and b2["bleu"] == pytest.approx(58.0 - 14.0 * 0.4 / 1.4)
    assert b2["bleu_delta_low"] is None
    table = format_matched(list(rows.values()))
    assert "speedup (theoretical)" in table and "| 2.0x | a | 1 2 |" in table


def test_each_fine_tuning_budget_is_its_own_curve_anchored_at_full_after_as_many_steps():
    """A budget sweep's cells: each number of steps has its own full and its own curve; no
    curve mixes models fine-tuned for different budgets."""
    cells = [
        _cell("full", 1, 1.0, 60.0, train_steps=120),
        _cell("full", 1, 1.0, 50.0, train_steps=240),
        _cell("a", 1, 2.0, 40.0, train_steps=120),
        _cell("a", 1, 1.8, 48.0, train_steps=240),  # a curve of its own, short of 2.0x
    ]
    rows = {(r["steps"], r["speedup"]): r for r in matched_rows(cells, speedups=(1.5, 2.0))}
    assert set(rows) == {("120", 1.5), ("120", 2.0), ("240", 1.5)}
    assert rows[("120", 1.5)]["bleu"] == pytest.approx(50.0)  # 60 -> 40 over 1x -> 2x
    assert rows[("120", 1.5)]["bleu_delta"] == pytest.approx(-10.0)
    assert rows[("240", 1.5)]["bleu"] == pytest.approx(50.0 - 2.0 * 0.5 / 0.8)
    assert rows[("240", 1.5)]["bleu_delta"] == pytest.approx(-2.0 * 0.5 / 0.8)
    table = format_matched(list(rows.values()))
    assert "| method | steps | seeds |" in table and "| 1.5x | a | 240 | 1 |" in table
    unstepped = format_matched(matched_rows([_cell("full", 1, 1.0, 60.0), _cell("a", 1, 2.0, 40)]))
    assert "steps" not in unstepped  # a folder without budgets prints no steps column


def test_nothing_to_match_writes_no_table():
    assert format_matched(matched_rows([_cell("full", 1, 1.0, 60.0)])) is None
