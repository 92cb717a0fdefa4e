"""Per-input BLEU sufficient statistics, computed once and shared.

A results table computes BLEU's statistics of the same outputs against the same references
many times (every row's paired bootstrap against the full model's seeds, and every cell's
length statistics). The references' n-grams are extracted once per (settings, references) and
the statistics of an output list once; the values are sacrebleu's own
(``BLEU._extract_corpus_statistics``, as its paired significance test uses them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["bleu_statistics"]


def bleu_statistics(
    hypotheses: list[str], references: list[list[str]], settings: Mapping[str, Any]
) -> tuple[Any, np.ndarray]:
    """The per-input BLEU sufficient statistics of ``hypotheses`` (as sacrebleu's own paired
    test computes them), with the metric that turns summed statistics into a score. The
    references' n-grams are extracted once per (settings, references), and the statistics of an
    output list once: a results table pairs every row with the same baseline outputs."""
    key = json.dumps(dict(settings), sort_keys=True, default=str)
    refs = tuple(tuple(r) for r in references)
    metric = _bleu_metric(key, refs)
    return metric, _hypothesis_stats(key, refs, tuple(hypotheses))


@lru_cache(maxsize=4)
def _bleu_metric(settings: str, references: tuple[tuple[str, ...], ...]):
    from sacrebleu.metrics import BLEU

    given = json.loads(settings)
    metric = BLEU(
        tokenize=given.get("tokenize", "13a"),
        lowercase=bool(given.get("lowercase", False)),
        smooth_method=given.get("smooth_method", "exp"),
        smooth_value=given.get("smooth_value"),
        effective_order=bool(given.get("effective_order", False)),
    )
    n_streams = max(len(r) for r in references)
    streams = [[r[k] if k < len(r) else None for r in references] for k in range(n_streams)]
    metric._ref_cache = metric._cache_references(streams)  # as sacrebleu's own test
    return metric


@lru_cache(maxsize=256)
def _hypothesis_stats(
    settings: str,
    references: tuple[tuple[str, ...], ...],
    hypotheses: tuple[str, ...],
) -> np.ndarray:
    metric = _bleu_metric(settings, references)
    stats = np.asarray(metric._extract_corpus_statistics(list(hypotheses), None), np.float64)
    stats.flags.writeable = False  # shared by every caller
    return stats
