"""Every results table's differences from full (``results.csv``) recomputed from the cells'
generations, and every results page (``results.md``) against its table at the printed digits.

Per cell (a finished row of the folder's ``cells.csv`` and its generations): ROUGE-L's per-type
max of each input (the best ROUGE-L F over its references, counted by :mod:`.rouge`), whose mean
over inputs must be the ``cells.csv`` figure; BLEU counted from the outputs where :mod:`.bleu`
implements the record's settings (:mod:`.summaries` compares it with ``cells.csv``); BERTScore F1
per input as the generations keep it. Per ``results.csv`` row of a method other than full,
against full of the same dataset, model and training steps over the seeds both have
(``delta_seeds``): the difference as the mean of the per-seed differences, the t-interval over
them, and the two-level paired bootstrap (:mod:`.scored`: 1,000 draws from numpy's generator
seeded 12345; BLEU recomputed from each draw's summed statistics). A full row, or a row with no
full to pair with, shows no difference.

``results.md``: each row (by dataset, model, schedule, method and steps) prints its
``results.csv`` row: labels as they are, every number at the digits the page prints it (a
quality cell its mean and t-interval, a difference its point and interval), every row once.
``results.csv``'s means over seeds are checked against ``cells.csv`` by :mod:`.tables`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweeps.excerpts import page_tables
from ..sweeps.table import num
from .findings import Findings, check_rows, csv_rows
from .scored import ScoredCells, bootstrap_interval, check_unpaired, computable, paired
from .tables import mean_interval

__all__ = ["check_deltas"]

_METRICS = ("bleu", "rougeL", "bertscore_f1")
#: How close a cell's published BERTScore is to the mean of its per-input scores: the evaluation
#: averages them in float32, the audit in float64.
FLOAT32 = 1e-6
_GROUP = ("dataset", "model", "schedule", "method", "target_speedup", "train_steps")
_LABELS = ("dataset", "model", "schedule", "method", "train_steps")
#: results.md's columns (their labels) and how each prints its results.csv row: a label as it
#: is, a number, a mean with its interval (``mean``), a difference with one (``delta``,
#: ``seed``).
_PAGE = {
    "status": ("status", "text"), "dataset": ("dataset", "text"), "model": ("model", "text"),
    "schedule": ("schedule", "text"), "steps": ("train_steps", "text"),
    "method": ("method", "text"), "seeds": ("n_seeds", "number"),
    "theor. speedup": ("theoretical_speedup", "number"),
    "batch speedup": ("batch_speedup", "number"),
    "measured (decode)": ("measured_speedup_decode", "number"),
    "measured (e2e)": ("measured_speedup_e2e", "number"),
    "BLEU [95% CI]": ("bleu", "mean"),
    "ΔBLEU vs full [seeds x inputs CI]": ("bleu", "delta"),
    "ΔBLEU [per-seed t CI]": ("bleu", "seed"),
    "paired seeds": ("delta_seeds", "text"),
    "ROUGE-L per-type max [95% CI]": ("rougeL", "mean"),
    "ΔROUGE-L per-type max [seeds x inputs CI]": ("rougeL", "delta"),
    "BERT-F [95% CI]": ("bertscore_f1", "mean"),
    "ΔBERT-F [seeds x inputs CI]": ("bertscore_f1", "delta"),
    "ΔBERT-F [per-seed t CI]": ("bertscore_f1", "seed"),
    "len ratio": ("length_ratio", "number"), "BP": ("bleu_bp", "number"),
    "BLEU w/o BP": ("bleu_no_bp", "number"), "distinct": ("distinct_outputs", "number"),
    "capped": ("capped_share", "number"), "rep. 4-grams": ("repeat_4gram", "number"),
    "accept": ("acceptance_rate", "number"), "error": ("error", "text"),
}  # fmt: skip
_FIELDS = {
    "mean": ("_mean", "_ci95_low", "_ci95_high"),
    "delta": ("_delta", "_delta_ci95_low", "_delta_ci95_high"),
    "seed": ("_delta", "_delta_seed_ci95_low", "_delta_seed_ci95_high"),
}


def _key(row: dict[str, Any], names: tuple[str, ...] = _GROUP) -> tuple[str, ...]:
    return tuple(str(row.get(k) or "") for k in names)


def _check_cells(folder: Path, cells: ScoredCells) -> dict[str, dict[str, str]]:
    """Each finished cell's ROUGE-L and BERTScore (``cells.csv``) against its outputs; returns
    the published rows by job."""
    published = {r["job"]: r for r in cells.published(folder)}
    for cell in cells.of(folder):
        where, shown = f"{folder.name}/cells.csv job {cell['job']}", published[cell["job"]]
        cells.found.compare(where, "rougeL (from its outputs)", shown.get("rougeL"), cell["rougeL"])
        if "bertscore_f1" in cell["per_input"]:
            cells.found.compare(
                where, "bertscore_f1 (mean of its per-input scores)", shown.get("bertscore_f1"),
                cell["bertscore_f1"], FLOAT32,
            )  # fmt: skip
    return published


def _check_metric(row, m: str, pairs: list, published: dict, found: Findings, where: str) -> None:
    """One metric's difference: the point and the bootstrap from the outputs, the t-interval over
    the per-seed differences of the published cell figures."""
    figures = [[num(published[x["job"]].get(m)) for x in p] for p in pairs]
    diffs = [a - b for a, b in figures if a is not None and b is not None]
    seed = mean_interval(diffs)[1:] if len(diffs) > 1 else (None, None)
    for bound, value in zip(("low", "high"), seed, strict=True):
        found.compare(
            where, f"{m}_delta_seed_ci95_{bound}", row.get(f"{m}_delta_seed_ci95_{bound}"), value
        )
    point: tuple[float | None, ...] = (None, None, None)
    if computable(m, pairs):
        point = (sum(s[m] - b[m] for s, b in pairs) / len(pairs), *bootstrap_interval(m, pairs))
    elif m == "bleu":
        found.skip("bleu differences of cells whose BLEU settings the audit does not count")
        return
    for suffix, value in zip(("", "_ci95_low", "_ci95_high"), point, strict=True):
        found.compare(where, f"{m}_delta{suffix}", row.get(f"{m}_delta{suffix}"), value)


def _check_table(folder: Path, table: list, cells: ScoredCells, published: dict) -> None:
    """Every ``results.csv`` row's differences from full (module doc)."""
    mine, found = cells.of(folder), cells.found
    for row in table:
        if row.get("status") != "ok":
            continue
        where = f"{folder.name}/results.csv {row.get('schedule')} ({row.get('method')})"
        same = _GROUP[:2] + _GROUP[5:]  # dataset, model, training steps
        full = {
            c["seed"]: c for c in mine if c["method"] == "full" and _key(c, same) == _key(row, same)
        }
        members = [c for c in mine if _key(c) == _key(row)] if row.get("method") != "full" else []
        pairs = paired(members, full)
        if not pairs:  # nothing to pair: the row shows no difference
            check_unpaired(row, found, where)
            continue
        seeds = " ".join(sorted(c["seed"] for c, _ in pairs))
        found.compare(where, "delta_seeds", row.get("delta_seeds"), seeds)
        for m in [m for m in _METRICS if f"{m}_delta" in row]:
            _check_metric(row, m, pairs, published, found, where)


def _printed(row: dict[str, str], column: str, kind: str) -> Any:
    """What the page prints for ``column`` of ``row``: a text, or its numbers."""
    if kind == "text":
        return (row.get(column) or "").replace("|", "\\|")
    if kind == "number":
        return [num(row.get(column))]
    stem, low, high = (row.get(column + f) for f in _FIELDS[kind])
    if num(stem) is None:
        return []
    bounds = [num(low), num(high)]
    return [num(stem), *bounds] if None not in bounds else [num(stem)]


def _check_page(folder: Path, table: list, found: Findings) -> None:
    """``results.md``'s first table against ``results.csv`` (module doc)."""
    where = f"{folder.name}/results.md"
    tables = page_tables((folder / "results.md").read_text(encoding="utf-8"))
    if not tables:
        found.differences.append(f"{where}: no table")
        return
    header, rows = tables[0]
    unknown = [label for label in header if label not in _PAGE]
    if unknown:
        found.differences.append(f"{where}: columns the audit does not know: {unknown}")
        return
    expected = {}
    for row in table:
        expected[_key(row, _LABELS)] = {label: _printed(row, *_PAGE[label]) for label in header}

    def key(printed: dict[str, str]) -> tuple[str, ...]:
        labels = {"train_steps": "steps"}
        return tuple(printed.get(labels.get(k, k), "") for k in _LABELS)

    check_rows(found, where, (header, rows), expected, key)


def check_deltas(results: Path) -> Findings:
    """Every folder's ``results.csv`` differences from its generations, and its ``results.md``."""
    cells = ScoredCells(Findings("results tables' differences from generations"), conventions=False)
    for table in sorted(results.glob("*/results.csv")):
        folder = table.parent
        if not (folder / "cells.csv").is_file():
            cells.found.skip("results tables without cells.csv")
            continue
        rows = csv_rows(table)
        _check_table(folder, rows, cells, _check_cells(folder, cells))
        if (folder / "results.md").is_file():
            _check_page(folder, rows, cells.found)
    return cells.found
