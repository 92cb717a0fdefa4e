"""Gather a sweep's cells into one table (CSV + Markdown) and plots; works on interrupted sweeps.

``python -m skipdecode.aggregate SWEEP_DIR [--wandb]``. A sweep directory holds one job folder
per cell (Hydra's ``<sweep dir>/<job num>``) with a ``cell.json`` written by
:mod:`skipdecode.sweep` (status ``running`` while it works, then ``ok`` or ``failed``) and, when it
finished, the evaluation record it points at. ``plan.json`` (written when the multirun starts)
lists every planned cell, so cells that never started show up as ``pending``. Nothing is
dropped: failed, interrupted and pending cells are rows of the table with their status.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["COLUMNS", "collect", "aggregate", "format_markdown", "main"]

CELL_FILE = "cell.json"
PLAN_FILE = "plan.json"
TABLE_CSV = "results.csv"
TABLE_MD = "results.md"

#: Table columns, in order. Quality on the libraries' scales (BLEU 0-100, ROUGE/BERTScore 0-1).
COLUMNS: tuple[str, ...] = (
    "status",
    "dataset",
    "model",
    "schedule",
    "method",
    "target_speedup",
    "theoretical_speedup",
    "batch_speedup",
    "measured_speedup_decode",
    "measured_speedup_e2e",
    "bleu",
    "rougeL",
    "bertscore_f1",
    "tokens_per_second",
    "mean_generated_length",
    "job",
    "cell_id",
    "error",
)
_MD_HEADERS = {
    "target_speedup": "target",
    "theoretical_speedup": "theor. speedup",
    "batch_speedup": "batch speedup",
    "measured_speedup_decode": "measured (decode)",
    "measured_speedup_e2e": "measured (e2e)",
    "bleu": "BLEU",
    "rougeL": "ROUGE-L",
    "bertscore_f1": "BERT-F",
    "tokens_per_second": "tok/s",
    "mean_generated_length": "mean len",
}
_MD_SKIP = ("cell_id",)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _row_from_cell(job: str, cell: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in COLUMNS}
    row.update(
        job=job,
        **{
            k: cell.get(k)
            for k in (
                "status",
                "dataset",
                "model",
                "schedule",
                "method",
                "target_speedup",
                "cell_id",
                "error",
            )
        },
    )
    if row["status"] == "running":
        row["status"] = "interrupted"  # no process finished it (or it is still running)
        row["error"] = row["error"] or "cell did not finish (interrupted or still running)"
    if cell.get("status") == "ok":
        record = _read_json(Path(cell.get("record", "")))
        if record is None:
            row.update(
                status="failed", error=f"record {cell.get('record')!r} is missing or unreadable"
            )
        else:
            summary = record.get("summary", {})
            for key in COLUMNS:
                if key in summary:
                    row[key] = summary[key]
    if row["error"]:
        row["error"] = str(row["error"]).strip().splitlines()[-1][:200]
    return row


def collect(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One row per cell (job folder with cell.json) and per planned cell that never started."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"sweep directory {str(sweep_dir)!r} does not exist")
    rows: dict[str, dict[str, Any]] = {}
    for cell_file in sorted(sweep_dir.glob(f"*/{CELL_FILE}")):
        cell = _read_json(cell_file)
        job = cell_file.parent.name
        if cell is None:
            rows[job] = {
                **{k: None for k in COLUMNS},
                "job": job,
                "status": "failed",
                "error": f"{cell_file} is unreadable",
            }
            continue
        rows[job] = _row_from_cell(job, cell)
    plan = _read_json(sweep_dir / PLAN_FILE) or {}
    for job in plan.get("jobs", []):
        key = str(job.get("num"))
        if key not in rows:
            rows[key] = {
                **{k: None for k in COLUMNS},
                "job": key,
                "status": "pending",
                "error": "not started: " + " ".join(job.get("overrides", [])),
            }
    return sorted(rows.values(), key=_sort_key)


def _sort_key(row: Mapping[str, Any]) -> tuple:
    job = str(row.get("job"))
    return (
        str(row.get("dataset") or "~"),
        str(row.get("model") or "~"),
        _num(row.get("target_speedup")) or 0.0,
        int(job) if job.isdigit() else 10**9,
        job,
    )


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if key == "bleu" or key.startswith("tokens") or key.startswith("mean_"):
            return f"{value:.2f}" if key != "tokens_per_second" else f"{value:.1f}"
        if "speedup" in key:
            return f"{value:.2f}x"
        return f"{value:.4f}"
    return str(value).replace("|", "\\|")


def format_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    cols = [c for c in COLUMNS if c not in _MD_SKIP]
    lines = [
        "| " + " | ".join(_MD_HEADERS.get(c, c) for c in cols) + " |",
        "|" + "|".join("---" for _ in cols) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(c, row.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _atomic_text(path: Path, text: str) -> None:
    """Write then rename: a reader sees the old table or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_tables(rows: Sequence[Mapping[str, Any]], out_dir: Path) -> tuple[Path, Path]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
    csv_path, md_path = out_dir / TABLE_CSV, out_dir / TABLE_MD
    _atomic_text(csv_path, buf.getvalue())
    _atomic_text(md_path, format_markdown(rows))
    return csv_path, md_path


def aggregate(sweep_dir: str | Path, plots: bool = True) -> dict[str, Any]:
    """Write results.csv, results.md and one PNG per dataset into ``sweep_dir``."""
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir)
    csv_path, md_path = write_tables(rows, sweep_dir)
    pngs: list[Path] = []
    if plots:
        from skipdecode.plots import plot_sweep

        try:
            pngs = plot_sweep(rows, sweep_dir)
        except Exception as e:  # a plot must never cost the table
            log.warning("plotting failed: %s", e)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return {"rows": rows, "csv": csv_path, "markdown": md_path, "plots": pngs, "counts": counts}


def log_wandb(result: Mapping[str, Any], wcfg: Mapping[str, Any], group: str | None) -> None:
    """The aggregate table and plots as one W&B run (job_type=aggregate) in the sweep's group."""
    import wandb

    run = wandb.init(
        project=wcfg.get("project") or "skipdecode",
        group=group,
        name=f"{group}-aggregate" if group else "aggregate",
        job_type="aggregate",
        mode=wcfg.get("mode") or "offline",
        dir=str(wcfg.get("dir") or Path(result["csv"]).parent),
        reinit="finish_previous",
    )
    try:
        table = wandb.Table(columns=list(COLUMNS))
        for row in result["rows"]:
            table.add_data(
                *[
                    row.get(c)
                    if not isinstance(row.get(c), float) or not math.isnan(row.get(c))
                    else None
                    for c in COLUMNS
                ]
            )
        payload: dict[str, Any] = {"sweep/results": table}
        for png in result.get("plots", []):
            payload[f"sweep/{Path(png).stem}"] = wandb.Image(str(png))
        run.log(payload)
        run.summary["sweep/counts"] = dict(result["counts"])
    finally:
        run.finish()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", help="a multirun directory (outputs/sweep/<name>)")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--wandb", action="store_true", help="log the table to W&B (offline)")
    parser.add_argument("--wandb-project", default="skipdecode")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = aggregate(args.sweep_dir, plots=not args.no_plots)
    print(Path(result["markdown"]).read_text())
    print(f"table: {result['csv']}  {result['markdown']}")
    for png in result["plots"]:
        print(f"plot: {png}")
    print("cells: " + ", ".join(f"{k}={v}" for k, v in sorted(result["counts"].items())))
    if args.wandb:
        log_wandb(result, {"project": args.wandb_project}, Path(args.sweep_dir).name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
