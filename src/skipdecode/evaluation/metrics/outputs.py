"""What the outputs look like, apart from their quality: length and degeneracy.

Skip models can lose BLEU by writing shorter outputs (BLEU's brevity penalty), or collapse into
the same sentence whatever the input, or loop until the token cap. These statistics say which:

- ``output_words``: mean words (whitespace) per output;
- ``length_ratio``: BLEU's hypothesis length over its effective reference length (the closest
  reference per input, as sacrebleu counts it), ``bleu_bp`` the brevity penalty it implies and
  ``bleu_no_bp`` BLEU before that penalty (BLEU / BP);
- ``distinct_outputs``: distinct outputs over inputs (1.0: every input got its own text);
- ``capped_share``: share of outputs that used every allowed new token without ending (they
  hit ``max_new_tokens``); from the recorded token counts, or None when there are none;
- ``repeat_4gram``: share of an output's word 4-grams that repeat an earlier 4-gram of the same
  output, pooled over outputs (0: no loops).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .bleu_stats import bleu_statistics

__all__ = ["OUTPUT_STATS", "output_statistics"]

OUTPUT_STATS = (
    "output_words",
    "length_ratio",
    "bleu_bp",
    "bleu_no_bp",
    "distinct_outputs",
    "capped_share",
    "repeat_4gram",
)


def _bleu_lengths(
    outputs: Sequence[str], references: Sequence[Sequence[str]], settings: Mapping[str, Any]
) -> tuple[float, float, float]:
    """(BLEU, hypothesis length, effective reference length) as sacrebleu computes them."""
    metric, stats = bleu_statistics(list(outputs), [list(r) for r in references], settings)
    score = metric._compute_score_from_stats(stats.sum(0).tolist())
    return score.score, float(score.sys_len), float(score.ref_len)


def _repeated_4grams(text: str) -> tuple[int, int]:
    words = text.split()
    grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
    return len(grams) - len(set(grams)), len(grams)


def output_statistics(
    rows: Sequence[Mapping[str, Any]],
    bleu_settings: Mapping[str, Any] | None = None,
    max_new_tokens: int | None = None,
) -> dict[str, float | None]:
    """The statistics of the module docstring for a cell's generation rows (``output``,
    ``references``, and ``generated_tokens`` when recorded)."""
    if not rows:
        return dict.fromkeys(OUTPUT_STATS)
    outputs = [str(r["output"]) for r in rows]
    references = [list(r["references"]) for r in rows]
    bleu, sys_len, ref_len = _bleu_lengths(outputs, references, bleu_settings or {})
    ratio = sys_len / ref_len if ref_len else None
    if ratio is None:
        bp = None
    else:
        bp = 1.0 if ratio >= 1.0 else (math.exp(1.0 - 1.0 / ratio) if ratio > 0 else 0.0)
    repeated = [_repeated_4grams(o) for o in outputs]
    grams = sum(n for _, n in repeated)
    counts = [r.get("generated_tokens") for r in rows]
    capped = None
    if max_new_tokens and all(isinstance(c, int) for c in counts):
        ended = [bool(r.get("ended", True)) for r in rows]
        capped = sum(
            c >= max_new_tokens and not e for c, e in zip(counts, ended, strict=True)
        ) / len(rows)
    return {
        "output_words": sum(len(o.split()) for o in outputs) / len(outputs),
        "length_ratio": ratio,
        "bleu_bp": bp,
        "bleu_no_bp": bleu / bp if bp else None,
        "distinct_outputs": len(set(outputs)) / len(outputs),
        "capped_share": capped,
        "repeat_4gram": sum(r for r, _ in repeated) / grams if grams else 0.0,
    }
