"""The reach table: target, planned and reached speedup of each published cell, recomputed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ci import skip_unless_ci

from skipdecode.data.datasets import get_task, load_split, target_lengths
from skipdecode.experiments.sweeps import reach
from skipdecode.models.loading import ModelConfigError
from skipdecode.schedules import LinearSchedule

RESULTS = Path(__file__).resolve().parents[2] / "results"
PUBLISHED = sorted(p.parent for p in RESULTS.glob(f"*/{reach.REACH_CSV}"))
SMOLLM2 = RESULTS / "e2e_smollm2"


def _rows(folder: Path) -> list[dict]:
    try:
        return reach.reach_rows(folder)
    except (ModelConfigError, OSError) as e:  # the converted model is not on this machine
        skip_unless_ci(f"{folder.name}: {e}")  # make test converts both: a failure there


@pytest.mark.parametrize("folder", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_published_reach_tables_are_what_the_records_give(folder):
    rows = _rows(folder)
    assert (folder / reach.REACH_MD).read_text() == reach.format_reach(rows)


def test_planned_and_reached_speedups_follow_their_definitions():
    rows = {r["job"]: r for r in _rows(SMOLLM2)}
    tokenizer = reach._tokenizer("smollm2-135m")
    data = {"data_dir": str(RESULTS.parents[1] / "shared" / "data" / "e2e"), "seed": 0}
    validation = target_lengths(
        load_split("e2e", "validation", validation_fraction=0.1, **data),
        tokenizer,
        task=get_task("e2e"),
    )
    for job, row in rows.items():
        record = json.loads((SMOLLM2 / job / "record.json").read_text())
        desc = record["schedule"]
        assert row["reached"] == record["summary"]["theoretical_speedup"]
        if desc["name"] == "linear":  # a target schedule: planned over every validation length
            keys = ("num_layers", "warmup_layers", "max_layers", "min_layers", "decay_tokens")
            schedule = LinearSchedule(*(desc[k] for k in keys))
            assert row["planned"] == pytest.approx(schedule.theoretical_speedup(validation))
            assert row["planned_on"] == f"{len(validation)} validation targets"
        elif desc["name"] in ("early_exit", "unified"):  # the same budget at every position
            assert row["planned"] == row["test_references"] == pytest.approx(row["reached"])
        elif desc.get("calibration"):
            assert row["planned"] == desc["calibration"]["theoretical_speedup"]
            assert row["test_references"] is None
    assert {r["schedule"] for r in rows.values()} >= {"target_2x", "calm_2x", "early_exit_2x"}
