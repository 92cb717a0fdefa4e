"""Paired bootstrap over test inputs: how sure is a difference between two systems?

``paired_bootstrap(pairs, references, ...)`` compares a system with a baseline decoded on the
same inputs (one pair of output lists per training seed). Each of ``resamples`` draws picks the
inputs with replacement, once for every seed (the inputs are shared), and computes, for every
metric, the mean over seeds of (system - baseline) on that draw. The result is the observed
difference and the 2.5th / 97.5th percentiles of the drawn differences.

- BLEU is a corpus metric: each draw recomputes corpus BLEU from the drawn inputs' sufficient
  statistics, exactly as sacrebleu's paired bootstrap (``sacrebleu.significance``, after
  Koehn 2004 and Moses' ``bootstrap-hypothesis-difference-significance.pl``) does, with the same
  multi-reference handling as :func:`~.text.bleu`.
- ROUGE-L and BERTScore F1 are means of per-input scores (as recorded in ``generations.jsonl``),
  so each draw is a mean of the drawn inputs' differences.

With one seed this is the standard paired bootstrap. With several, ``resample_seeds=True``
(the default) makes it two-level: each draw also picks the training seeds with replacement
(seed ``s`` of the system always paired with seed ``s`` of the baseline) and averages the drawn
seeds' differences on the drawn inputs, so the interval covers training-seed variation as well
as test-set sampling (seeds and inputs are crossed: every seed decoded the same inputs).
``resample_seeds=False`` treats the trained models as fixed (test-set sampling only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bleu_stats import bleu_statistics
from .references import MetricSettingError, normalize_references

__all__ = [
    "SystemPair", "paired_bootstrap", "percentile_interval", "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
]  # fmt: skip

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 12345  # sacrebleu's default seed for its bootstrap


@dataclass
class SystemPair:
    """One seed's outputs of the system and of the baseline on the same inputs, in input order,
    with their per-input scores (``{"rougeL": [...], "bertscore_f1": [...]}``)."""

    system: list[str]
    baseline: list[str]
    system_scores: Mapping[str, Sequence[float]]
    baseline_scores: Mapping[str, Sequence[float]]


def percentile_interval(observed: float, draws: np.ndarray) -> dict[str, float]:
    """``observed`` with the 2.5th and 97.5th percentiles of its bootstrap ``draws``."""
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"delta": float(observed), "ci95_low": float(low), "ci95_high": float(high)}


def paired_bootstrap(
    pairs: Sequence[SystemPair],
    references: Sequence[Sequence[str]],
    *,
    bleu_settings: Mapping[str, Any] | None = None,
    metrics: Sequence[str] = ("bleu", "rougeL", "bertscore_f1"),
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    resample_seeds: bool = True,
) -> dict[str, Any]:
    """``{metric: {"delta", "ci95_low", "ci95_high"}}`` of system - baseline (see module doc),
    plus the settings. A per-input metric missing from any pair's scores is left out."""
    if not pairs:
        raise MetricSettingError("paired_bootstrap needs at least one (system, baseline) pair")
    if resamples < 1:
        raise MetricSettingError(f"bootstrap resamples={resamples!r}; allowed: an integer >= 1")
    _, refs = normalize_references(pairs[0].system, references, where="paired_bootstrap")
    n = len(refs)
    for i, pair in enumerate(pairs):
        if len(pair.system) != n or len(pair.baseline) != n:
            raise MetricSettingError(
                f"paired_bootstrap: pair {i} has {len(pair.system)} system and "
                f"{len(pair.baseline)} baseline outputs for {n} inputs; they must match"
            )
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    S = len(pairs)
    # (resamples, S): how often each seed is drawn; with fixed seeds, each once
    if resample_seeds and S > 1:
        drawn = rng.integers(0, S, size=(resamples, S))
        weights = np.stack([np.bincount(d, minlength=S) for d in drawn]).astype(np.float64)
    else:
        weights = np.ones((resamples, S))
    weights /= weights.sum(1, keepdims=True)
    out: dict[str, Any] = {}
    if "bleu" in metrics:
        out["bleu"] = _bleu_interval(pairs, refs, dict(bleu_settings or {}), idx, weights)
    for name in metrics:
        if name == "bleu":
            continue
        if not all(name in p.system_scores and name in p.baseline_scores for p in pairs):
            continue
        diffs = np.stack(
            [
                np.asarray(p.system_scores[name], dtype=np.float64)
                - np.asarray(p.baseline_scores[name], dtype=np.float64)
                for p in pairs
            ]
        )  # (S, n)
        if diffs.shape != (S, n):
            raise MetricSettingError(
                f"paired_bootstrap: per-input {name} scores must have {n} values"
            )
        per_seed = diffs[:, idx].mean(2).T  # (resamples, S): each seed on each draw's inputs
        out[name] = percentile_interval(float(diffs.mean()), (per_seed * weights).sum(1))
    out["settings"] = {
        "resamples": resamples,
        "seed": seed,
        "pairs": len(pairs),
        "inputs": n,
        "resample_seeds": bool(resample_seeds and S > 1),
        "interval": "2.5th-97.5th percentile of resampled differences",
        "bleu": "corpus BLEU recomputed from resampled sufficient statistics (sacrebleu)",
    }
    return out


def _bleu_interval(
    pairs: Sequence[SystemPair],
    refs: Sequence[Sequence[str]],
    settings: dict[str, Any],
    idx: np.ndarray,
    weights: np.ndarray,
) -> dict[str, float]:
    """Corpus BLEU's difference and its interval: each draw recomputes both systems' corpus BLEU
    from the drawn inputs' sufficient statistics, per seed, weighted by the drawn seeds."""
    S = len(pairs)
    observed, per_seed = 0.0, np.zeros((idx.shape[0], S))
    for s, pair in enumerate(pairs):
        metric, sys_stats = bleu_statistics(pair.system, refs, settings)
        _, base_stats = bleu_statistics(pair.baseline, refs, settings)
        observed += (
            metric._compute_score_from_stats(sys_stats.sum(0).tolist()).score
            - metric._compute_score_from_stats(base_stats.sum(0).tolist()).score
        )
        sys_draws = sys_stats[idx].sum(1)  # (resamples, n_stats)
        base_draws = base_stats[idx].sum(1)
        per_seed[:, s] = [
            metric._compute_score_from_stats(a.tolist()).score
            - metric._compute_score_from_stats(b.tolist()).score
            for a, b in zip(sys_draws, base_draws, strict=True)
        ]
    return percentile_interval(observed / S, (per_seed * weights).sum(1))
