"""Extractive reference points: one copied source sentence scored on the cells' own inputs and
references, and full decoding compared with it over seeds."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from exports import write_published_cell
from rouge_score import rouge_scorer
from verdicts import verdict_from_columns

from skipdecode.data.errors import DataConfigError
from skipdecode.experiments.sweeps.extractive import write_extractive

SOURCES = [
    ["We study  parsing.", "We propose a fast parser.", "It beats baselines."],
    ["Losses matter.", "A study of the loss of deep nets."],
]
LABELS = [[0, 0, 1], [0, 1]]  # the data's oracle label: not always the best sentence here
REFERENCES = [["we propose a new model for parsing", "a parser that is fast"], ["a study of loss"]]


def _data(folder: Path) -> Path:
    folder.mkdir()
    rows = [
        {"source": s, "source_labels": labels, "target": refs, "paper_id": str(i)}
        for i, (s, labels, refs) in enumerate(zip(SOURCES, LABELS, REFERENCES, strict=True))
    ]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _full_cell(folder: Path, job: int, seed: int, outputs: list[str]) -> None:
    """A finished full SciTLDR cell as a published sweep holds it (inputs as the loader
    makes them: sentences joined, whitespace collapsed)."""
    rows = [
        {
            "index": i,
            "input": " ".join(" ".join(SOURCES[i]).split()),
            "references": REFERENCES[i],
            "output": out,
            "scores": {},
        }
        for i, out in enumerate(outputs)
    ]
    record = {
        "summary": {"bleu": 5.0 * seed},
        "quality": {"bleu": {"settings": {"tokenize": "13a"}}, "rouge": {"settings": {}}},
        "dataset": {"name": "scitldr", "split": "test"},
    }
    cell = {
        "dataset": "scitldr",
        "model": "smollm2-135m",
        "schedule": "full",
        "method": "full",
        "target_speedup": 1.0,
        "seed": seed,
    }
    write_published_cell(folder / str(job), rows, record, cell)


def _rouge_max(outputs: list[str], t: str) -> float:
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    per = []
    for out, group in zip(outputs, REFERENCES, strict=True):
        s = [scorer.score(r, out) for r in group]
        best = max(range(len(s)), key=lambda i: (s[i]["rouge1"].fmeasure, -i))
        per.append(s[best][t].fmeasure)
    return sum(per) / len(per)


def test_reference_points_score_copied_sentences_and_full_against_them(tmp_path):
    data = _data(tmp_path / "data")
    results = tmp_path / "results"
    outputs = {1: ["we propose a fast parser", "a study of the loss"], 2: ["a parser", "loss"]}
    for seed, outs in outputs.items():
        _full_cell(results, seed, seed, outs)
    paths = write_extractive(results, data)
    rows = {r["system"]: r for r in csv.DictReader(paths["csv"].open())}
    assert list(rows) == ["lead-1", "oracle (dataset label)", "oracle (best here)", "full"]
    points = {
        "lead-1": ["We study parsing.", "Losses matter."],
        "oracle (dataset label)": ["It beats baselines.", "A study of the loss of deep nets."],
        "oracle (best here)": ["We propose a fast parser.", "A study of the loss of deep nets."],
    }
    for system, texts in points.items():
        for t in ("rouge1", "rouge2", "rougeL"):
            got = float(rows[system][f"{t}_max"])
            assert got == pytest.approx(_rouge_max(texts, t), abs=1e-12), (system, t)
            # full - reference point, the mean over full's seeds
            full = sum(_rouge_max(o, t) for o in outputs.values()) / len(outputs)
            delta = float(rows[system][f"{t}_max_delta"])
            assert delta == pytest.approx(full - got, abs=1e-12), (system, t)
    assert rows["full"]["seeds"] == "1 2" and rows["full"]["rougeL_max_delta"] == ""
    assert float(rows["full"]["bleu"]) == pytest.approx(7.5)
    lead = rows["lead-1"]
    assert lead["rougeL_max_decided"] == verdict_from_columns(lead, "rougeL_max")
    assert float(lead["rougeL_max_delta_seed_ci95_low"]) <= float(lead["rougeL_max_delta"])
    md = paths["markdown"].read_text()
    assert "| smollm2-135m | oracle (best here) | 1 2 |" in md and "| full | 1 2 |" in md

    # the stored scores rebuild the pages byte for byte without the data
    written = {name: path.read_bytes() for name, path in paths.items()}
    (data / "test.jsonl").unlink()
    again = write_extractive(results, data)
    assert {name: path.read_bytes() for name, path in again.items()} == written
    # scores of other inputs are not reused: scoring again needs the data
    generations = results / "1" / "generations.jsonl"
    rows = [json.loads(line) for line in generations.open()]
    rows[0]["references"] = ["another reference"]
    generations.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataConfigError, match="data_dir="):
        write_extractive(results, data)
    assert paths["scores"].read_bytes() == written["scores"]


def _other_source(rows: list[dict]) -> None:
    rows[1]["source"] = ["Another abstract."]


def _one_string(rows: list[dict]) -> None:
    rows[0]["source"] = " ".join(SOURCES[0])  # one string: the same input, no sentences


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (_other_source, r"data_dir=.*evaluated input 'Losses matter"),
        (_one_string, r"field 'source' holds str .*list of sentences"),
    ],
    ids=["an input not in the data", "a source without sentences"],
)
def test_data_that_cannot_give_the_points_is_refused_and_nothing_written(tmp_path, change, match):
    data = _data(tmp_path / "data")
    rows = [json.loads(line) for line in (data / "test.jsonl").open()]
    change(rows)
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = tmp_path / "results"
    _full_cell(results, 1, 1, ["a", "b"])
    with pytest.raises(DataConfigError, match=match):
        write_extractive(results, data)
    assert not list(results.glob("extractive.*"))
