"""A sweep's tables, built from the cells' files on disk: ``cells.csv``/``cells.md`` (one row
per cell, i.e. per model, dataset, schedule and seed) and ``results.csv``/``results.md`` (one
row per model, dataset and schedule: means over seeds with 95% intervals and the paired
difference against ``full``, from :mod:`.seeds`).

A sweep directory holds one job folder
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
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...evaluation.metrics.outputs import OUTPUT_STATS
from ...evaluation.speed import published_speedups
from ...io import read_json_or_none, write_text_atomic
from ...provenance import diff_missing
from .audit import provenance_note
from .cell_outputs import cell_output_stats
from .identity import CELL_FILE
from .steps import with_steps

__all__ = [
    "COLUMNS", "RESULT_COLUMNS", "row_order", "PLAN_FILE", "collect", "csv_text",
    "format_markdown", "format_results_markdown", "page_command", "write_tables", "num",
]  # fmt: skip

PLAN_FILE = "plan.json"
#: In a cell's folder: how its training went (``status``, ``seconds``, the export).
TRAIN_DONE = "train_done.json"
TABLE_CSV = "results.csv"
TABLE_MD = "results.md"
CELLS_CSV = "cells.csv"
CELLS_MD = "cells.md"
QUALITY = ("bleu", "rougeL", "bertscore_f1")
SPEEDS = (
    "theoretical_speedup",
    "batch_speedup",
    "measured_speedup_decode",
    "measured_speedup_e2e",
)

#: Cell table columns, in order. Quality on the libraries' scales (BLEU 0-100, ROUGE/BERTScore
#: 0-1).
COLUMNS: tuple[str, ...] = (
    "status",
    "dataset",
    "model",
    "schedule",
    "method",
    "seed",
    "target_speedup",
    "theoretical_speedup",
    "batch_speedup",
    "measured_speedup_decode",
    "measured_speedup_e2e",
    "speedup_source",
    "bleu",
    "rougeL",
    "bertscore_f1",
    "tokens_per_second",
    "mean_generated_length",
    "acceptance_rate",
    *OUTPUT_STATS,
    "train_seconds",  # the cell's training, wall seconds (cell.json)
    "eval_seconds",  # its evaluation: generation with its timed baseline, then scoring
    "job",
    "cell_id",
    "error",
)
#: Results table columns (one row per model, dataset and schedule), in order.
RESULT_COLUMNS: tuple[str, ...] = (
    "status",
    "dataset",
    "model",
    "schedule",
    "method",
    "target_speedup",
    "n_seeds",
    *SPEEDS,
    *(f"{m}_{part}" for m in QUALITY for part in ("mean", "ci95_low", "ci95_high")),
    *(
        f"{m}_{part}"
        for m in QUALITY
        for part in (
            "delta",
            "delta_ci95_low",
            "delta_ci95_high",
            "delta_seed_ci95_low",
            "delta_seed_ci95_high",
        )
    ),
    "delta_seeds",
    "tokens_per_second",
    "mean_generated_length",
    "acceptance_rate",
    *OUTPUT_STATS,
    "seeds",
    "error",
)
_MD_HEADERS = {
    "target_speedup": "target",
    "theoretical_speedup": "theor. speedup",
    "batch_speedup": "batch speedup",
    "measured_speedup_decode": "measured (decode)",
    "measured_speedup_e2e": "measured (e2e)",
    "bleu": "BLEU",
    "rougeL": "ROUGE-L per-type max",
    "bertscore_f1": "BERT-F",
    "tokens_per_second": "tok/s",
    "mean_generated_length": "mean len",
    "acceptance_rate": "accept",
    "n_seeds": "seeds",
    "output_words": "words",
    "length_ratio": "len ratio",
    "bleu_bp": "BP",
    "bleu_no_bp": "BLEU w/o BP",
    "distinct_outputs": "distinct",
    "capped_share": "capped",
    "repeat_4gram": "rep. 4-grams",
    "train_seconds": "train s",
    "eval_seconds": "eval s",
}
_MD_SKIP = ("cell_id", "record", "speedup_source")


#: What a cell's row copies from its cell.json.
_CELL_KEYS = ("status", "dataset", "model", "schedule", "method", "target_speedup", "seed",
              "cell_id", "error", "train_steps", "train_seconds")  # fmt: skip


def _row_from_cell(job: str, cell: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in COLUMNS}
    row.update(
        job=job,
        **{k: cell.get(k) for k in _CELL_KEYS},
    )
    if row["status"] == "running":
        row["status"] = "interrupted"  # no process finished it (or it is still running)
        row["error"] = row["error"] or "cell did not finish (interrupted or still running)"
    if cell.get("status") == "ok":
        record = read_json_or_none(Path(cell.get("record", "")))
        if record is None:
            row.update(
                status="failed", error=f"record {cell.get('record')!r} is missing or unreadable"
            )
        else:
            summary = record.get("summary", {})
            for key in COLUMNS:
                if key in summary:
                    row[key] = summary[key]
            row.update(published_speedups(record.get("speed") or {}))  # one definition
            row["eval_seconds"] = sum((record.get("timing_s") or {}).values()) or None
            row["record"] = str(cell.get("record"))
            row["no_diff"] = diff_missing(record.get("provenance"))
            row.update(cell_output_stats(cell, record))
            if row["seed"] is None:  # cells written before the seed was a label
                row["seed"] = (record.get("config") or {}).get("seed")
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
        cell = read_json_or_none(cell_file)
        job = cell_file.parent.name
        if cell is None:
            rows[job] = {
                **{k: None for k in COLUMNS},
                "job": job,
                "status": "failed",
                "error": f"{cell_file} is unreadable",
            }
            continue
        record = cell.get("record")
        if record and not Path(record).is_absolute():  # a published sweep: beside its cell.json
            cell["record"] = str(cell_file.parent / record)
        rows[job] = _row_from_cell(job, cell)
    plan = read_json_or_none(sweep_dir / PLAN_FILE) or {}
    for job in plan.get("jobs", []):
        key = str(job.get("num"))
        if key not in rows:
            rows[key] = {
                **{k: None for k in COLUMNS},
                "job": key,
                "status": "pending",
                "error": "not started: " + " ".join(job.get("overrides", [])),
            }
    return sorted(rows.values(), key=row_order)


def row_order(row: Mapping[str, Any]) -> tuple:
    """Table order: dataset, model, target speedup, then job number."""
    job = str(row.get("job"))
    return (
        str(row.get("dataset") or "~"),
        str(row.get("model") or "~"),
        num(row.get("target_speedup")) or 0.0,
        int(job) if job.isdigit() else 10**9,
        job,
    )


def num(x: Any) -> float | None:
    """``x`` as a float, or None when it is missing, not a number or NaN."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def format_value(key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if key in ("bleu", "bleu_no_bp", "output_words") or key.startswith(("tokens", "mean_")):
            return f"{value:.2f}" if key != "tokens_per_second" else f"{value:.1f}"
        if "speedup" in key:
            return f"{value:.2f}x"
        return f"{value:.0f}" if key.endswith("_seconds") else f"{value:.4f}"
    return str(value).replace("|", "\\|")


def format_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    cols = with_steps([c for c in COLUMNS if c not in _MD_SKIP], rows)
    lines = [
        "| " + " | ".join(_MD_HEADERS.get(c, c) for c in cols) + " |",
        "|" + "|".join("---" for _ in cols) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(format_value(c, row.get(c)) for c in cols) + " |")
    return "\n".join(lines + _time_line(rows)) + "\n"


def _time_line(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The line under the cell table: what its trainings took, each once (cells evaluated from
    one trained model share its cell id), and its evaluations (minutes under two hours)."""
    trained = {r.get("cell_id") or r.get("job"): num(r.get("train_seconds")) for r in rows}
    spent = [[t for t in trained.values() if t], [num(r.get("eval_seconds")) for r in rows]]
    spent[1] = [e for e in spent[1] if e]
    if not spent[0] and not spent[1]:
        return []
    scale, unit, digits = (60, "min", 0) if max(map(sum, spent)) < 7200 else (3600, "h", 1)
    (n, train), (m, evaluation) = ((len(s), f"{sum(s) / scale:.{digits}f} {unit}") for s in spent)
    plural = {1: ""}
    return ["", f"Its {n} training{plural.get(n, 's')} took {train} and its {m} "
            f"evaluation{plural.get(m, 's')} {evaluation}."]  # fmt: skip


def interval_text(row: Mapping[str, Any], metric: str, kind: str) -> str:
    """``mean [low, high]`` (kind ``mean``), ``+delta [low, high]`` (kind ``delta``: the two-level
    bootstrap) or ``+delta [low, high]`` with the t-interval over per-seed deltas (``seed``)."""
    stem = f"{metric}_mean" if kind == "mean" else f"{metric}_delta"
    bounds = {"mean": f"{metric}_ci95", "delta": f"{metric}_delta_ci95"}.get(
        kind, f"{metric}_delta_seed_ci95"
    )
    value = num(row.get(stem))
    if value is None:
        return ""
    low, high = num(row.get(f"{bounds}_low")), num(row.get(f"{bounds}_high"))
    spec = ("+" if kind != "mean" else "") + (".2f" if metric == "bleu" else ".4f")
    text = format(value, spec)
    if low is not None and high is not None:
        text += f" [{format(low, spec)}, {format(high, spec)}]"
    return text


_RESULT_MD: tuple[tuple[str, str], ...] = (
    ("status", "status"),
    ("dataset", "dataset"),
    ("model", "model"),
    ("schedule", "schedule"),
    ("method", "method"),
    ("n_seeds", "seeds"),
    ("theoretical_speedup", "theor. speedup"),
    ("batch_speedup", "batch speedup"),
    ("measured_speedup_decode", "measured (decode)"),
    ("measured_speedup_e2e", "measured (e2e)"),
    ("bleu", "BLEU [95% CI]"),
    ("bleu_delta", "ΔBLEU vs full [seeds x inputs CI]"),
    ("bleu_delta_seed", "ΔBLEU [per-seed t CI]"),
    ("delta_seeds", "paired seeds"),
    ("rougeL", "ROUGE-L per-type max [95% CI]"),
    ("rougeL_delta", "ΔROUGE-L per-type max [seeds x inputs CI]"),
    ("bertscore_f1", "BERT-F [95% CI]"),
    ("bertscore_f1_delta", "ΔBERT-F [seeds x inputs CI]"),
    ("bertscore_f1_delta_seed", "ΔBERT-F [per-seed t CI]"),
    ("length_ratio", "len ratio"),
    ("bleu_bp", "BP"),
    ("bleu_no_bp", "BLEU w/o BP"),
    ("distinct_outputs", "distinct"),
    ("capped_share", "capped"),
    ("repeat_4gram", "rep. 4-grams"),
    ("acceptance_rate", "accept"),
    ("error", "error"),
)


def format_results_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The results table: quality as ``mean [95% CI]`` over seeds; the difference against
    ``full`` over the paired seeds with the two-level (seeds x inputs) bootstrap interval and,
    for BLEU and BERTScore, the t-interval over per-seed differences; speedups, length and
    degeneracy as means over seeds; the acceptance rate of speculative schedules when the table
    has one."""
    speculative = any(num(r.get("acceptance_rate")) is not None for r in rows)
    columns = with_steps(
        [(k, v) for k, v in _RESULT_MD if speculative or k != "acceptance_rate"], rows
    )
    lines = [
        "| " + " | ".join(label for _, label in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for row in rows:
        cells = []
        for key, _ in columns:
            if key in QUALITY:
                cells.append(interval_text(row, key, "mean"))
            elif key.endswith("_delta"):
                cells.append(interval_text(row, key[: -len("_delta")], "delta"))
            elif key.endswith("_delta_seed"):
                cells.append(interval_text(row, key[: -len("_delta_seed")], "seed"))
            else:
                cells.append(format_value(key, row.get(key)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    return buf.getvalue()


def write_tables(
    cells: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]], out_dir: Path
) -> dict[str, Path]:
    """Write the cell table and the results table (CSV + Markdown each), atomically."""
    paths = {
        "csv": out_dir / TABLE_CSV,
        "markdown": out_dir / TABLE_MD,
        "cells_csv": out_dir / CELLS_CSV,
        "cells_markdown": out_dir / CELLS_MD,
    }
    note = provenance_note(cells)
    write_text_atomic(paths["cells_csv"], csv_text(cells, with_steps(COLUMNS, cells)))
    write_text_atomic(paths["cells_markdown"], format_markdown(cells) + note)
    write_text_atomic(paths["csv"], csv_text(results, with_steps(RESULT_COLUMNS, results)))
    write_text_atomic(paths["markdown"], format_results_markdown(results) + note)
    return paths


def page_command(
    description: str,
    argv: Sequence[str] | None,
    write: Callable[[Path], Mapping[str, Path] | None],
    nothing: str,
    require: Callable[[], None] | None = None,
) -> None:
    """A page command over results folders (``folders`` on its command line): ``require``
    first (a ``ValueError`` it raises is the command's error), then each folder's ``write``,
    printing what it wrote (or ``nothing``); a folder that does not exist is refused."""
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("folders", nargs="+", type=Path, help="results folders (published or sweeps)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if require is not None:
            require()
    except ValueError as e:
        p.error(str(e))
    for folder in args.folders:
        if not folder.is_dir():
            p.error(f"folders: {str(folder)!r} is not a directory")
        paths = write(folder)
        print(f"{folder}: " + (", ".join(map(str, paths.values())) if paths else nothing))
