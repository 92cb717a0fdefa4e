"""The E2E suite table: per-cell scores (cached), seed means and intervals, Δ vs full by seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from skipdecode.experiments.sweeps import e2e_table
from skipdecode.experiments.sweeps.seeds import mean_ci95

RESULTS = Path(__file__).resolve().parents[2] / "results" / "e2e_smollm2"
RECORD = str(RESULTS / "e2e_smollm2_curve-0" / "record.json")  # any committed E2E cell


def _cell(schedule: str, method: str, seed: int) -> dict:
    return dict(
        status="ok", dataset="e2e", model="m", schedule=schedule, method=method,
        target_speedup=1.0 if method == "full" else 2.0, seed=seed, record=RECORD,
        job=f"{schedule}-{seed}",
    )  # fmt: skip


@pytest.fixture
def fake_suite(monkeypatch, tmp_path):
    """Scores that depend on how often the suite ran (so a cache hit is visible)."""
    monkeypatch.setenv("SKIPDECODE_CACHE", str(tmp_path / "cache"))
    runs: list[int] = []

    def suite(systems, references):
        runs.append(len(systems))
        return {
            key: {k: 10.0 * len(runs) for k in ("bleu", "nist", "meteor", "rouge_l", "cider")}
            for key in systems
        }

    monkeypatch.setattr(e2e_table, "e2e_suite_many", suite)
    return runs


def test_cells_with_equal_outputs_share_one_score_and_the_cache(fake_suite):
    rows = [_cell("full", "full", 1), _cell("full", "full", 2), {"status": "failed"}]
    cells = e2e_table.suite_cells(rows)
    assert fake_suite == [1]  # same generations: one system, scored once
    assert [c["bleu"] for c in cells] == [10.0, 10.0]
    again = e2e_table.suite_cells(rows)
    assert fake_suite == [1] and again[0]["bleu"] == 10.0  # read from the cache


def test_rows_carry_seed_intervals_and_per_seed_deltas_against_full():
    base = {"status": "ok", "dataset": "e2e", "model": "m"}
    scores = {"full": [55.0, 56.0, 54.0], "target_2x": [46.0, 49.0, 44.0]}
    cells = []
    for schedule, values in scores.items():
        method = "full" if schedule == "full" else "skipdecode"
        for seed, v in enumerate(values, start=1):
            cells.append(
                {**base, "schedule": schedule, "method": method, "seed": seed,
                 "target_speedup": 1.0 if method == "full" else 2.0,
                 **{k: v for k in ("bleu", "nist", "meteor", "rouge_l", "cider")}}
            )  # fmt: skip
    text = e2e_table.format_e2e_suite(list(reversed(cells)))
    lines = [line for line in text.splitlines() if line.startswith("| m |")]
    assert lines[0].startswith("| m | full | full | 1 2 3 |")  # full first
    mean, low, high = mean_ci95([-9.0, -7.0, -10.0])
    assert f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]" in lines[1]
    mean, low, high = mean_ci95([55.0, 56.0, 54.0])
    assert f"{mean:.2f} [{low:.2f}, {high:.2f}]" in lines[0]
    for name, *_ in e2e_table.PUBLISHED_SYSTEMS:
        assert name in text
    # every metric's per-seed difference, in the second table (full has none)
    (row,) = [line for line in lines[2:] if "target_2x" in line]
    mean, low, high = mean_ci95([-9.0, -7.0, -10.0])
    assert row.startswith("| m | target_2x | 1 2 3 | ")
    assert row.count(f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]") == 3  # BLEU, METEOR, ROUGE-L
    assert row.count(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]") == 2  # NIST, CIDEr
