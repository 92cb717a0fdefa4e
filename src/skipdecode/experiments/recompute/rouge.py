"""ROUGE-1, ROUGE-2 and ROUGE-L F counted here (the audit's own arithmetic), in SciTLDR's two
multi-reference conventions.

Tokens are rouge-score's default tokenizer's (lowercase, non-alphanumerics to spaces, Porter
stemming where the record's settings stem: the tokenization the records name). Per reference:
clipped n-gram matches over the output's and the reference's n-gram counts, and the longest
common subsequence; F = 2PR / (P + R). Per input: *max*, the reference with the best ROUGE-1 F
(the first on ties) with that reference's three scores; *mean*, the mean over the references.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from .bleu import ngrams

__all__ = ["rouge_scores"]


@cache
def _tokens(text: str, stemmer: bool = True) -> tuple[str, ...]:
    from rouge_score.tokenizers import DefaultTokenizer

    return tuple(DefaultTokenizer(use_stemmer=stemmer).tokenize(text))


def _f(matches: int, hypothesis: int, reference: int) -> float:
    p, r = matches / max(hypothesis, 1), matches / max(reference, 1)
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def _ngram_f(hyp: tuple[str, ...], ref: tuple[str, ...], n: int) -> float:
    h, r = ngrams(hyp, n), ngrams(ref, n)
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


def rouge_scores(output: str, references: Sequence[str], stemmer: bool = True) -> dict[str, float]:
    """One input's ROUGE-1/2/L F in SciTLDR's *max* and *mean* conventions (module doc)."""
    if not references:
        raise ValueError("rouge_scores: an input without references has no ROUGE")
    hyp = _tokens(output, stemmer)
    per_ref = []
    for reference in references:
        ref = _tokens(reference, stemmer)
        per_ref.append((_ngram_f(hyp, ref, 1), _ngram_f(hyp, ref, 2), _lcs_f(hyp, ref)))
    best = max(range(len(per_ref)), key=lambda i: (per_ref[i][0], -i))
    out = {}
    for k, name in enumerate(("rouge1", "rouge2", "rougeL")):
        out[f"{name}_max"] = per_ref[best][k]
        out[f"{name}_mean"] = sum(s[k] for s in per_ref) / len(per_ref)
    return out
