"""Length and degeneracy statistics, and the two-level (seeds x inputs) paired bootstrap."""

from __future__ import annotations

import math

import pytest

from skipdecode.evaluation.metrics.bootstrap import SystemPair, paired_bootstrap
from skipdecode.evaluation.metrics.outputs import output_statistics
from skipdecode.evaluation.metrics.text import bleu

REFS = [["the cat sat on the mat today"], ["a dog ran in the park at noon"]]


def _rows(outputs, tokens=None, ended=None):
    rows = [{"output": o, "references": r} for o, r in zip(outputs, REFS, strict=True)]
    if tokens is not None:
        for r, n, e in zip(rows, tokens, ended, strict=True):
            r.update(generated_tokens=n, ended=e)
    return rows


def test_brevity_penalty_and_bleu_without_it_match_sacrebleu():
    outputs = ["the cat sat on the mat", "a dog ran in the park"]  # 12 words vs 15 reference
    stats = output_statistics(_rows(outputs))
    assert stats["length_ratio"] == pytest.approx(12 / 15)
    assert stats["bleu_bp"] == pytest.approx(math.exp(1 - 15 / 12))
    score = bleu(outputs, REFS)["score"]
    assert stats["bleu_no_bp"] == pytest.approx(score / stats["bleu_bp"])
    assert stats["output_words"] == 6.0 and stats["distinct_outputs"] == 1.0
    assert stats["capped_share"] is None  # no token counts recorded


def test_degeneracy_counts_repeats_collapse_and_the_cap():
    loop = "the cat the cat the cat the cat"  # 5 four-grams, 3 of them repeats
    stats = output_statistics(
        _rows([loop, loop], tokens=[8, 5], ended=[False, True]), max_new_tokens=8
    )
    assert stats["distinct_outputs"] == 0.5
    assert stats["repeat_4gram"] == pytest.approx(6 / 10)
    assert stats["capped_share"] == 0.5  # one row used all 8 tokens without ending


def _pair(offsets, n=40):
    base = [0.5] * n
    return SystemPair(
        system=["x"] * n,
        baseline=["x"] * n,
        system_scores={"rougeL": [b + o for b, o in zip(base, offsets, strict=True)]},
        baseline_scores={"rougeL": base},
    )


def test_two_level_bootstrap_covers_seed_variation_that_the_input_bootstrap_ignores():
    n = 40
    refs = [["x"]] * n
    # each seed's system is a constant shift: no input variation, large seed variation
    pairs = [_pair([d] * n, n) for d in (0.0, 0.1, 0.2)]
    fixed = paired_bootstrap(pairs, refs, metrics=("rougeL",), resample_seeds=False)["rougeL"]
    both = paired_bootstrap(pairs, refs, metrics=("rougeL",))["rougeL"]
    assert fixed["delta"] == both["delta"] == pytest.approx(0.1)
    assert fixed["ci95_high"] - fixed["ci95_low"] == pytest.approx(0.0, abs=1e-12)
    assert both["ci95_low"] < 0.05 and both["ci95_high"] > 0.15  # seeds drawn with replacement
    one = paired_bootstrap(pairs[:1], refs, metrics=("rougeL",))
    assert one["settings"]["resample_seeds"] is False  # one seed: the input bootstrap
