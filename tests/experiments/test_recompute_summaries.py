"""``make audit`` over the summary pages: ROUGE counted from the generations, and planted
defects in the page or in a cell's outputs are caught."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from skipdecode.evaluation.metrics.text import rouge
from skipdecode.experiments.recompute.rouge import rouge_l_best, rouge_scores
from skipdecode.experiments.recompute.summaries import check_summaries
from skipdecode.experiments.sweeps.sources import read_generations

RESULTS = Path(__file__).resolve().parents[2] / "results"


def test_rouge_is_counted_as_rouge_score_counts_it_in_both_conventions():
    outputs = ["The model learns classes in bursts.", "", "running runs ran; the the the"]
    references = [
        ["A model that learns classes in bursts of examples.", "Bursts of classes."],
        ["Anything at all."],
        ["The runner runs.", "the the", "ran running"],
    ]
    scored = rouge(outputs, references, types=("rouge1", "rouge2", "rougeL"), per_example=True)
    for i, (output, refs) in enumerate(zip(outputs, references, strict=True)):
        mine = rouge_scores(output, refs)
        assert mine["rougeL"] == rouge_l_best(output, refs)["rougeL"]  # the per-type max alone
        for key, value in mine.items():
            assert value == pytest.approx(scored["per_example"][key]["f"][i], abs=1e-15), key


def test_the_bit_parallel_lcs_is_rouge_scores_table():
    import random

    from rouge_score.rouge_scorer import _lcs_table

    from skipdecode.experiments.recompute.rouge import _lcs_length

    rng = random.Random(0)
    for _ in range(3000):
        a = [rng.choice("abcde") for _ in range(rng.randint(0, 70))]  # past one 64-bit word
        b = [rng.choice("abcdef") for _ in range(rng.randint(0, 40))]
        assert _lcs_length(tuple(a), tuple(b)) == _lcs_table(b, a)[-1][-1], (a, b)


def test_the_13a_tokens_are_sacrebleus():
    import random

    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    from sacrebleu.tokenizers.tokenizer_re import TokenizerRegexp

    from skipdecode.experiments.recompute.bleu import _SPACED, _tokens

    first_rule = TokenizerRegexp()._re[0][0]
    spaced = {chr(c) for c in range(0x3000) if first_rule.fullmatch(chr(c))}
    assert spaced == {chr(c) for c in _SPACED}
    rng = random.Random(0)
    pieces = [*"ab1 9.,-&;\n\t'é/(<>", "&amp;", "&quot;", "&lt;", "&gt;", "<skipped>", "-\n", "..."]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        assert _tokens(text) == tuple(Tokenizer13a()(text.rstrip()).split()), repr(text)


@pytest.mark.parametrize("lowercase", [False, True])
def test_bleu_is_counted_as_sacrebleu_counts_it(lowercase):
    from sacrebleu.metrics import BLEU

    from skipdecode.experiments.recompute.bleu import bleu_from_statistics, bleu_statistics

    outputs = ["The cat sat on the Mat.", "", "a b", "Dogs run fast, don't they?", "x y z w v"]
    references = [
        ["the cat sat on the mat .", "A cat was on the mat"],
        ["nothing"],
        ["a b c d e f"],
        ["Dogs run fast, don't they?", "dogs run", "Fast dogs run."],
        ["q r s t u"],
    ]
    for lo, hi in ((0, 5), (0, 3), (2, 3), (3, 5), (4, 5)):
        streams = [[r[k] if k < len(r) else None for r in references[lo:hi]] for k in range(3)]
        expected = BLEU(lowercase=lowercase).corpus_score(outputs[lo:hi], streams).score
        stats = bleu_statistics(outputs[lo:hi], references[lo:hi], lowercase)
        assert bleu_from_statistics(stats.sum(0)) == pytest.approx(expected, abs=1e-12), (lo, hi)


def test_bleu_of_many_draws_at_once_is_bleu_of_each():
    from skipdecode.experiments.recompute.bleu import bleu_from_statistics, bleu_of_rows

    rng = np.random.default_rng(0)
    total = rng.integers(0, 6, size=(400, 4)).astype(float)
    correct = np.floor(total * rng.random((400, 4)))  # some orders without a match, some empty
    lengths = rng.integers(0, 9, size=(400, 2)).astype(float)
    rows = np.concatenate([correct, total, lengths], axis=1)
    expected = [bleu_from_statistics(r) for r in rows]
    assert bleu_of_rows(rows) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert {x == 0 for x in expected} == {True, False}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("summaries") / "results"
    shutil.copytree(RESULTS / "scitldr_smollm2", results / "scitldr_smollm2")
    found = check_summaries(results)
    assert found.differences == [] and found.checked > 400
    return results


def _edit(path: Path, schedule: str, column: str, value: str) -> None:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    next(r for r in rows if r["schedule"] == schedule)[column] = value
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("rougeL_max", "0.33"),  # a mean over seeds
        ("rougeL_max_delta", "-0.02"),  # a difference against full
        ("rougeL_max_delta_ci95_low", "-0.05"),  # a bootstrap bound
        ("rougeL_max_delta_seed_ci95_high", "0.0"),  # a per-seed t bound
        ("rougeL_max_decided", "undecided"),  # what the intervals decide
        ("bleu_delta_ci95_high", "-1.0"),  # a BLEU bootstrap bound (corpus BLEU per draw)
    ],
)
def test_a_summary_number_that_does_not_recompute_is_caught(folder, tmp_path, column, value):
    results = tmp_path / "results"
    shutil.copytree(folder, results)
    _edit(results / "scitldr_smollm2" / "summaries.csv", "target_2x", column, value)
    differences = check_summaries(results).differences
    assert len(differences) == 1 and f"target_2x (skipdecode): {column} " in differences[0]


def test_an_output_changed_after_the_page_was_written_is_caught(folder, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(folder, results)
    job = next(
        r["job"]
        for r in csv.DictReader((results / "scitldr_smollm2" / "cells.csv").open())
        if r["schedule"] == "target_3x"
    )
    path = results / "scitldr_smollm2" / job / "generations.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    rows[0]["output"] = read_generations(path)[0]["references"][0]  # its source kept apart
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    differences = check_summaries(results).differences
    assert any("target_3x (skipdecode): rougeL_max " in d for d in differences)
    assert any("target_3x (skipdecode): rougeL_max_delta " in d for d in differences)


def test_a_reference_point_whose_kept_outputs_changed_is_caught(folder, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(folder, results)
    path = results / "scitldr_smollm2" / "extractive.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    lead = next(r for r in rows if r["system"] == "lead-1")
    lead["output"] = "nothing of the abstract"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    differences = check_summaries(results).differences
    assert any("extractive.csv lead-1: rougeL_max " in d for d in differences)
    assert any("extractive.csv lead-1: rougeL_max_delta " in d for d in differences)


def _copied(tmp_path: Path, monkeypatch, *names: str) -> None:
    for name in names:
        shutil.copytree(RESULTS / name, tmp_path / "results" / name)
    monkeypatch.chdir(tmp_path)


def _same(tmp_path: Path, *pages: str) -> None:
    for page in pages:
        assert (tmp_path / "results" / page).read_bytes() == (RESULTS / page).read_bytes(), page


@pytest.mark.slow  # rescoring every SciTLDR cell with the writers' ROUGE (18 s); the audit
# recomputes the same numbers from the generations in the default suite
def test_the_summary_pages_are_the_ones_their_writers_make_from_the_committed_cells(
    tmp_path, monkeypatch
):
    """The audit checks the CSVs; the pages beside them are written from the same cells, so a
    committed page that its writer would not write again is caught here."""
    from skipdecode.experiments.sweeps.extractive import write_extractive
    from skipdecode.experiments.sweeps.summaries import write_summaries

    _copied(tmp_path, monkeypatch, "scitldr_smollm2")
    write_summaries("results/scitldr_smollm2")
    write_extractive("results/scitldr_smollm2")
    _same(tmp_path, "scitldr_smollm2/summaries.md", "scitldr_smollm2/extractive.md")


@pytest.mark.slow
def test_the_one_model_pages_are_the_ones_their_writer_makes_from_the_committed_cells(
    tmp_path, monkeypatch
):
    from skipdecode.experiments.sweeps.one_model import write_one_model

    pages = sorted((RESULTS / "scitldr_randomized").glob("one_model*.csv"))
    against = {next(csv.DictReader(page.open()))["against"] for page in pages}
    _copied(tmp_path, monkeypatch, "scitldr_randomized", *(Path(a).name for a in against))
    for page in pages:
        against = next(csv.DictReader(page.open()))["against"]
        write_one_model("results/scitldr_randomized", against, page=page.stem)
        _same(tmp_path, f"scitldr_randomized/{page.stem}.md", f"scitldr_randomized/{page.name}")


def test_a_missing_row_or_a_difference_shown_without_a_pair_is_caught(folder, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(folder, results)
    path = results / "scitldr_smollm2" / "summaries.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows = [r for r in rows if r["schedule"] != "target_4x"]
    next(r for r in rows if r["schedule"] == "full")["rougeL_max_delta"] = "0.01"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    differences = check_summaries(results).differences
    assert any("no row for the cells of" in d and "target_4x" in d for d in differences)
    assert any("full (full): rougeL_max_delta '0.01' != None" in d for d in differences)
