"""A results folder's tables recomputed from its records, with arithmetic of its own.

``cells.csv``: each finished cell's quality and speed columns are its record's summary figures
(``<job>/record.json``), its measured speedups those of :func:`.speeds.published`, its training
seconds its ``cell.json``'s and its evaluation seconds its record's ``timing_s`` summed; and
``cells.md``'s line of the folder's hours from those files.
``results.csv``: each row's seed count, the mean over its finished cells of every quality and
speed column (a speed's only where every cell has it), and the 95% t-interval of each quality
mean (``mean +- t(0.975, n - 1) x sd / sqrt(n)``, the quantiles below), from ``cells.csv``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..sweeps.table import num
from .findings import Findings, csv_rows
from .speeds import published

__all__ = [
    "check_tables", "mean_interval", "mean_interval_every", "median", "quantile", "T975",
]  # fmt: skip

#: The 0.975 quantile of Student's t by degrees of freedom (enough for up to 11 seeds).
T975 = {
    1: 12.706204736174707, 2: 4.302652729749464, 3: 3.182446305284263, 4: 2.7764451051977934,
    5: 2.570581835636314, 6: 2.4469118511449692, 7: 2.3646242515927844, 8: 2.306004135204168,
    9: 2.2621571628540993, 10: 2.2281388519649385,
}  # fmt: skip
#: (cells.csv column, the record's summary key).
CELL_COLUMNS = (
    ("bleu", "bleu"),
    ("rougeL", "rougeL"),
    ("bertscore_f1", "bertscore_f1"),
    ("theoretical_speedup", "theoretical_speedup"),
    ("batch_speedup", "batch_speedup"),
    ("measured_speedup_decode", "measured_speedup_decode"),
    ("measured_speedup_e2e", "measured_speedup_e2e"),
)
QUALITY = ("bleu", "rougeL", "bertscore_f1")
MEANS = ("theoretical_speedup", "batch_speedup", "measured_speedup_decode", "measured_speedup_e2e")
# the training step a row was evaluated at (sweep.eval_step) is part of what it is
GROUP = ("dataset", "model", "schedule", "method", "target_speedup", "train_steps")


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linear between the order statistics."""
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: list[float]) -> float:
    """The middle value (the mean of the middle two of an even count)."""
    return quantile(sorted(values), 0.5)


def mean_interval(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high): the mean and its 95% t-interval (:data:`T975`); no interval below 2."""
    if not values:
        return None, None, None
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T975[n - 1] * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def mean_interval_every(values: list[float | None]) -> tuple[float | None, ...]:
    """:func:`mean_interval` where every value is there, else nothing: a speed's mean over some
    of a row's seeds would be printed beside all of their labels."""
    if not values or None in values:
        return None, None, None
    return mean_interval([v for v in values if v is not None])


def _time_line(trainings: dict[str, float], evaluations: list[float]) -> str | None:
    """The line ``cells.md`` must end its table with, from the seconds of each training once
    (``cell.json``'s ``train_seconds`` by its ``cell_id``) and of each evaluation (its record's
    ``timing_s``, summed), in minutes under two hours; None where the files hold no time."""
    train = [t for t in trainings.values() if t]
    evaluations = [e for e in evaluations if e]
    if not train and not evaluations:
        return None
    hours = max(sum(train), sum(evaluations)) / 3600
    unit, scale, digits = ("min", 60, 0) if hours < 2 else ("h", 3600, 1)
    shown = [f"{sum(s) / scale:.{digits}f} {unit}" for s in (train, evaluations)]
    words = [f"{len(s)} {name}{'' if len(s) == 1 else 's'}" for s, name in
             ((train, "training"), (evaluations, "evaluation"))]  # fmt: skip
    return f"Its {words[0]} took {shown[0]} and its {words[1]} {shown[1]}."


def _check_cells(folder: Path, cells: list[dict[str, str]], found: Findings) -> None:
    trainings: dict[str, float] = {}  # each training's seconds once, by cell id
    evaluations: list[float] = []
    for cell in cells:
        where = f"{folder.name}/cells.csv job {cell['job']}"
        kept = folder / cell["job"] / "cell.json"
        held = json.loads(kept.read_text(encoding="utf-8")) if kept.is_file() else {}
        trainings[held.get("cell_id") or cell["job"]] = held.get("train_seconds") or 0.0
        if kept.is_file():
            found.compare(
                where, "train_seconds", cell.get("train_seconds"), held.get("train_seconds")
            )
        if cell.get("status") != "ok":
            continue
        path = folder / cell["job"] / "record.json"
        if not path.is_file():
            found.skip("cells whose record is not in the folder")
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        timing = sum((record.get("timing_s") or {}).values()) or None
        evaluations.append(timing or 0.0)
        found.compare(where, "eval_seconds", cell.get("eval_seconds"), timing)
        summary = {**(record.get("summary") or {}), **published(record)}
        for column, key in CELL_COLUMNS:
            if key in summary:
                found.compare(where, column, cell.get(column), summary[key])
    page = folder / "cells.md"
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    printed = " / ".join(t for t in text.splitlines() if t.startswith("Its "))
    found.compare(
        f"{folder.name}/cells.md",
        "its time line",
        printed,
        _time_line(trainings, evaluations) or "",
    )


def _check_results(folder: Path, cells: list[dict[str, str]], found: Findings) -> None:
    groups: dict[tuple, list[dict[str, str]]] = {}
    for cell in cells:
        if cell.get("status") == "ok":
            groups.setdefault(tuple(cell.get(k) or "" for k in GROUP), []).append(cell)
    for row in csv_rows(folder / "results.csv"):
        members = groups.get(tuple(row.get(k) or "" for k in GROUP), [])
        where = f"{folder.name}/results.csv {row.get('schedule')} ({row.get('method')})"
        found.compare(where, "n_seeds", row.get("n_seeds"), len(members))
        for metric in QUALITY:
            values = [x for x in (num(c.get(metric)) for c in members) if x is not None]
            mean, low, high = mean_interval(values)
            for suffix, value in (("_mean", mean), ("_ci95_low", low), ("_ci95_high", high)):
                found.compare(where, metric + suffix, row.get(metric + suffix), value)
        for key in MEANS:
            mean = mean_interval_every([num(c.get(key)) for c in members])[0]
            found.compare(where, key, row.get(key), mean)


def check_tables(results: Path) -> Findings:
    """Every results folder with ``cells.csv`` and ``results.csv`` under ``results``."""
    found = Findings("tables from records")
    for folder in sorted(p.parent for p in results.glob("*/cells.csv")):
        if not (folder / "results.csv").is_file():
            found.skip("folders with cells.csv but no results.csv")
            continue
        cells = csv_rows(folder / "cells.csv")
        _check_cells(folder, cells, found)
        _check_results(folder, cells, found)
    return found
