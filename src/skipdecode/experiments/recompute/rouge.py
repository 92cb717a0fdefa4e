"""ROUGE-1, ROUGE-2 and ROUGE-L F counted here (the audit's own arithmetic), in SciTLDR's two
multi-reference conventions and, for ROUGE-L, the results tables' per-type max.

Tokens are rouge-score's default tokenizer's (lowercase, non-alphanumerics to spaces, Porter
stemming where the record's settings stem: the tokenization the records name). Per reference:
clipped n-gram matches over the output's and the reference's n-gram counts, and the longest
common subsequence (counted bit-parallel); F = 2PR / (P + R). Per input: *max*, the reference with the best ROUGE-1 F
(the first on ties) with that reference's three scores; *mean*, the mean over the references;
``rougeL`` (per-type max, rouge-score's ``score_multi``), the best ROUGE-L F over the references.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cache

from .bleu import ngrams

__all__ = ["rouge_l_best", "rouge_scores"]


class _OnceStemmer:
    """rouge-score's Porter stemmer with each word stemmed once (stemming is a pure function of
    the word; most of the audit's time went to stemming the same words again)."""

    def __init__(self):
        from nltk.stem import porter

        self.stem = cache(porter.PorterStemmer().stem)


@cache
def _stemmer() -> _OnceStemmer:
    return _OnceStemmer()


@cache
def _tokens(text: str, stemmer: bool = True) -> tuple[str, ...]:
    from rouge_score.tokenize import tokenize  # what its DefaultTokenizer calls

    return tuple(tokenize(text, _stemmer() if stemmer else None))


def _f(matches: int, hypothesis: int, reference: int) -> float:
    p, r = matches / max(hypothesis, 1), matches / max(reference, 1)
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


@cache
def _counts(tokens: tuple[str, ...], n: int) -> tuple[Counter, int]:
    """The n-grams of ``tokens`` with their counts, and how many there are (each text's once:
    references repeat across outputs and cells, an output across its references)."""
    grams = ngrams(tokens, n)
    return grams, sum(grams.values())


def _ngram_f(hyp: tuple[str, ...], ref: tuple[str, ...], n: int) -> float:
    (h, h_total), (r, r_total) = _counts(hyp, n), _counts(ref, n)
    return _f(sum((h & r).values()), h_total, r_total)


@cache
def _positions(hyp: tuple[str, ...]) -> dict[str, int]:
    """Each token of ``hyp`` with the bits of its positions."""
    where: dict[str, int] = {}
    for j, token in enumerate(hyp):
        where[token] = where.get(token, 0) | (1 << j)
    return where


def _lcs_length(hyp: tuple[str, ...], ref: tuple[str, ...]) -> int:
    """Length of the longest common subsequence, bit-parallel (Hyyro's row update): bit j of
    ``row`` is 0 where the LCS of ``hyp[: j + 1]`` and the reference read so far grows at j;
    the LCS is the count of 0 bits. The same number as the quadratic table, a word op a token."""
    where = _positions(hyp)
    full = (1 << len(hyp)) - 1
    row = full
    for token in ref:
        matched = row & where.get(token, 0)
        row = ((row + matched) | (row - matched)) & full
    return len(hyp) - row.bit_count()


def _lcs_f(hyp: tuple[str, ...], ref: tuple[str, ...]) -> float:
    if not hyp or not ref:
        return 0.0
    return _f(_lcs_length(hyp, ref), len(hyp), len(ref))


def rouge_scores(output: str, references: Sequence[str], stemmer: bool = True) -> dict[str, float]:
    """One input's ROUGE-1/2/L F in SciTLDR's *max* and *mean* conventions, and ROUGE-L's
    per-type max (module doc)."""
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
    out["rougeL"] = max(s[2] for s in per_ref)
    return out


def rouge_l_best(output: str, references: Sequence[str], stemmer: bool = True) -> dict[str, float]:
    """One input's ROUGE-L per-type max alone (``{"rougeL": ...}``, as :func:`rouge_scores`)."""
    if not references:
        raise ValueError("rouge_l_best: an input without references has no ROUGE")
    return {"rougeL": _best_lcs_f(output, tuple(references), stemmer)}


@cache
def _best_lcs_f(output: str, references: tuple[str, ...], stemmer: bool) -> float:
    """The best ROUGE-L F over ``references``, once per output and references (outputs repeat
    across cells)."""
    hyp = _tokens(output, stemmer)
    return max(_lcs_f(hyp, _tokens(r, stemmer)) for r in references)
