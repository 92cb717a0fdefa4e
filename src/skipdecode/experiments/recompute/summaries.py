"""``summaries.csv``, ``one_model.csv`` and ``extractive.csv`` recomputed from the cells'
generations, with arithmetic of its own.

Per cell (a finished row of the folder's ``cells.csv`` and its ``generations.jsonl``): ROUGE-1,
ROUGE-2 and ROUGE-L F of every output against each of its references, counted here (clipped
n-gram matches; the longest common subsequence) over rouge-score's tokens with Porter stemming
(the tokenization the records name); per input SciTLDR's *max* (the reference with the best
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
measured speedups. ``extractive.csv``: each reference point's kept outputs
(``extractive.jsonl.gz``) scored the same way against full's references, full - point over
full's seeds with the same intervals, and full's own row.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ...io import plain_or_gzipped, read_jsonl
from .bleu import bleu_from_statistics, bleu_statistics, implemented
from .findings import Findings
from .tables import mean_interval

__all__ = ["check_summaries", "rouge_scores"]

_ROUGE = tuple(f"{t}_{c}" for c in ("max", "mean") for t in ("rouge1", "rouge2", "rougeL"))
_SPEEDS = ("measured_speedup_decode", "measured_speedup_e2e")
#: Each page, and the columns that name the cells of one of its rows.
_PAGES = {
    "summaries.csv": ("dataset", "model", "schedule", "method", "target_speedup", "train_steps"),
    "one_model.csv": ("dataset", "model", "schedule"),
}


@cache
def _tokens(text: str) -> tuple[str, ...]:
    from rouge_score.tokenizers import DefaultTokenizer

    return tuple(DefaultTokenizer(use_stemmer=True).tokenize(text))


def _f(matches: int, hypothesis: int, reference: int) -> float:
    p, r = matches / max(hypothesis, 1), matches / max(reference, 1)
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def _ngram_f(hyp: tuple[str, ...], ref: tuple[str, ...], n: int) -> float:
    h = Counter(zip(*(hyp[i:] for i in range(n)), strict=False))
    r = Counter(zip(*(ref[i:] for i in range(n)), strict=False))
    return _f(sum((h & r).values()), sum(h.values()), sum(r.values()))


def _lcs_f(hyp: tuple[str, ...], ref: tuple[str, ...]) -> float:
    if not hyp or not ref:
        return 0.0
    previous = [0] * (len(hyp) + 1)
    for token in ref:
        row = [0]
        for j, other in enumerate(hyp):
            row.append(previous[j] + 1 if token == other else max(previous[j + 1], row[j]))
        previous = row
    return _f(previous[-1], len(hyp), len(ref))


def rouge_scores(output: str, references: Sequence[str]) -> dict[str, float]:
    """One input's ROUGE-1/2/L F in SciTLDR's *max* and *mean* conventions (module doc)."""
    hyp = _tokens(output)
    per_ref = []
    for reference in references:
        ref = _tokens(reference)
        per_ref.append((_ngram_f(hyp, ref, 1), _ngram_f(hyp, ref, 2), _lcs_f(hyp, ref)))
    best = max(range(len(per_ref)), key=lambda i: (per_ref[i][0], -i))
    out = {}
    for k, name in enumerate(("rouge1", "rouge2", "rougeL")):
        out[f"{name}_max"] = per_ref[best][k]
        out[f"{name}_mean"] = sum(s[k] for s in per_ref) / len(per_ref)
    return out


def _cell(generations: Path, bleu: Mapping[str, Any] | None) -> dict[str, Any]:
    """A cell's inputs and per-input scores (every ROUGE key; BERTScore F1 where all keep it;
    BLEU's statistics where ``bleu``, the record's settings, are ones :mod:`.bleu` implements)."""
    key = (hashlib.sha256(generations.read_bytes()).hexdigest(), json.dumps(bleu, sort_keys=True))
    if key not in _SCORED:  # the same outputs (a copied folder) are scored once
        _SCORED[key] = _scored(read_jsonl(generations), bleu)
    return _SCORED[key]


_SCORED: dict[tuple[str, str], dict[str, Any]] = {}


def _scored(rows: list[dict[str, Any]], bleu: Mapping[str, Any] | None = None) -> dict[str, Any]:
    scores = [rouge_scores(str(r["output"]), [str(x) for x in r["references"]]) for r in rows]
    per_input = {k: [s[k] for s in scores] for k in _ROUGE}
    if rows and all("bertscore_f1" in (r.get("scores") or {}) for r in rows):
        per_input["bertscore_f1"] = [float(r["scores"]["bertscore_f1"]) for r in rows]
    out = {"inputs": [r.get("input") for r in rows], "per_input": per_input}
    if bleu is not None and implemented(bleu):
        outputs, references = [str(r["output"]) for r in rows], [r["references"] for r in rows]
        stats = bleu_statistics(outputs, references, bool(bleu.get("lowercase")))
        out.update(bleu_stats=stats, bleu=bleu_from_statistics(stats.sum(0)))
    return out


def _generations(folder: Path, cell: dict[str, Any]) -> tuple[Path, dict[str, Any] | None]:
    """A cell's generations file and its record's BLEU settings."""
    record = json.loads((folder / cell["job"] / "record.json").read_text("utf-8"))
    name = (record.get("files") or {}).get("generations", "generations.jsonl")
    bleu = (record.get("quality") or {}).get("bleu")
    settings = bleu.get("settings") if isinstance(bleu, dict) else None
    return plain_or_gzipped(folder / cell["job"] / name), settings


def _cells(
    folder: Path, found: Findings, schedules: set[str] | None = None
) -> list[dict[str, Any]]:
    """The folder's finished cells (``cells.csv``; of ``schedules`` only, where given) with
    their scores; a cell without readable generations is left out (the writer does too). Its
    BLEU is counted from its outputs where :mod:`.bleu` implements the record's settings (and
    compared with ``cells.csv``), else read from ``cells.csv``."""
    out = []
    with (folder / "cells.csv").open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("status") != "ok" or row["schedule"] not in (schedules or {row["schedule"]}):
                continue
            path, bleu = _generations(folder, row)
            if not path.is_file():
                continue
            scored = _cell(path, bleu)
            values = {k: sum(v) / len(v) for k, v in scored["per_input"].items() if v}
            for k in ("bleu", *_SPEEDS):
                values[k] = float(row[k]) if row.get(k) not in (None, "") else None
            if "bleu" in scored:
                where = f"{folder.name}/cells.csv job {row['job']}"
                found.compare(where, "bleu (from its outputs)", row.get("bleu"), scored["bleu"])
            out.append({**row, **values, **scored})
    return out


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

        def per_seed(k: int, draws: np.ndarray) -> np.ndarray:
            system, base = (x[draws].sum(1) for x in stats[k])
            return np.array(
                [bleu_from_statistics(a) - bleu_from_statistics(b) for a, b in zip(system, base)]
            )
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
        mean, low, high = mean_interval([c[m] for c in cells if c.get(m) is not None])
        for suffix, value in (("", mean), ("_ci95_low", low), ("_ci95_high", high)):
            found.compare(where, prefix + m + suffix, row.get(prefix + m + suffix), value)
    return metrics


def _check_row(row: dict[str, str], cells: list, baseline: list, found: Findings, where: str):
    """One page row: means over seeds, and the differences against ``baseline``'s cells."""
    _check_deltas(row, cells, baseline, _check_means(row, cells, found, where), found, where)


def _check_deltas(row, cells: list, baseline: list, metrics: list, found: Findings, where: str):
    """``cells`` - ``baseline`` of the same seed and inputs, for each of ``metrics``."""
    by_seed = {c["seed"]: c for c in baseline}
    matched = [
        c for c in cells if c["seed"] in by_seed and c["inputs"] == by_seed[c["seed"]]["inputs"]
    ]
    if not matched:
        return
    if "delta_seeds" in row:
        seeds = " ".join(sorted(c["seed"] for c in matched))
        found.compare(where, "delta_seeds", row.get("delta_seeds"), seeds)
    for m in metrics:
        if f"{m}_delta" in row:
            pairs = [(c, by_seed[c["seed"]]) for c in matched]
            _check_delta(row, m, pairs, found, where)


def _check_delta(row, m: str, pairs: list, found: Findings, where: str) -> None:
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
    intervals = [boot] + ([seed_interval] if seed_interval[0] is not None else [])
    found.compare(where, f"{m}_decided", row.get(f"{m}_decided"), _decided(intervals))


def _check_extractive(folder: Path, found: Findings) -> None:
    """``extractive.csv``: each reference point's outputs (``extractive.jsonl.gz``) scored here
    against full's references, full - point over full's seeds, and full's own row."""
    with (folder / "extractive.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    points: dict[tuple, list[dict[str, Any]]] = {}
    for r in read_jsonl(plain_or_gzipped(folder / "extractive.jsonl")):
        points.setdefault((r["dataset"], r["model"], r["system"]), []).append(r)
    cells = _cells(folder, found)
    for row in rows:
        where = f"{folder.name}/extractive.csv {row['system']}"
        fulls = [
            c
            for c in cells
            if (c["method"], c["dataset"], c["model"]) == ("full", row["dataset"], row["model"])
        ]
        if row["system"] == "full":
            _check_means(row, fulls, found, where)
            continue
        stored = sorted(
            points[(row["dataset"], row["model"], row["system"])], key=lambda r: int(r["index"])
        )
        path, bleu = _generations(folder, fulls[0])
        refs = [r["references"] for r in read_jsonl(path)]
        point = _scored([{**r, "references": x} for r, x in zip(stored, refs, strict=True)], bleu)
        values = {k: sum(v) / len(v) for k, v in point["per_input"].items()}
        values.update({"bleu": point["bleu"]} if "bleu" in point else {})
        metrics = [m for m in values if f"{m}_delta" in row]
        for m in metrics:
            found.compare(where, m, row.get(m), values[m])
        baseline = [{**point, **values, "seed": c["seed"], "inputs": c["inputs"]} for c in fulls]
        _check_deltas(row, fulls, baseline, metrics, found, where)


def _baseline(
    folder: Path, page: str, rows: list[dict[str, str]], cells: list, found: Findings
) -> Any:
    """A function from a page row to the cells its differences are taken against: full of the
    same dataset and model (``summaries.csv``), or the per-schedule folder's cells of the
    schedule the row names (``one_model.csv``, that folder beside this one)."""
    if page == "summaries.csv":
        return lambda row: [
            c
            for c in cells
            if row.get("method") != "full"
            and (c["method"], c["dataset"], c["model"]) == ("full", row["dataset"], row["model"])
        ]
    against = {}
    for name in {Path(r["against"]).name for r in rows}:
        against[name] = _cells(folder.parent / name, found, {r["per_schedule"] for r in rows})
    return lambda row: [
        c
        for c in against[Path(row["against"]).name]
        if (c["dataset"], c["model"], c["schedule"])
        == (row["dataset"], row["model"], row["per_schedule"])
    ]


def _check_page(folder: Path, page: str, found: Findings) -> None:
    kind = page if page in _PAGES else "one_model.csv"  # one_model_<name>.csv: a second one
    with (folder / page).open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    cells = _cells(folder, found)
    baseline_of = _baseline(folder, kind, rows, cells, found)
    for row in rows:
        mine = [
            c for c in cells if all((c.get(k) or "") == (row.get(k) or "") for k in _PAGES[kind])
        ]
        where = f"{folder.name}/{page} {row.get('schedule')} ({row.get('method')})"
        baseline = baseline_of(row)
        if kind == "one_model.csv":
            _check_means(row, baseline, found, where, "per_schedule_")
        _check_row(row, mine, baseline, found, where)


def check_summaries(results: Path) -> Findings:
    """Every ``summaries.csv``, ``one_model.csv`` and ``extractive.csv`` under ``results``."""
    found = Findings("summary pages from generations")
    for page in _PAGES:  # one_model.csv and any second one-model page (one_model_*.csv)
        for path in sorted(results.glob(f"*/{page.replace('.csv', '*.csv')}")):
            _check_page(path.parent, path.name, found)
    for path in sorted(results.glob("*/extractive.csv")):
        _check_extractive(path.parent, found)
    return found
