"""E2E's own metric suite: equal to the challenge's official script on committed generations.

The expected values were printed by the official script (tuetschek/e2e-metrics at 1b9c4d8,
``measure_scores.py -p`` run through its ``load_data``, ``run_coco_eval`` and ``run_pymteval``)
on the committed generations of two published cells, written out as its multi-reference text
files: SmolLM2 ``full`` seed 1 and ``early_exit_2x`` seed 1.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from skipdecode.evaluation.metrics import MetricSettingError, compute_all
from skipdecode.evaluation.metrics import e2e as suite_module
from skipdecode.evaluation.metrics.mteval import BLEUScore, NISTScore, mteval_tokenize
from skipdecode.experiments.sweeps.cell_outputs import cell_generations
from skipdecode.experiments.sweeps.identity import eval_identity

RESULTS = Path(__file__).resolve().parents[2] / "results" / "e2e_smollm2"
OFFICIAL = {
    "e2e_smollm2_curve-0": {  # full, seed 1
        "BLEU": 0.5574604741317079,
        "NIST": 7.380224041187135,
        "METEOR": 0.36715422878186244,
        "ROUGE_L": 0.5950499280836166,
        "CIDEr": 1.55499912153571,
    },
    "e2e_smollm2_methods-0": {  # early_exit_2x, seed 1
        "BLEU": 0.28932114156369965,
        "NIST": 4.08270675589259,
        "METEOR": 0.18815021355659717,
        "ROUGE_L": 0.4220483861708008,
        "CIDEr": 0.22289765179251586,
    },
}


def _generations(cell: str) -> tuple[list[str], list[list[str]]]:
    rows, _ = cell_generations({"record": str(RESULTS / cell / "record.json")})
    return [r["output"] for r in rows], [r["references"] for r in rows]


def test_mteval_bleu_and_nist_equal_the_official_script():
    """Pure Python, so in the default suite (the other cell, and the rest, in the slow test)."""
    cell = "e2e_smollm2_curve-0"
    outputs, references = _generations(cell)
    bleu, nist = BLEUScore(), NISTScore()
    for out, refs in zip(outputs, references, strict=True):
        tokens = [mteval_tokenize(r) for r in refs]  # as the suite does: once for both
        bleu.append(out, tokens)
        nist.append(out, tokens)
    assert bleu.score() == pytest.approx(OFFICIAL[cell]["BLEU"], rel=1e-12)
    assert nist.score() == pytest.approx(OFFICIAL[cell]["NIST"], rel=1e-12)


def test_mteval_tokenizes_punctuation_but_not_decimals():
    assert mteval_tokenize("It costs £20-25, rated 4.5 out of 5.") == [
        "It", "costs", "£20", "-", "25", ",", "rated", "4.5", "out", "of", "5", ".",
    ]  # fmt: skip


def test_bleu_brevity_uses_the_closest_reference_shorter_on_ties():
    short, long_ = BLEUScore(), BLEUScore()
    short.append("a b c d", ["a b c", "a b c d e"])  # both 1 token away: the shorter counts
    long_.append("a b c d", ["a b c d e"])
    assert short.ref_len == 3 and long_.ref_len == 5
    assert short.score() == pytest.approx(1.0) and long_.score() < 1.0


def test_missing_java_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(MetricSettingError, match=r"eval\.metrics\.e2e=true needs Java.*=false"):
        compute_all(["a b"], [["a b"]], {"bleu": False, "rouge": False, "e2e": True})


def test_e2e_section_is_off_by_default_and_checks_its_keys(monkeypatch):
    called = []
    monkeypatch.setattr(
        "skipdecode.evaluation.metrics.e2e_suite",
        lambda h, r: called.append(len(h)) or {"bleu": 1.0},
        raising=True,
    )
    off = {"bleu": False, "rouge": False}
    assert "e2e" not in compute_all(["a b"], [["a b"]], off)
    assert compute_all(["a b"], [["a b"]], {**off, "e2e": True})["e2e"] == {"bleu": 1.0}
    assert called == [1]
    with pytest.raises(MetricSettingError, match=r"eval\.e2e has unknown keys \['tokenize'\]"):
        compute_all(["a b"], [["a b"]], {**off, "e2e": {"tokenize": "13a"}})


def test_the_suite_switch_keeps_published_evaluation_ids():
    ev = {"split": "test", "metrics": {"bleu": {"tokenize": "13a"}}}
    off = {"split": "test", "metrics": {"bleu": {"tokenize": "13a"}, "e2e": False}}
    on = {"split": "test", "metrics": {"bleu": {"tokenize": "13a"}, "e2e": True}}
    assert eval_identity(off) == eval_identity(ev) != eval_identity(on)


@pytest.mark.slow
def test_whole_suite_equals_the_official_script():
    """METEOR, ROUGE-L and CIDEr too (Java; ~1 min), both cells through one METEOR process."""
    if shutil.which("java") is None:
        pytest.skip("no Java on this machine")
    systems, references = {}, None
    for cell in OFFICIAL:
        systems[cell], references = _generations(cell)
    scores = suite_module.e2e_suite_many(systems, references)
    for cell, official in OFFICIAL.items():
        got = scores[cell]
        assert got["bleu"] == pytest.approx(100 * official["BLEU"], rel=1e-12)
        assert got["nist"] == pytest.approx(official["NIST"], rel=1e-12)
        assert got["meteor"] == pytest.approx(100 * official["METEOR"], rel=1e-12)
        assert got["rouge_l"] == pytest.approx(100 * official["ROUGE_L"], rel=1e-12)
        assert got["cider"] == pytest.approx(official["CIDEr"], rel=1e-12)
