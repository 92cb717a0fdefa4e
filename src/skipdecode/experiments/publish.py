"""Publish a finished sweep into the repository: ``results/<name>/``, rebuilt from its records.

``python -m skipdecode.aggregate outputs/sweep/<name> --publish results/<name>`` copies, per
cell, ``cell.json`` (the record path made relative), the evaluation ``record.json`` and its
``generations.jsonl`` (the paired bootstrap needs the per-input outputs), plus the sweep's
``plan.json``; then runs the aggregation on the copy, so the published ``results.md``,
``cells.md``, CSVs and plots are exactly what the aggregate code makes from the committed
records (a test checks it). The directory is built beside the target and renamed into place:
it is written whole or not at all.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..io import read_json_or_none, write_json_atomic
from .table import CELL_FILE, PLAN_FILE

__all__ = ["publish"]


def publish(sweep_dir: str | Path, target: str | Path, rebuild: Callable[[Path], Any]) -> Path:
    """Copy the sweep's records into ``target`` and ``rebuild`` the tables there (the
    aggregation: ``aggregate.aggregate``); returns ``target``."""
    sweep_dir, target = Path(sweep_dir), Path(target)
    cells = sorted(sweep_dir.glob(f"*/{CELL_FILE}"))
    if not cells:
        raise FileNotFoundError(f"{str(sweep_dir)!r} holds no {CELL_FILE}: nothing to publish")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for cell_file in cells:
            _copy_cell(cell_file, staging / cell_file.parent.name)
        if (sweep_dir / PLAN_FILE).is_file():
            shutil.copy2(sweep_dir / PLAN_FILE, staging / PLAN_FILE)
        rebuild(staging)
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            staging.rename(target)
            shutil.rmtree(old)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _copy_cell(cell_file: Path, job_dir: Path) -> None:
    cell: dict[str, Any] = read_json_or_none(cell_file) or {}
    job_dir.mkdir(parents=True)
    record = Path(str(cell.get("record") or ""))
    if cell.get("status") == "ok" and record.is_file():
        shutil.copy2(record, job_dir / "record.json")
        generations = record.parent / "generations.jsonl"
        if generations.is_file():
            shutil.copy2(generations, job_dir / "generations.jsonl")
        cell["record"] = "record.json"
    for key in ("cell_dir", "job_dir", "export"):  # machine-local paths
        cell.pop(key, None)
    write_json_atomic(job_dir / CELL_FILE, cell)
