"""The cells of results folders scored here (the audit's own arithmetic), and the paired
bootstrap of their differences, for the checks that recompute pages from generations
(:mod:`.summaries`, :mod:`.deltas`).

Per cell (a finished row of its folder's ``cells.csv``, its record's ROUGE and BLEU settings and
its ``generations.jsonl``): ROUGE per input (:mod:`.rouge`; ROUGE-L's per-type max, and with
SciTLDR's conventions every ROUGE key of both), BERTScore F1 per input where the generations keep
it, and BLEU's per-input statistics and corpus score where :mod:`.bleu` implements the record's
settings. The bootstrap: 1,000 draws from numpy's generator seeded 12345, inputs drawn for every
seed at once, then the seeds; a per-input metric averaged over each draw's inputs, BLEU
recomputed from each draw's summed statistics (METRICS.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...io import plain_or_gzipped
from ..sweeps.sources import read_generations
from .bleu import bleu_from_statistics, bleu_of_rows, bleu_statistics, implemented
from .findings import Findings, csv_rows
from .rouge import rouge_l_best, rouge_scores

__all__ = [
    "ROUGE", "SPEEDS", "ScoredCells", "bootstrap", "bootstrap_interval", "check_unpaired",
    "computable", "generations_of", "paired", "score_once", "score_rows",
]  # fmt: skip

ROUGE = tuple(f"{t}_{c}" for c in ("max", "mean") for t in ("rouge1", "rouge2", "rougeL"))
SPEEDS = ("measured_speedup_decode", "measured_speedup_e2e")


def score_once(
    generations: Path, settings: Mapping[str, Any], conventions: bool = True
) -> dict[str, Any]:
    """:func:`score_rows` of a generations file, once per content and settings (a copied folder's
    outputs are not scored again; a file scored in SciTLDR's conventions serves either ask)."""
    digest = hashlib.sha256(generations.read_bytes()).hexdigest()
    key = (digest, json.dumps(settings, sort_keys=True, default=str))
    if (*key, True) in _SCORES:
        return _SCORES[(*key, True)]
    if (*key, conventions) not in _SCORES:
        rows = read_generations(generations)
        _SCORES[(*key, conventions)] = score_rows(rows, settings, conventions)
    return _SCORES[(*key, conventions)]


_SCORES: dict[tuple[str, str, bool], dict[str, Any]] = {}


def score_rows(
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


def generations_of(folder: Path, cell: Mapping[str, Any]) -> tuple[Path, dict[str, Any]] | None:
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


class ScoredCells:
    """The finished cells of results folders with their scores: each folder's ``cells.csv`` is
    read, and each cell scored, once per check (so each cell's BLEU is compared once)."""

    def __init__(self, found: Findings, conventions: bool = True) -> None:
        """``conventions``: score ROUGE in SciTLDR's conventions too (else ROUGE-L's per-type
        max only)."""
        self.found, self.rows, self.read, self.conventions = found, {}, {}, conventions

    def published(self, folder: Path) -> list[dict[str, str]]:
        """``folder``'s finished ``cells.csv`` rows as the file prints them (read once)."""
        if folder.resolve() not in self.rows:
            ok = [r for r in csv_rows(folder / "cells.csv") if r.get("status") == "ok"]
            self.rows[folder.resolve()] = ok
        return self.rows[folder.resolve()]

    def of(self, folder: Path, schedules: set[str] | None = None) -> list[dict[str, Any]]:
        """``folder``'s finished cells (of ``schedules`` only, where given)."""
        out = []
        for row in self.published(folder):
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
        found = generations_of(folder, row)
        if found is None or not found[0].is_file():
            self.found.skip("cells without a record or generations (left out, as by the writer)")
            return None
        scored = score_once(*found, self.conventions)
        values: dict[str, Any] = {k: sum(v) / len(v) for k, v in scored["per_input"].items() if v}
        for k in ("bleu", "bertscore_f1", *SPEEDS):
            if k not in values:
                values[k] = float(row[k]) if row.get(k) not in (None, "") else None
        if "bleu" in scored:
            where = f"{folder.name}/cells.csv job {row['job']}"
            self.found.compare(where, "bleu (from its outputs)", row.get("bleu"), scored["bleu"])
        else:
            self.found.skip("cells whose BLEU settings the audit does not count (cells.csv's)")
        return {**row, **values, **scored}


def bootstrap(seeds: int, n: int, per_seed: Any) -> tuple[float, float]:
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


def paired(cells: list, baseline: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """Each of ``cells`` with ``baseline``'s cell of its seed (``baseline``: seed -> cell) where
    both were scored on the same inputs: what a difference is taken over."""
    return [
        (c, baseline[c["seed"]])
        for c in cells
        if c["seed"] in baseline and c["inputs"] == baseline[c["seed"]]["inputs"]
    ]


def check_unpaired(row: Mapping[str, str], found: Findings, where: str) -> None:
    """A row with nothing to pair shows no difference: every ``delta_seeds``, ``*_delta*`` and
    ``*_decided`` column is empty."""
    for column in [c for c in row if c == "delta_seeds" or "_delta" in c or "_decided" in c]:
        found.compare(where, column, row.get(column), None)


def computable(m: str, pairs: list) -> bool:
    """Whether every cell of ``pairs`` has what :func:`bootstrap_interval` draws for ``m``: its
    per-input scores, or (BLEU) its per-input statistics."""
    return all(m in x["per_input"] or (m == "bleu" and "bleu_stats" in x) for p in pairs for x in p)


def bootstrap_interval(m: str, pairs: list) -> tuple[float, float]:
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

    return bootstrap(len(pairs), len(pairs[0][0]["inputs"]), per_seed)
