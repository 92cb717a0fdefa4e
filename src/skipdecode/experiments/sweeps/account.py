"""A job's account of how its cell was made (its ``cell.json``), kept through later runs.

A sweep run again under the same name (to finish what an earlier run left) finds every finished
cell again: its training and evaluation are reused and nothing is made. The job's ``cell.json``
keeps the earlier account (when it started, how long it took, whether it trained, resumed or
reused, its GPU peak), with when it was found again, instead of a new one that says only
"reused". While the job runs, the earlier account waits in the running ``cell.json`` under
:data:`EARLIER_KEY`, so a run cut short loses nothing.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from ...io import read_json_or_none
from .gpu_memory import PEAK_KEY
from .identity import CELL_FILE

__all__ = ["EARLIER_KEY", "earlier_account", "final_account", "now", "running_account"]

#: in a running job's ``cell.json``: the finished account an earlier run of its sweep wrote
EARLIER_KEY = "earlier"


def now() -> str:
    """The time, to the second, with the machine's offset from UTC (a ``cell.json`` read on
    another machine, or under another ``TZ``, means the same instant)."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def earlier_account(job_dir: Path) -> dict[str, Any] | None:
    """How the job's finished cell was made, as an earlier run of the same sweep wrote it."""
    prev = read_json_or_none(job_dir / CELL_FILE) or {}
    return prev if prev.get("status") == "ok" else prev.get(EARLIER_KEY)


def running_account(job_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """A starting job's ``cell.json``: running since now, with its overrides and the earlier
    account (if any) under :data:`EARLIER_KEY`."""
    cell: dict[str, Any] = {
        "status": "running",
        "started": now(),
        "job_dir": str(job_dir),
        "overrides": overrides,
    }
    earlier = earlier_account(job_dir)
    return {**cell, EARLIER_KEY: earlier} if earlier else cell


def final_account(cell: dict[str, Any]) -> dict[str, Any]:
    """What the job's ``cell.json`` keeps: a cell found again whole (training and evaluation
    reused, the same record) keeps the earlier account, with when it was found again
    (``found_again``); a cell that did no work records no GPU peak; a failed one keeps the
    earlier account where it waits."""
    if cell.get("status") != "ok":  # failed: the earlier account waits for a later run
        return cell
    earlier = cell.pop(EARLIER_KEY, None)
    if cell.get("train_reused") and cell.get("eval_reused"):
        cell.pop(PEAK_KEY, None)
        if earlier and earlier.get("record") == cell.get("record"):
            return {**earlier, "found_again": cell["finished"]}
    return cell
