"""BLEU and NIST as the E2E NLG Challenge's official script computes them.

Ported from ``metrics/pymteval.py`` of tuetschek/e2e-metrics (commit 1b9c4d8, the script behind
``measure_scores.py -p``; the Python counterpart of mteval-v13a with its basic tokenisation),
with Python 2 compatibility removed and nothing else changed (but speed: a sentence is
lowercased once, not once per n-gram order): same tokenizer, same n-gram
clipping, the closest reference length (ties: the shorter) for BLEU's brevity penalty, NIST's
information weights from all references and its length penalty from their average length.
Case-insensitive, as the script runs it. Scores: BLEU in [0, 1], NIST unbounded.

Copyright (c) 2015-2017, Xinlei Chen, Hao Fang, Tsung-Yi Lin, Ramakrishna Vedantam, and Ondrej
Dusek. All rights reserved. Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met: 1. Redistributions
of source code must retain the above copyright notice, this list of conditions and the following
disclaimer. 2. Redistributions in binary form must reproduce the above copyright notice, this
list of conditions and the following disclaimer in the documentation and/or other materials
provided with the distribution. THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND
CONTRIBUTORS "AS IS" AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO
EVENT SHALL THE COPYRIGHT OWNER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF
SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING
NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF
THE POSSIBILITY OF SUCH DAMAGE.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence

__all__ = ["BLEUScore", "NISTScore", "mteval_tokenize"]

Sentence = Sequence[str]


def mteval_tokenize(sent: str) -> list[str]:
    """mteval-v13a's basic tokenisation (via Moses' multi-bleu-detok), as the script has it."""
    sent = re.sub(r"<skipped>", r"", sent)
    sent = re.sub(r"-\n", r"", sent)
    sent = re.sub(r"\n", r" ", sent)
    sent = re.sub(r"&quot;", r'"', sent)
    sent = re.sub(r"&amp;", r"&", sent)
    sent = re.sub(r"&lt;", r"<", sent)
    sent = re.sub(r"&gt;", r">", sent)
    sent = " " + sent + " "
    sent = re.sub(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 ", sent)  # punctuation
    sent = re.sub(r"([^0-9])([\.,])", r"\1 \2 ", sent)  # period, comma unless after a digit
    sent = re.sub(r"([\.,])([^0-9])", r" \1 \2", sent)  # ... unless before a digit
    sent = re.sub(r"([0-9])(-)", r"\1 \2 ", sent)  # a dash after a digit
    sent = re.sub(r"\s+", r" ", sent)
    return sent.strip().split(" ")


class _NGramScore:
    def __init__(self, max_ngram: int, case_sensitive: bool):
        self.max_ngram = max_ngram
        self.case_sensitive = case_sensitive

    def ngrams(self, n: int, sent: Sentence) -> list[tuple[str, ...]]:
        toks = sent if self.case_sensitive else [tok.lower() for tok in sent]
        return list(zip(*[toks[i:] for i in range(n)], strict=False))

    @staticmethod
    def tokenized(pred: str | Sentence, refs: Sequence[str | Sentence]):
        pred = pred if isinstance(pred, list) else mteval_tokenize(pred)
        return pred, [r if isinstance(r, list) else mteval_tokenize(r) for r in refs]

    def ngram_counts(self, n: int, sents: Sequence[Sentence]) -> dict[tuple[str, ...], int]:
        """Each n-gram's largest count in any one of ``sents``."""
        merged: dict[tuple[str, ...], int] = {}
        for sent in sents:
            counts: dict[tuple[str, ...], int] = defaultdict(int)
            for ngram in self.ngrams(n, sent):
                counts[ngram] += 1
            for ngram, cnt in counts.items():
                merged[ngram] = max(merged.get(ngram, 0), cnt)
        return merged


class BLEUScore(_NGramScore):
    """Corpus BLEU accumulated sentence by sentence (several references each)."""

    TINY = 1e-15
    SMALL = 1e-9

    def __init__(self, max_ngram: int = 4, case_sensitive: bool = False, smoothing: float = 0.0):
        super().__init__(max_ngram, case_sensitive)
        self.smoothing = smoothing
        self.reset()

    def reset(self) -> None:
        self.ref_len = 0
        self.cand_lens = [0] * self.max_ngram
        self.hits = [0] * self.max_ngram

    def append(self, pred: str | Sentence, refs: Sequence[str | Sentence]) -> None:
        pred, refs = self.tokenized(pred, refs)
        for i in range(self.max_ngram):
            self.hits[i] += self.compute_hits(i + 1, pred, refs)
            self.cand_lens[i] += len(pred) - i
        closest = min(refs, key=lambda ref: (abs(len(ref) - len(pred)), len(ref)))
        self.ref_len += len(closest)

    def compute_hits(self, n: int, pred: Sentence, refs: Sequence[Sentence]) -> int:
        merged_refs = self.ngram_counts(n, refs)
        return sum(min(merged_refs.get(g, 0), c) for g, c in self.ngram_counts(n, [pred]).items())

    def score(self) -> float:
        bp = 1.0
        if self.cand_lens[0] <= self.ref_len:
            bp = math.exp(1.0 - self.ref_len / (float(self.cand_lens[0]) or 1e-5))
        return bp * self.ngram_precision()

    def ngram_precision(self) -> float:
        """The geometric mean of the n-gram precisions up to ``max_ngram``."""
        log_sum = 0.0
        for n_hits, n_len in zip(self.hits, self.cand_lens, strict=True):
            n_hits = max(n_hits + self.smoothing, self.TINY)
            n_len = max(n_len + self.smoothing, self.SMALL)
            log_sum += math.log(n_hits / n_len)
        return math.exp((1.0 / self.max_ngram) * log_sum)


class NISTScore(_NGramScore):
    """Corpus NIST accumulated sentence by sentence (several references each)."""

    BETA = -math.log(0.5) / math.log(1.5) ** 2  # mteval-v13a's

    def __init__(self, max_ngram: int = 5, case_sensitive: bool = False):
        super().__init__(max_ngram, case_sensitive)
        self.reset()

    def reset(self) -> None:
        self.ref_ngrams: list[dict[tuple[str, ...], int]] = [
            defaultdict(int) for _ in range(self.max_ngram + 1)
        ]  # with 0-grams
        self.hit_ngrams: list[list[dict[tuple[str, ...], int]]] = [
            [] for _ in range(self.max_ngram)
        ]
        self.cand_lens: list[list[int]] = [[] for _ in range(self.max_ngram)]
        self.avg_ref_len = 0.0

    def append(self, pred: str | Sentence, refs: Sequence[str | Sentence]) -> None:
        pred, refs = self.tokenized(pred, refs)
        for n in range(self.max_ngram):
            self.cand_lens[n].append(len(pred) - n)
            merged_refs = self.ngram_counts(n + 1, refs)
            pred_ngrams = self.ngram_counts(n + 1, [pred])
            hits = {}
            for ngram, cnt in pred_ngrams.items():
                hit = min(cnt, merged_refs.get(ngram, 0))
                if hit:
                    hits[ngram] = hit
            self.hit_ngrams[n].append(hits)
            for ref in refs:
                for ngram in self.ngrams(n + 1, ref):
                    self.ref_ngrams[n + 1][ngram] += 1
        ref_len_sum = sum(len(ref) for ref in refs)
        self.ref_ngrams[0][()] += ref_len_sum
        self.avg_ref_len += ref_len_sum / float(len(refs))

    def info(self, ngram: tuple[str, ...]) -> float:
        """An n-gram's NIST information weight."""
        if ngram not in self.ref_ngrams[len(ngram)]:
            return 0.0
        context = self.ref_ngrams[len(ngram) - 1][ngram[:-1]]
        return math.log(context / float(self.ref_ngrams[len(ngram)][ngram]), 2)

    def length_penalty(self, lsys: int, avg_lref: float) -> float:
        ratio = lsys / float(avg_lref)
        if ratio >= 1:
            return 1.0
        if ratio <= 0:
            return 0.0
        return math.exp(-self.BETA * math.log(ratio) ** 2)

    def score(self) -> float:
        hit_infos = [0.0] * self.max_ngram
        for n in range(self.max_ngram):
            for hits in self.hit_ngrams[n]:
                hit_infos[n] += sum(self.info(g) * h for g, h in hits.items())
        totals = [sum(self.cand_lens[n]) for n in range(self.max_ngram)]
        nist = sum(info / total for info, total in zip(hit_infos, totals, strict=True))
        return self.length_penalty(sum(self.cand_lens[0]), self.avg_ref_len) * nist
