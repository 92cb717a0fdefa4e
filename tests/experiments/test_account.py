"""A job's account of how its cell was made survives a sweep run again that only finds it."""

from __future__ import annotations

import json
from pathlib import Path

from skipdecode.experiments.sweeps.account import (
    EARLIER_KEY,
    earlier_account,
    final_account,
    running_account,
)
from skipdecode.experiments.sweeps.gpu_memory import PEAK_KEY

MADE = {
    "status": "ok", "record": "/cells/a/eval-1/record.json", "train_reused": False,
    "eval_reused": False, "seconds": 3197.4, "started": "2026-11-29T11:48:10", PEAK_KEY: 4 << 30,
}  # fmt: skip


def _found(record: str = MADE["record"], **change) -> dict:
    return {
        "status": "ok", "record": record, "train_reused": True, "eval_reused": True,
        "seconds": 0.07, "finished": "2026-11-30T09:00:00", PEAK_KEY: 170 << 20, **change,
    }  # fmt: skip


def test_a_cell_found_again_keeps_how_it_was_made_even_through_a_run_cut_short(tmp_path):
    (tmp_path / "cell.json").write_text(json.dumps(MADE))
    earlier = earlier_account(tmp_path)
    assert earlier == MADE
    # the next run is killed while it finds the cell again: its running cell.json keeps it
    running = running_account(tmp_path, ["schedule=full"])
    assert running["status"] == "running" and running[EARLIER_KEY] == MADE
    (tmp_path / "cell.json").write_text(json.dumps(running))
    assert earlier_account(tmp_path) == MADE
    failed = final_account({"status": "failed", "error": "TimeoutError", EARLIER_KEY: earlier})
    assert failed[EARLIER_KEY] == MADE  # a failed run leaves it for the next one
    kept = final_account({**_found(), EARLIER_KEY: earlier})
    assert kept == {**MADE, "found_again": "2026-11-30T09:00:00"}


def test_a_cell_made_anew_or_another_record_gives_the_new_account():
    new = {**MADE, "seconds": 3000.0}
    assert final_account({**new, EARLIER_KEY: MADE}) == new  # trained again
    other = _found(record="/cells/b/eval-2/record.json")  # a record of another cell
    assert final_account({**other, EARLIER_KEY: MADE}) == {
        k: v for k, v in other.items() if k != PEAK_KEY
    }
    assert PEAK_KEY not in final_account(_found())  # it did no work: no GPU peak
    assert earlier_account(Path("/nonexistent")) is None  # a job never run
