"""The GPU training page (``results/training/gpu-runs.md``) recomputed from each run's records.

Per run folder with a ``metrics.json``: the memory plan's total is the sum of its parts
(weights, gradients, optimizer states, activations, transient); the reserved and allocated peaks
are the largest over the devices' byte counts; plan / reserved is the plan's bytes over the
reserved peak; the final training and validation losses are the last ones the run's own
``csv/metrics.csv`` logged. Each of the page's cells is compared with these at its printed digits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .findings import Findings, csv_rows

__all__ = ["check_training"]

PAGE = Path("training") / "gpu-runs.md"
_PARTS = ("weights", "gradients", "optimizer_states", "activations", "transient")
_COLUMNS = ("plan GiB", "reserved GiB", "allocated GiB", "plan / reserved", "steps")


def _page_rows(path: Path) -> dict[str, dict[str, str]]:
    """The page's table: run name -> {column: printed cell}."""
    lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x.startswith("| ")]
    if not lines:
        return {}
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].split("`")[1]] = dict(zip(header, cells, strict=True))
    return rows


def _last_logged(run: Path, key: str) -> float | None:
    path = run / "csv" / "metrics.csv"
    if not path.is_file():
        return None
    values = [row[key] for row in csv_rows(path) if row.get(key)]
    return float(values[-1]) if values else None


def _expected(run: Path, record: dict[str, Any], found: Findings) -> dict[str, str]:
    plan, peak = record["memory_plan"], record.get("device_peak") or {}
    found.compare(f"training/{run.name}", "plan total", plan["total"], sum(plan[p] for p in _PARTS))
    gib = 1024**3
    reserved = max(peak.get("reserved_bytes") or [0])
    allocated = max(peak.get("allocated_bytes") or [0])
    out = {
        "plan GiB": f"{sum(plan[p] for p in _PARTS) / gib:.2f}",
        "reserved GiB": f"{reserved / gib:.2f}" if reserved else "not measured",
        "allocated GiB": f"{allocated / gib:.2f}" if allocated else "not measured",
        "plan / reserved": f"{plan['total'] / reserved:.2f}" if reserved else "",
        "steps": str(record["metrics"]["global_step"]),
    }
    for column, key in (("train loss", "train/loss"), ("val loss", "val/loss")):
        value = _last_logged(run, key)
        if value is None:
            found.skip(f"training runs whose csv log has no {key}")
        else:
            out[column] = f"{value:.4f}"
    return out


def check_training(results: Path) -> Findings:
    """The GPU training page's memory and loss cells against the runs' records."""
    found = Findings("GPU training page from its runs")
    if not (results / PAGE).is_file():
        return found
    page = _page_rows(results / PAGE)
    runs = sorted(p.parent for p in (results / "training").glob("*/metrics.json"))
    for name in sorted(set(page) - {run.name for run in runs}):
        found.differences.append(f"{PAGE}: row {name} has no run with a metrics.json")
    for run in runs:
        record = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
        if run.name not in page:
            found.differences.append(f"{PAGE}: run {run.name} is not on the page")
            continue
        for column, value in _expected(run, record, found).items():
            found.compare(f"{PAGE} {run.name}", column, page[run.name].get(column), value)
    return found
