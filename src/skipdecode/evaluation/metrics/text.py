"""BLEU (sacrebleu) and ROUGE (rouge-score), each returning its scores and exact settings.

Scales are the libraries' native ones: BLEU is 0-100, ROUGE is 0-1. Multi-reference conventions
follow the reference implementations:

* BLEU: standard multi-reference corpus BLEU (n-gram counts clipped by the max count over the
  references, closest reference length for the brevity penalty). Shorter reference lists are padded
  with ``None``, which sacrebleu drops per segment; the signature then reads ``nrefs:var``.
  Padding with ``''`` would be wrong: despite sacrebleu's README, sacrebleu 2.x keeps ``''`` as a
  zero-length reference, which changes the brevity penalty.
* ROUGE: per example, the reference with the highest F-measure is chosen for each ROUGE type
  (``rouge_score.RougeScorer.score_multi``); P/R/F of that reference are then averaged over
  examples (macro average). Beside it, SciTLDR's two conventions (Cachola et al., 2020), both
  macro averages too (:data:`ROUGE_CONVENTIONS`): ``max``, per example the reference with the
  highest ROUGE-1 F and that same reference's score for every type (so ROUGE-1 equals the
  per-type figure, ROUGE-2 and ROUGE-L may be lower), and ``mean``, per example the mean over its
  references. With one reference per example all three agree.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from .references import MetricSettingError, normalize_references, ref_count_summary

__all__ = ["bleu", "rouge", "ROUGE_DEFAULT_TYPES", "ROUGE_CONVENTIONS"]

ROUGE_DEFAULT_TYPES: tuple[str, ...] = ("rouge1", "rouge2", "rougeL")
#: SciTLDR's multi-reference conventions, and how each picks a row's score (see module doc).
ROUGE_CONVENTIONS: dict[str, str] = {
    "max": "per example the reference with the highest ROUGE-1 F; that reference's P/R/F for "
    "every type (SciTLDR's max)",
    "mean": "per example the mean over its references of each type's P/R/F (SciTLDR's mean)",
}
BLEU_TOKENIZERS_HINT = "'13a' (default), 'none', 'intl', 'char', 'zh', 'ja-mecab', 'ko-mecab', 'flores101', 'flores200'"


def bleu(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    tokenize: str = "13a",
    lowercase: bool = False,
    smooth_method: str = "exp",
    smooth_value: float | None = None,
    effective_order: bool = False,
    convention: str | None = None,
) -> dict[str, Any]:
    """Corpus BLEU (sacrebleu) with variable-count multi-reference support.

    ``convention`` names the evaluation convention the settings follow (recorded only).

    Returns ``score`` (0-100), ``signature`` (sacrebleu's reproducibility string), n-gram
    ``precisions``, ``bp``, ``sys_len``, ``ref_len`` and ``settings``.
    """
    import sacrebleu
    from sacrebleu.metrics import BLEU

    hyps, refs = normalize_references(hypotheses, references, where="bleu")
    if smooth_method not in BLEU.SMOOTH_DEFAULTS:
        raise MetricSettingError(
            f"bleu.smooth_method={smooth_method!r} is not supported; allowed: "
            f"{sorted(BLEU.SMOOTH_DEFAULTS)}"
        )
    try:
        metric = BLEU(
            tokenize=tokenize,
            lowercase=lowercase,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=effective_order,
        )
    except (KeyError, ValueError, ImportError, RuntimeError) as e:
        raise MetricSettingError(
            f"bleu.tokenize={tokenize!r} could not be used ({e}); allowed: {BLEU_TOKENIZERS_HINT}"
        ) from e

    n_streams = max(len(r) for r in refs)
    # Reference stream k holds the k-th reference of every example; missing ones are None, which
    # sacrebleu drops per segment (NOT '', which it would keep as a zero-length reference).
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(n_streams)]
    result = metric.corpus_score(hyps, streams)
    return {
        "score": float(result.score),
        "signature": str(metric.get_signature()),
        "precisions": [float(p) for p in result.precisions],
        "bp": float(result.bp),
        "sys_len": int(result.sys_len),
        "ref_len": int(result.ref_len),
        "n": len(hyps),
        "scale": "0-100",
        "settings": {
            "library": "sacrebleu",
            "version": sacrebleu.__version__,
            "tokenize": tokenize,
            "lowercase": lowercase,
            "smooth_method": smooth_method,
            "smooth_value": smooth_value,
            "effective_order": effective_order,
            "convention": convention,
            "references_per_example": ref_count_summary(refs),
            "multi_reference": "standard corpus BLEU; shorter reference lists padded with None",
        },
    }


def _check_rouge_types(types: Sequence[str]) -> list[str]:
    import re

    if isinstance(types, str):
        types = [types]
    out: list[str] = []
    for t in types:
        if not isinstance(t, str) or not (
            t in ("rougeL", "rougeLsum") or re.fullmatch(r"rouge[1-9]", t)
        ):
            raise MetricSettingError(
                f"rouge.types contains {t!r}; allowed: 'rouge1'..'rouge9', 'rougeL', 'rougeLsum'"
            )
        if t not in out:
            out.append(t)
    if not out:
        raise MetricSettingError("rouge.types is empty; allowed: e.g. ['rouge1','rouge2','rougeL']")
    return out


class _OnceTokenizer:
    """rouge-score's default tokenizer (``rouge_score.tokenize.tokenize``, the Porter stemmer
    where asked), with each text tokenized and each word stemmed once per scoring: both are pure
    functions, and a hypothesis is scored against every reference, the references again for
    every cell. The same tokens as ``DefaultTokenizer``, a fraction of the time."""

    def __init__(self, use_stemmer: bool):
        from nltk.stem import porter

        stemmer = porter.PorterStemmer() if use_stemmer else None
        self.stem = functools.cache(stemmer.stem) if stemmer is not None else None
        self._tokens: dict[str, tuple[str, ...]] = {}

    def tokenize(self, text: str) -> list[str]:
        from rouge_score.tokenize import tokenize

        if text not in self._tokens:
            self._tokens[text] = tuple(tokenize(text, self if self.stem is not None else None))
        return list(self._tokens[text])


def rouge(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    types: Sequence[str] = ROUGE_DEFAULT_TYPES,
    use_stemmer: bool = True,
    summary: bool = False,
    per_example: bool = False,
) -> dict[str, Any]:
    """ROUGE F/P/R (rouge-score), macro-averaged over examples.

    Multiple references: per example and per type, the reference with the highest F-measure is
    used (``RougeScorer.score_multi``). ``summary=True`` adds ``rougeLsum`` (summary-level LCS over
    sentences split on ``\\n``). Returns ``{type: {"f","p","r"}, ..., "settings": {...}}``, the
    same under ``"conventions"`` for each of :data:`ROUGE_CONVENTIONS` (``{"max": {type: ...},
    "mean": {...}}``), and with ``per_example`` each input's F per type and per convention
    (``{"per_example": {type: {"f": [...]}, "<type>_max": ..., "<type>_mean": ...}}``).
    """
    import importlib.metadata as md

    from rouge_score import rouge_scorer

    hyps, refs = normalize_references(hypotheses, references, where="rouge")
    rtypes = _check_rouge_types(types)
    if summary and "rougeLsum" not in rtypes:
        rtypes.append("rougeLsum")
    scorer = rouge_scorer.RougeScorer(rtypes, tokenizer=_OnceTokenizer(use_stemmer))
    # per convention and type: each example's (f, p, r)
    rows: dict[str, dict[str, list[tuple[float, float, float]]]] = {
        c: {t: [] for t in rtypes} for c in ("per_type", *ROUGE_CONVENTIONS)
    }
    pick = "rouge1" if "rouge1" in rtypes else rtypes[0]  # the type that picks "max"'s reference
    for h, group in zip(hyps, refs, strict=True):
        scores = [scorer.score(r, h) for r in group]  # score_multi's own per-reference scores
        best_pick = _first_argmax([s[pick].fmeasure for s in scores])
        for t in rtypes:
            fpr = [(s[t].fmeasure, s[t].precision, s[t].recall) for s in scores]
            rows["per_type"][t].append(fpr[_first_argmax([x[0] for x in fpr])])
            rows["max"][t].append(fpr[best_pick])
            rows["mean"][t].append(tuple(sum(x[i] for x in fpr) / len(fpr) for i in range(3)))
    n = len(hyps)

    def means(by_type: dict[str, list[tuple[float, float, float]]]) -> dict[str, Any]:
        return {
            t: {k: sum(x[i] for x in v) / n for i, k in enumerate("fpr")}
            for t, v in by_type.items()
        }

    out: dict[str, Any] = means(rows["per_type"])
    out["conventions"] = {c: means(rows[c]) for c in ROUGE_CONVENTIONS}
    out["n"] = n
    out["scale"] = "0-1"
    out["settings"] = {
        "library": "rouge-score",
        "version": md.version("rouge-score"),
        "types": rtypes,
        "use_stemmer": use_stemmer,
        "summary": summary,
        "rougeLsum_sentence_split": "newline" if "rougeLsum" in rtypes else None,
        "tokenizer": "rouge_score default (lowercase, non-alphanumerics to spaces)",
        "multi_reference": "max F over references per example and type (score_multi)",
        "conventions": dict(ROUGE_CONVENTIONS),
        "aggregation": "mean over examples",
        "references_per_example": ref_count_summary(refs),
    }
    if per_example:
        out["per_example"] = {
            f"{t}{suffix}": {"f": [x[0] for x in rows[c][t]]}
            for c, suffix in (("per_type", ""), ("max", "_max"), ("mean", "_mean"))
            for t in rtypes
        }
    return out


def _first_argmax(values: Sequence[float]) -> int:
    """Index of the largest value, the first on ties (as ``numpy.argmax`` in ``score_multi``)."""
    return max(range(len(values)), key=lambda i: (values[i], -i))
