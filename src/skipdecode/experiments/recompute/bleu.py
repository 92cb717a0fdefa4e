"""Corpus BLEU from per-input sufficient statistics, counted here (the audit's own arithmetic).

Tokens are sacrebleu's ``13a`` tokenizer's (the definition the records name), of the lowercased
text where the record's settings lowercase (E2E's convention). Per input: for
n = 1..4 the output's n-grams, each clipped at the most times any one reference holds it
(``correct``) and their number (``total``); the output's length; and the reference length closest
to it (the shorter on ties). Corpus BLEU from summed statistics: the brevity penalty
exp(1 - r / c) where c < r, times exp of the mean log n-gram precision (percent), where an order
with no match counts 100 / (2^k x total) for its k-th such order (``exp`` smoothing, mteval's)
and an order the outputs are too short for ends the product at 0.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_SETTINGS", "bleu_from_statistics", "bleu_of_rows", "bleu_statistics", "implemented",
    "ngrams",
]  # fmt: skip

ORDER = 4
#: The settings this arithmetic implements (sacrebleu's defaults; ``lowercase`` either way); a
#: record with others is not recomputed here.
DEFAULT_SETTINGS = {"tokenize": "13a", "smooth_method": "exp", "effective_order": False}


#: sacrebleu 13a's first rule, each of these characters spaced apart (``([{-~[-` -&(-+:-@/])``
#: to `` \1 ``), as one table: a match is one character, so the substitution is a translation
_SPACED = str.maketrans({c: f" {c} " for c in '{|}~[\\]^_` !"#$%&()*+:;<=>?@/'})
#: its other rules, in its order: periods and commas apart unless between digits, a dash
#: after a digit
_RULES = (
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
)
_ENTITIES = (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">"))


@cache
def _tokens(text: str) -> tuple[str, ...]:
    """sacrebleu's ``Tokenizer13a`` of the text stripped at its end (as its corpus BLEU strips
    each segment first), the tokenizer's steps in its order, the first a translation instead of
    a Python call per matched character (half the audit's tokenizing time; tested against it)."""
    line = text.rstrip().replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        for entity, char in _ENTITIES:
            line = line.replace(entity, char)
    line = f" {line} ".translate(_SPACED)
    for pattern, replacement in _RULES:
        line = pattern.sub(replacement, line)
    return tuple(line.split())


def _prepared(text: str, lowercase: bool) -> tuple[str, ...]:
    return _tokens(text.lower() if lowercase else text)


def ngrams(tokens: tuple[str, ...], n: int) -> Counter:
    """The n-grams of ``tokens`` with their counts."""
    return Counter(zip(*(tokens[i:] for i in range(n)), strict=False))


@cache
def _reference_counts(
    references: tuple[str, ...], lowercase: bool
) -> tuple[list[Counter], tuple[int, ...]]:
    """Per order the most times any one reference holds each n-gram, and the references'
    lengths."""
    tokenized = [_prepared(r, lowercase) for r in references]
    most: list[Counter] = []
    for n in range(1, ORDER + 1):
        counts: Counter = Counter()
        for tokens in tokenized:
            counts |= ngrams(tokens, n)
        most.append(counts)
    return most, tuple(len(t) for t in tokenized)


def _closest(length: int, references: Sequence[int]) -> int:
    return min(references, key=lambda r: (abs(length - r), r))


def bleu_statistics(
    outputs: Sequence[str], references: Sequence[Sequence[str]], lowercase: bool = False
) -> np.ndarray:
    """(inputs, 2 x ORDER + 2): correct per order, total per order, output and reference length."""
    rows = []
    for output, refs in zip(outputs, references, strict=True):
        tokens = _prepared(output, lowercase)
        most, lengths = _reference_counts(tuple(refs), lowercase)
        correct, total = [], []
        for n in range(1, ORDER + 1):
            grams = ngrams(tokens, n)
            most_n = most[n - 1]
            correct.append(sum(min(c, most_n[g]) for g, c in grams.items() if g in most_n))
            total.append(sum(grams.values()))
        rows.append([*correct, *total, len(tokens), _closest(len(tokens), lengths)])
    return np.asarray(rows, dtype=np.float64)


def bleu_from_statistics(summed: Sequence[float]) -> float:
    """Corpus BLEU (0-100) from statistics summed over inputs (module doc)."""
    correct, total = summed[:ORDER], summed[ORDER : 2 * ORDER]
    length, reference = summed[2 * ORDER], summed[2 * ORDER + 1]
    if not any(correct):
        return 0.0
    penalty = 1.0 if length >= reference else (math.exp(1 - reference / length) if length else 0.0)
    logs, halvings = [], 1.0
    for n in range(ORDER):
        if total[n] == 0:
            return 0.0  # no output reaches this order: the product is 0
        if correct[n] == 0:
            halvings *= 2
            logs.append(math.log(100.0 / (halvings * total[n])))
        else:
            logs.append(math.log(100.0 * correct[n] / total[n]))
    return penalty * math.exp(sum(logs) / ORDER)


def bleu_of_rows(summed: np.ndarray) -> np.ndarray:
    """:func:`bleu_from_statistics` of each row of ``summed`` (rows x statistics) at once: a
    bootstrap's draws."""
    correct, total = summed[:, :ORDER], summed[:, ORDER : 2 * ORDER]
    length, reference = summed[:, 2 * ORDER], summed[:, 2 * ORDER + 1]
    unmatched = correct == 0
    halvings = 2.0 ** np.cumsum(unmatched, axis=1)  # doubled at each order without a match
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(unmatched, 100.0 / (halvings * total), 100.0 * correct / total)
        short = np.where(length > 0, np.exp(1 - reference / length), 0.0)
        penalty = np.where(length >= reference, 1.0, short)
        out = penalty * np.exp(np.log(precision).mean(axis=1))
    out[~correct.any(axis=1) | (total == 0).any(axis=1)] = 0.0
    return out


def implemented(settings: Mapping[str, Any]) -> bool:
    """Whether a record's BLEU settings are the ones this module implements."""
    return all(settings.get(k, v) == v for k, v in DEFAULT_SETTINGS.items())
