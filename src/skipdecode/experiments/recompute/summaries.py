"""``summaries.csv``, ``one_model.csv`` and ``extractive.csv`` recomputed from the cells'
generations, with arithmetic of its own.

Per cell (a finished row of the folder's ``cells.csv`` and its ``generations.jsonl``): ROUGE-1,
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

import numpy as np

from ...io import plain_or_gzipped, read_jsonl
from ..sweeps.sources import read_generations
from .bleu import bleu_from_statistics, bleu_of_rows, bleu_statistics, implemented
from .findings import Findings, csv_rows
from .rouge import rouge_l_best, rouge_scores
from .tables import mean_interval, mean_interval_every

__all__ = ["check_summaries"]

_ROUGE = tuple(f"{t}_{c}" for c in ("max", "mean") for t in ("rouge1", "rouge2", "rougeL"))
_SPEEDS = ("measured_speedup_decode", "measured_speedup_e2e")
#: Each page, and the columns that name the cells of one of its rows.
_PAGES = {
    "summaries.csv": ("dataset", "model", "schedule", "method", "target_speedup", "train_steps"),
    "one_model.csv": ("dataset", "model", "schedule"),
}


def _scored_once(
    generations: Path, settings: Mapping[str, Any], conventions: bool = True
) -> dict[str, Any]:
    """:func:`_scored` of a generations file, once per content and settings (a copied folder's
    outputs are not scored again; a file scored in SciTLDR's conventions serves either ask)."""
    digest = hashlib.sha256(generations.read_bytes()).hexdigest()
    key = (digest, json.dumps(settings, sort_keys=True, default=str))
    if (*key, True) in _SCORED:
        return _SCORED[(*key, True)]
    if (*key, conventions) not in _SCORED:
        rows = read_generations(generations)
        _SCORED[(*key, conventions)] = _scored(rows, settings, conventions)
    return _SCORED[(*key, conventions)]


_SCORED: dict[tuple[str, str, bool], dict[str, Any]] = {}


def _scored(
    rows: list[dict[str, Any]], settings: Mapping[str, Any], conventions: bool = True
) -> dict[str, Any]:
    """Inputs and per-input scores: ROUGE-L's per-type max and, with ``conventions``, every
    ROUGE key of SciTLDR's two (stemmed as ``settings["rouge"]`` says), BERTScore F1 where
    every row keeps it, and BLEU's statistics and corpus score where ``settings["bleu"]`` are
    settings :mod:`.bleu` implements."""
    stemmer = bool((settings.get("rouge") or {}).get("use_stemmer", True))
    score = rouge_scores if conventions else rouge_l_best
    scores = [score(str(r["output"]), [str(x) for x in r["references"]], stemmer) for r in rows]
    per_input = {k: [s[k] for s in scores] for k in (scores[0] if scores else ())}
    if rows and all("bertscore_f1" in (r.get("scores") or {}) for r in rows):
        per_input["bertscore_f1"] = [float(r["scores"]["bertscore_f1"]) for r in rows]
    out = {"inputs": [r.get("input") for r in rows], "per_input": per_input}
    bleu = settings.get("bleu")
    if rows and bleu is not None and implemented(bleu):
        outputs, references = [str(r["output"]) for r in rows], [r["references"] for r in rows]
        stats = bleu_statistics(outputs, references, bool(bleu.get("lowercase")))
        out.update(bleu_stats=stats, bleu=bleu_from_statistics(stats.sum(0)))
    return out


def _generations(folder: Path, cell: Mapping[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """A cell's generations file and its record's ROUGE and BLEU settings; None without a
    readable record."""
    path = folder / cell["job"] / "record.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text("utf-8"))
    name = (record.get("files") or {}).get("generations", "generations.jsonl")
    settings = {}
    for metric in ("rouge", "bleu"):
        given = (record.get("quality") or {}).get(metric)
        settings[metric] = given.get("settings") if isinstance(given, dict) else None
    return plain_or_gzipped(folder / cell["job"] / name), settings


class _Cells:
    """The finished cells of results folders with their scores: each folder's ``cells.csv`` is
    read, and each cell scored, once per check (so each cell's BLEU is compared once)."""

    def __init__(self, found: Findings, conventions: bool = True) -> None:
        """``conventions``: score ROUGE in SciTLDR's conventions too (else ROUGE-L's per-type
        max only)."""
        self.found, self.rows, self.read, self.conventions = found, {}, {}, conventions

    def of(self, folder: Path, schedules: set[str] | None = None) -> list[dict[str, Any]]:
        """``folder``'s finished cells (of ``schedules`` only, where given)."""
        if folder.resolve() not in self.rows:
            ok = [r for r in csv_rows(folder / "cells.csv") if r.get("status") == "ok"]
            self.rows[folder.resolve()] = ok
        out = []
        for row in self.rows[folder.resolve()]:
            if schedules is not None and row["schedule"] not in schedules:
                continue
            key = (folder.resolve(), row["job"])
            if key not in self.read:
                self.read[key] = self._cell(folder, row)
            if self.read[key] is not None:
                out.append(self.read[key])
        return out

    def _cell(self, folder: Path, row: dict[str, str]) -> dict[str, Any] | None:
        """One cell: its row, scores and figures; None (counted) without readable outputs, as
        the writer leaves such a cell out. BLEU is counted from the outputs where
        :mod:`.bleu` implements the record's settings (and compared with ``cells.csv``)."""
        found = _generations(folder, row)
        if found is None or not found[0].is_file():
            self.found.skip("cells without a record or generations (left out, as by the writer)")
            return None
        scored = _scored_once(*found, self.conventions)
        values: dict[str, Any] = {k: sum(v) / len(v) for k, v in scored["per_input"].items() if v}
        for k in ("bleu", "bertscore_f1", *_SPEEDS):
            if k not in values:
                values[k] = float(row[k]) if row.get(k) not in (None, "") else None
        if "bleu" in scored:
            where = f"{folder.name}/cells.csv job {row['job']}"
            self.found.compare(where, "bleu (from its outputs)", row.get("bleu"), scored["bleu"])
        else:
            self.found.skip("cells whose BLEU settings the audit does not count (cells.csv's)")
        return {**row, **values, **scored}


def _bootstrap(seeds: int, n: int, per_seed: Any) -> tuple[float, float]:
    """The two-level paired bootstrap's 2.5th and 97.5th percentiles (module doc):
    ``per_seed(s, draws)`` gives seed s's differences on each draw's inputs."""
    rng = np.random.default_rng(12345)
    draws = rng.integers(0, n, size=(1000, n))
    if seeds > 1:
        picked = rng.integers(0, seeds, size=(1000, seeds))
        weights = np.stack([np.bincount(p, minlength=seeds) for p in picked]).astype(float)
    else:
        weights = np.ones((1000, 1))
    weights /= weights.sum(1, keepdims=True)
    drawn = (np.stack([per_seed(s, draws) for s in range(seeds)], 1) * weights).sum(1)
    low, high = np.percentile(drawn, [2.5, 97.5])
    return float(low), float(high)


def _interval(m: str, pairs: list) -> tuple[float, float]:
    """The bootstrap of ``m``: per-input differences averaged over each draw's inputs, or (BLEU)
    corpus BLEU recomputed from each draw's summed statistics on both sides."""
    if m == "bleu":
        stats = [(s["bleu_stats"], b["bleu_stats"]) for s, b in pairs]

        times: list[np.ndarray] = []  # how often each draw picks each input (integer counts)

        def per_seed(k: int, draws: np.ndarray) -> np.ndarray:
            if not times:
                times.append(np.stack([np.bincount(d, minlength=draws.shape[1]) for d in draws]))
            system, base = (times[0] @ x for x in stats[k])  # each draw's summed statistics
            return bleu_of_rows(system) - bleu_of_rows(base)
    else:
        diffs = np.array([np.subtract(s["per_input"][m], b["per_input"][m]) for s, b in pairs])

        def per_seed(k: int, draws: np.ndarray) -> np.ndarray:
            return diffs[k][draws].mean(1)

    return _bootstrap(len(pairs), len(pairs[0][0]["inputs"]), per_seed)


def _decided(intervals: list[tuple[float, float]]) -> str:
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
    metrics = [m for m in (*_ROUGE, "bleu", "bertscore_f1") if f"{prefix}{m}_ci95_low" in row]
    seeds = " ".join(sorted(c["seed"] for c in cells))
    found.compare(where, f"{prefix}seeds", row.get(f"{prefix}seeds"), seeds)
    for m in (*metrics, *(s for s in _SPEEDS if f"{prefix}{s}" in row)):
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


def _check_deltas(
    row, cells: list, baseline: list, metrics: list, found: Findings, where: str,
    verdicts: bool = True,
):  # fmt: skip
    """``cells`` - ``baseline`` of the same seed and inputs, for each of ``metrics`` (with what
    the intervals decide where the page prints ``verdicts``)."""
    by_seed = {c["seed"]: c for c in baseline}
    matched = [
        c for c in cells if c["seed"] in by_seed and c["inputs"] == by_seed[c["seed"]]["inputs"]
    ]
    if not matched:  # nothing to pair: the row must show no difference
        for column in [c for c in row if c == "delta_seeds" or "_delta" in c or "_decided" in c]:
            found.compare(where, column, row.get(column), None)
        return
    if "delta_seeds" in row:
        seeds = " ".join(sorted(c["seed"] for c in matched))
        found.compare(where, "delta_seeds", row.get("delta_seeds"), seeds)
    for m in metrics:
        pairs = [(c, by_seed[c["seed"]]) for c in matched]
        if f"{m}_delta" in row and all(x.get(m) is not None for pair in pairs for x in pair):
            _check_delta(row, m, pairs, found, where, verdicts)


def _check_delta(row, m: str, pairs: list, found: Findings, where: str, verdicts: bool) -> None:
    """One metric's difference: its point, the per-seed t-interval, the bootstrap, the verdict."""
    diffs = [system[m] - base[m] for system, base in pairs]
    found.compare(where, f"{m}_delta", row.get(f"{m}_delta"), sum(diffs) / len(diffs))
    seed_interval = mean_interval(diffs)[1:] if len(diffs) > 1 else (None, None)
    for bound, value in zip(("low", "high"), seed_interval, strict=True):
        column = f"{m}_delta_seed_ci95_{bound}"
        found.compare(where, column, row.get(column), value)
    if not all(
        m in s["per_input"] or (m == "bleu" and "bleu_stats" in s) for p in pairs for s in p
    ):
        found.skip(f"{m} bootstrap intervals (no per-input figures)")
        return
    boot = _interval(m, pairs)
    found.compare(where, f"{m}_delta_ci95_low", row.get(f"{m}_delta_ci95_low"), boot[0])
    found.compare(where, f"{m}_delta_ci95_high", row.get(f"{m}_delta_ci95_high"), boot[1])
    if verdicts:
        intervals = [boot] + ([seed_interval] if seed_interval[0] is not None else [])
        found.compare(where, f"{m}_decided", row.get(f"{m}_decided"), _decided(intervals))


def _input_keys(cell: Mapping[str, Any], references: list) -> list[str]:
    """Each input's key as ``extractive.jsonl`` stores it: its text and references, hashed."""
    return [
        hashlib.sha256(json.dumps([text, refs]).encode("utf-8")).hexdigest()[:16]
        for text, refs in zip(cell["inputs"], references, strict=True)
    ]


def _check_extractive(folder: Path, cells: _Cells) -> None:
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
        path, settings = _generations(folder, fulls[0])
        refs = [r["references"] for r in read_generations(path)]
        if [r.get("input_sha256") for r in stored] != _input_keys(fulls[0], refs):
            found.differences.append(f"{where}: its kept outputs are not for full's inputs")
            continue
        point = _scored(
            [{**r, "references": x} for r, x in zip(stored, refs, strict=True)], settings
        )
        values = {k: sum(v) / len(v) for k, v in point["per_input"].items()}
        values.update({"bleu": point["bleu"]} if "bleu" in point else {})
        metrics = [m for m in values if f"{m}_delta" in row]
        for m in metrics:
            found.compare(where, m, row.get(m), values[m])
        baseline = [{**point, **values, "seed": c["seed"], "inputs": c["inputs"]} for c in fulls]
        _check_deltas(row, fulls, baseline, metrics, found, where)


def _baseline(folder: Path, kind: str, rows: list[dict[str, str]], cells: _Cells) -> Any:
    """A function from a page row to the cells its differences are taken against: full of the
    same dataset and model (``summaries.csv``), or the per-schedule folder's cells of the
    schedule the row names (a one-model page; that folder beside this one)."""
    if kind == "summaries.csv":
        return lambda row: [
            c
            for c in cells.of(folder)
            if row.get("method") != "full"
            and (c["method"], c["dataset"], c["model"]) == ("full", row["dataset"], row["model"])
        ]
    return lambda row: [
        c
        for c in cells.of(folder.parent / Path(row["against"]).name, {row["per_schedule"]})
        if (c["dataset"], c["model"]) == (row["dataset"], row["model"])
    ]


def _key(kind: str, cell: Mapping[str, Any]) -> tuple:
    return tuple(cell.get(k) or "" for k in _PAGES[kind])


def _check_page(folder: Path, page: str, cells: _Cells) -> None:
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


def _same_schedule_cells(folder: Path, rows: list, cell: Mapping[str, Any], cells: _Cells) -> bool:
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
    cells = _Cells(Findings("summary pages from generations"))
    pages = [*results.glob("*/summaries.csv"), *results.glob("*/one_model*.csv")]
    for path in sorted(pages):
        _check_page(path.parent, path.name, cells)
    for path in sorted(results.glob("*/extractive.csv")):
        _check_extractive(path.parent, cells)
    return cells.found
