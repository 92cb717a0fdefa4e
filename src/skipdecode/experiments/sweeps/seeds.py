"""From cells to results: one row per (dataset, model, schedule) over its seeds.

For every quality metric a row holds the mean over seeds and its 95% confidence interval
(Student's t with ``n - 1`` degrees of freedom over the per-seed scores: training-seed variation),
and the paired difference against the ``full`` schedule of the same model and dataset, over the
seeds both have (``delta_seeds``; each seed paired with the same seed of full), with two
intervals: the two-level bootstrap over training seeds and test inputs
(:func:`skipdecode.evaluation.metrics.bootstrap.paired_bootstrap`: seed and test-set variation),
and the t-interval over the per-seed differences (seed variation; none with one seed). Speedups,
tokens/s, lengths and the output statistics are means over seeds; a speedup's mean only where
every seed of the row has the figure (:func:`mean_ci95_every`). With one seed there is no seed
interval, and the bootstrap covers the test inputs only; say so rather than read one into the
numbers.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ...evaluation.metrics.bootstrap import SystemPair, paired_bootstrap
from ...evaluation.metrics.outputs import OUTPUT_STATS
from .cell_outputs import cell_generations
from .table import QUALITY, SPEEDS, num

log = logging.getLogger(__name__)

__all__ = [
    "SEED_GROUP",
    "cell_generations",
    "mean_ci95",
    "mean_ci95_every",
    "results_order",
    "summarize_seeds",
]

#: The labels that make cells seeds of one results row.
SEED_GROUP = ("dataset", "model", "schedule", "method", "target_speedup", "train_steps")
_MEANS = (
    *SPEEDS,
    "tokens_per_second",
    "mean_generated_length",
    "acceptance_rate",
    *OUTPUT_STATS,
)


def mean_ci95(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high): the mean and its two-sided 95% t-interval; no interval below 2 values."""
    xs = [float(v) for v in values if num(v) is not None]
    if not xs:
        return None, None, None
    mean = statistics.fmean(xs)
    if len(xs) < 2:
        return mean, None, None
    from scipy.stats import t

    half = float(t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / len(xs) ** 0.5
    return mean, mean - half, mean + half


def mean_ci95_every(values: Sequence[Any]) -> tuple[float | None, float | None, float | None]:
    """:func:`mean_ci95` where every value is a number, else nothing: a mean over some of a row's
    seeds would be printed beside all of their labels (a speedup that some seeds' records cannot
    give, such as the end-to-end figure of a record written before raw timings were kept)."""
    if not values or any(num(v) is None for v in values):
        return None, None, None
    return mean_ci95(values)


def _paired(
    cells: Sequence[Mapping[str, Any]], baselines: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Paired bootstrap of ``cells`` against the baseline cells of the same seeds."""
    by_seed = {str(b.get("seed")): b for b in baselines}
    pairs, references, settings = [], None, {}
    for cell in cells:
        base = by_seed.get(str(cell.get("seed")))
        if base is None:
            continue
        mine, theirs = cell_generations(cell), cell_generations(base)
        if mine is None or theirs is None:
            continue
        (rows, settings), (base_rows, _) = mine, theirs
        if [r["input"] for r in rows] != [r["input"] for r in base_rows]:
            log.warning("cells %s and %s scored different inputs; no paired test", cell, base)
            continue
        references = [r["references"] for r in rows]
        names = (
            set.intersection(*[set(r.get("scores") or {}) for r in rows + base_rows])
            if rows
            else set()
        )
        pairs.append(
            SystemPair(
                system=[r["output"] for r in rows],
                baseline=[r["output"] for r in base_rows],
                system_scores={n: [r["scores"][n] for r in rows] for n in names},
                baseline_scores={n: [r["scores"][n] for r in base_rows] for n in names},
            )
        )
    if not pairs or references is None:
        return None
    return paired_bootstrap(pairs, references, bleu_settings=settings, metrics=QUALITY)


def _deltas(
    cells: Sequence[Mapping[str, Any]], baselines: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Against ``full``, paired seed by seed (only the seeds both have): the two-level bootstrap
    over seeds and test inputs (``<metric>_delta``, ``_delta_ci95_*``) and the per-seed
    difference of the scores with its t-interval over seeds (``_delta_seed_ci95_*``)."""
    by_seed = {str(b.get("seed")): b for b in baselines}
    matched = [c for c in cells if str(c.get("seed")) in by_seed]
    out: dict[str, Any] = {
        "delta_seeds": " ".join(sorted(str(c.get("seed")) for c in matched)) or None
    }
    paired = _paired(matched, baselines)
    for metric in QUALITY:
        d = (paired or {}).get(metric)
        if d:
            out[f"{metric}_delta"] = d["delta"]
            out[f"{metric}_delta_ci95_low"] = d["ci95_low"]
            out[f"{metric}_delta_ci95_high"] = d["ci95_high"]
        diffs = [
            num(c.get(metric)) - num(by_seed[str(c.get("seed"))].get(metric))  # type: ignore[operator]
            for c in matched
            if num(c.get(metric)) is not None
            and num(by_seed[str(c.get("seed"))].get(metric)) is not None
        ]
        _, low, high = mean_ci95(diffs)
        out[f"{metric}_delta_seed_ci95_low"] = low
        out[f"{metric}_delta_seed_ci95_high"] = high
    return out


def summarize_seeds(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One results row per (dataset, model, schedule) from the cell rows (see module doc)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for cell in cells:
        if cell.get("dataset") is None and cell.get("schedule") is None:
            continue  # a pending cell that never started: it has no labels yet
        groups.setdefault(tuple(cell.get(k) for k in SEED_GROUP), []).append(cell)
    # full at the same training steps (sweep.eval_step; None: the exported models)
    full = {
        (key[0], key[1], key[5]): [c for c in members if c.get("status") == "ok"]
        for key, members in groups.items()
        if key[3] == "full"
    }
    results = []
    for key, members in groups.items():
        ok = [c for c in members if c.get("status") == "ok"]
        row: dict[str, Any] = dict(zip(SEED_GROUP, key, strict=True))
        row["n_seeds"] = len(ok)
        row["seeds"] = " ".join(sorted(str(c.get("seed")) for c in ok))
        if not ok:
            row["status"] = members[0].get("status")
            row["error"] = members[0].get("error")
            results.append(row)
            continue
        row["status"] = "ok"
        missing = [c for c in members if c.get("status") != "ok"]
        if missing:
            row["error"] = f"{len(missing)} more cell(s) not ok: " + ", ".join(
                f"seed {c.get('seed')} {c.get('status')}" for c in missing
            )
        for metric in QUALITY:
            mean, low, high = mean_ci95([c.get(metric) for c in ok])
            row[f"{metric}_mean"], row[f"{metric}_ci95_low"], row[f"{metric}_ci95_high"] = (
                mean,
                low,
                high,
            )
        for key_ in _MEANS:
            mean = mean_ci95_every if key_ in SPEEDS else mean_ci95
            row[key_] = mean([c.get(key_) for c in ok])[0]
        baselines = full.get((key[0], key[1], key[5])) or []
        if key[3] != "full" and baselines:
            row.update(_deltas(ok, baselines))
        results.append(row)
    return sorted(results, key=results_order)


def results_order(row: Mapping[str, Any]) -> tuple:
    """The order of results rows: dataset, model, full first, then target speedup, method,
    schedule."""
    return (
        str(row.get("dataset")),
        str(row.get("model")),
        row.get("method") != "full",
        num(row.get("target_speedup")) or 0.0,
        str(row.get("method")),
        str(row.get("schedule")),
    )
