"""``summaries.csv``, ``one_model.csv`` and ``extractive.csv`` recomputed from the cells'
generations, with arithmetic of its own.

Per cell (a finished row of the folder's ``cells.csv`` and its ``generations.jsonl``, scored by
:mod:`.scored`): ROUGE-1,
ROUGE-2 and ROUGE-L F of every output against each of its references, counted by :mod:`.rouge`
(clipped n-gram matches; the longest common subsequence) over rouge-score's tokens, stemmed as
the record's settings say; per input SciTLDR's *max* (the reference with the best
ROUGE-1 F, the first on ties, and that reference's three scores) and *mean* (the mean over the
references); the cell's figure is the mean over its inputs. BERTScore F1 is the mean of the
per-input scores the generations keep; corpus BLEU is counted from the outputs (:mod:`.bleu`)
and compared with the cell's ``cells.csv`` figure (a record whose BLEU settings that module does
not implement keeps the ``cells.csv`` figure).

Per row: the mean over seeds with its 95% t-interval; against the baseline's cells of the same
seeds (``full`` on ``summaries.csv``, the per-schedule folder's cells on ``one_model.csv``): the
difference as the mean of the per-seed differences, the t-interval over them, the two-level
paired bootstrap (METRICS.md: 1,000 draws from numpy's generator seeded 12345, inputs drawn for
every seed at once, then the seeds; a per-input metric averaged over each draw's inputs, BLEU
recomputed from each draw's summed statistics), what the intervals decide, and the mean
measured speedups (only where every seed has one). ``extractive.csv``: each reference point's
kept outputs (``extractive.jsonl.gz``) scored the same way against full's references, full - point over
full's seeds with the same intervals, and full's own row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...io import plain_or_gzipped, read_jsonl
from ..sweeps.sources import read_generations
from .findings import Findings, csv_rows
from .scored import (
    ROUGE,
    SPEEDS,
    ScoredCells,
    bootstrap_interval,
    check_unpaired,
    computable,
    generations_of,
    paired,
    score_rows,
)  # fmt: skip
from .tables import mean_interval, mean_interval_every

__all__ = ["check_summaries", "decided_by"]

#: Each page, and the columns that name the cells of one of its rows.
_PAGES = {
    "summaries.csv": ("dataset", "model", "schedule", "method", "target_speedup", "train_steps"),
    "one_model.csv": ("dataset", "model", "schedule"),
}


def decided_by(intervals: list[tuple[float, float]]) -> str:
    """``lower``/``higher`` where every interval lies below/above 0, else ``undecided``; one
    interval (the inputs' bootstrap alone) says so."""
    if all(high < 0 for _, high in intervals):
        text = "lower"
    elif all(low > 0 for low, _ in intervals):
        text = "higher"
    else:
        return "undecided"
    return text if len(intervals) > 1 else f"{text} (inputs only)"


def _check_means(row: dict[str, str], cells: list, found: Findings, where: str, prefix: str = ""):
    """The row's seeds, and each quality and speed column's mean over them with its t-interval;
    returns the quality metrics the page has."""
    metrics = [m for m in (*ROUGE, "bleu", "bertscore_f1") if f"{prefix}{m}_ci95_low" in row]
    seeds = " ".join(sorted(c["seed"] for c in cells))
    found.compare(where, f"{prefix}seeds", row.get(f"{prefix}seeds"), seeds)
    for m in (*metrics, *(s for s in SPEEDS if f"{prefix}{s}" in row)):
        values = [c.get(m) for c in cells]
        if m in metrics:
            mean, low, high = mean_interval([v for v in values if v is not None])
        else:  # a speed's mean only where every seed has it
            mean, low, high = mean_interval_every(values)
        for suffix, value in (("", mean), ("_ci95_low", low), ("_ci95_high", high)):
            found.compare(where, prefix + m + suffix, row.get(prefix + m + suffix), value)
    return metrics


def _check_row(row: dict[str, str], cells: list, baseline: list, found: Findings, where: str):
    """One page row: means over seeds, and the differences against ``baseline``'s cells."""
    _check_deltas(row, cells, baseline, _check_means(row, cells, found, where), found, where)


def _check_deltas(row, cells: list, baseline: list, metrics: list, found: Findings, where: str):
    """``cells`` - ``baseline`` of the same seed and inputs, for each of ``metrics``."""
    pairs = paired(cells, {c["seed"]: c for c in baseline})
    if not pairs:  # nothing to pair: the row must show no difference
        check_unpaired(row, found, where)
        return
    if "delta_seeds" in row:
        seeds = " ".join(sorted(c["seed"] for c, _ in pairs))
        found.compare(where, "delta_seeds", row.get("delta_seeds"), seeds)
    for m in metrics:
        if f"{m}_delta" in row and all(x.get(m) is not None for pair in pairs for x in pair):
            _check_delta(row, m, pairs, found, where)


def _check_delta(row, m: str, pairs: list, found: Findings, where: str) -> None:
    """One metric's difference: its point, the per-seed t-interval, the bootstrap, the verdict."""
    diffs = [system[m] - base[m] for system, base in pairs]
    found.compare(where, f"{m}_delta", row.get(f"{m}_delta"), sum(diffs) / len(diffs))
    seed_interval = mean_interval(diffs)[1:] if len(diffs) > 1 else (None, None)
    for bound, value in zip(("low", "high"), seed_interval, strict=True):
        column = f"{m}_delta_seed_ci95_{bound}"
        found.compare(where, column, row.get(column), value)
    if not computable(m, pairs):
        found.skip(f"{m} bootstrap intervals (no per-input figures)")
        return
    boot = bootstrap_interval(m, pairs)
    found.compare(where, f"{m}_delta_ci95_low", row.get(f"{m}_delta_ci95_low"), boot[0])
    found.compare(where, f"{m}_delta_ci95_high", row.get(f"{m}_delta_ci95_high"), boot[1])
    intervals = [boot] + ([seed_interval] if seed_interval[0] is not None else [])
    found.compare(where, f"{m}_decided", row.get(f"{m}_decided"), decided_by(intervals))


def _input_keys(cell: Mapping[str, Any], references: list) -> list[str]:
    """Each input's key as ``extractive.jsonl`` stores it: its text and references, hashed."""
    return [
        hashlib.sha256(json.dumps([text, refs]).encode("utf-8")).hexdigest()[:16]
        for text, refs in zip(cell["inputs"], references, strict=True)
    ]


def _check_extractive(folder: Path, cells: ScoredCells) -> None:
    """``extractive.csv``: each reference point's outputs (``extractive.jsonl.gz``) scored here
    against full's references (the stored input keys must be full's), full - point over full's
    seeds, and full's own row."""
    found = cells.found
    rows = csv_rows(folder / "extractive.csv")
    points: dict[tuple, list[dict[str, Any]]] = {}
    for r in read_jsonl(plain_or_gzipped(folder / "extractive.jsonl")):
        points.setdefault((r["dataset"], r["model"], r["system"]), []).append(r)
    for row in rows:
        where = f"{folder.name}/extractive.csv {row['system']}"
        fulls = [
            c
            for c in cells.of(folder)
            if (c["method"], c["dataset"], c["model"]) == ("full", row["dataset"], row["model"])
        ]
        if row["system"] == "full" or not fulls:
            _check_means(row, fulls, found, where)
            continue
        stored = sorted(
            points.get((row["dataset"], row["model"], row["system"]), []),
            key=lambda r: int(r["index"]),
        )
        path, settings = generations_of(folder, fulls[0])
        refs = [r["references"] for r in read_generations(path)]
        if [r.get("input_sha256") for r in stored] != _input_keys(fulls[0], refs):
            found.differences.append(f"{where}: its kept outputs are not for full's inputs")
            continue
        point = score_rows(
            [{**r, "references": x} for r, x in zip(stored, refs, strict=True)], settings
        )
        values = {k: sum(v) / len(v) for k, v in point["per_input"].items()}
        values.update({"bleu": point["bleu"]} if "bleu" in point else {})
        metrics = [m for m in values if f"{m}_delta" in row]
        for m in metrics:
            found.compare(where, m, row.get(m), values[m])
        baseline = [{**point, **values, "seed": c["seed"], "inputs": c["inputs"]} for c in fulls]
        _check_deltas(row, fulls, baseline, metrics, found, where)


def _baseline(folder: Path, kind: str, rows: list[dict[str, str]], cells: ScoredCells) -> Any:
    """A function from a page row to the cells its differences are taken against: full of the
    same dataset and model, evaluated after as many fine-tuning steps (``summaries.csv``), or
    the per-schedule folder's cells of the schedule the row names (a one-model page; that folder
    beside this one)."""
    if kind == "summaries.csv":
        same = ("dataset", "model", "train_steps")
        return lambda row: [
            c
            for c in cells.of(folder)
            if row.get("method") != "full"
            and c["method"] == "full"
            and all((c.get(k) or "") == (row.get(k) or "") for k in same)
        ]
    return lambda row: [
        c
        for c in cells.of(folder.parent / Path(row["against"]).name, {row["per_schedule"]})
        if (c["dataset"], c["model"]) == (row["dataset"], row["model"])
    ]


def _key(kind: str, cell: Mapping[str, Any]) -> tuple:
    return tuple(cell.get(k) or "" for k in _PAGES[kind])


def _check_page(folder: Path, page: str, cells: ScoredCells) -> None:
    """One page's rows against the cells, and no group of cells without its row."""
    found, kind = cells.found, "summaries.csv" if page == "summaries.csv" else "one_model.csv"
    rows = csv_rows(folder / page)
    if not rows:
        found.differences.append(f"{folder.name}/{page}: no rows")
        return
    baseline_of = _baseline(folder, kind, rows, cells)
    for row in rows:
        mine = [c for c in cells.of(folder) if _key(kind, c) == _key(kind, row)]
        where = f"{folder.name}/{page} {row.get('schedule')} ({row.get('method')})"
        baseline = baseline_of(row)
        if not mine or (kind == "one_model.csv" and not baseline):
            found.differences.append(f"{where}: a row without cells to compute it from")
            continue
        if kind == "one_model.csv":
            _check_means(row, baseline, found, where, "per_schedule_")
        _check_row(row, mine, baseline, found, where)
    shown = {_key(kind, r) for r in rows}
    for cell in cells.of(folder):
        compared = kind == "summaries.csv" or _same_schedule_cells(folder, rows, cell, cells)
        if compared and _key(kind, cell) not in shown:
            found.differences.append(
                f"{folder.name}/{page}: no row for the cells of {_key(kind, cell)}"
            )
            shown.add(_key(kind, cell))


def _same_schedule_cells(
    folder: Path, rows: list, cell: Mapping[str, Any], cells: ScoredCells
) -> bool:
    """Whether the page's per-schedule folder has cells of ``cell``'s schedule (so the page
    owes it a row)."""
    against = folder.parent / Path(rows[0]["against"]).name
    return any(
        (c["dataset"], c["model"]) == (cell["dataset"], cell["model"])
        for c in cells.of(against, {cell["schedule"]})
    )


def check_summaries(results: Path) -> Findings:
    """Every ``summaries.csv``, one-model page (``one_model*.csv``) and ``extractive.csv``
    under ``results``."""
    cells = ScoredCells(Findings("summary pages from generations"))
    pages = [*results.glob("*/summaries.csv"), *results.glob("*/one_model*.csv")]
    for path in sorted(pages):
        _check_page(path.parent, path.name, cells)
    for path in sorted(results.glob("*/extractive.csv")):
        _check_extractive(path.parent, cells)
    return cells.found
