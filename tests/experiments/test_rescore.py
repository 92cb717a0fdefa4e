"""BERTScore added to published cells evaluated without it (a GPU run's): the same scores the
evaluation computed, written into the record, its summary and each generation row, with where
they were computed; a scored job is left alone, and a folder that is not one is refused."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from skipdecode.experiments.sweeps.rescore import RescoreError, main, rescore_folder
from skipdecode.experiments.sweeps.sources import read_generations
from skipdecode.io import write_jsonl_gz_atomic

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "compare_tiny"


def _without_bertscore(job: Path) -> None:
    """The job as a run with ``eval.metrics.bertscore.enabled=false`` publishes it."""
    record = json.loads((job / "record.json").read_text())
    del record["quality"]["bertscore"]
    record["summary"] = {k: v for k, v in record["summary"].items() if "bertscore" not in k}
    record["config"]["eval"]["metrics"]["bertscore"]["enabled"] = False
    (job / "record.json").write_text(json.dumps(record, indent=2))
    rows = read_generations(job / "generations.jsonl.gz")
    for row in rows:
        del row["scores"]["bertscore_f1"]
    write_jsonl_gz_atomic(job / "generations.jsonl.gz", rows)


def test_rescoring_gives_the_evaluations_own_bertscore_and_says_where(tmp_path, capsys):
    folder = tmp_path / "compare_tiny"
    folder.mkdir()
    shutil.copy2(PUBLISHED / "sources.jsonl.gz", folder)
    shutil.copytree(PUBLISHED / "0", folder / "0")
    original = json.loads((folder / "0" / "record.json").read_text())
    before = [
        r["scores"]["bertscore_f1"] for r in read_generations(folder / "0/generations.jsonl.gz")
    ]
    _without_bertscore(folder / "0")

    main([str(folder)])
    assert "BERTScore added to 1 jobs 0" in capsys.readouterr().out
    record = json.loads((folder / "0" / "record.json").read_text())
    scored, published = record["quality"]["bertscore"], original["quality"]["bertscore"]
    for key, column in (("precision", "p"), ("recall", "r"), ("f1", "f1")):
        # the same settings on a CPU: BERTScore moves in the ninth decimal between runs
        assert scored[key] == pytest.approx(published[key], abs=1e-6)
        assert record["summary"][f"bertscore_{column}"] == scored[key]
    assert record["summary"] == pytest.approx(original["summary"], abs=1e-6)  # nothing else moved
    apart = record["quality"]["computed_apart"]["bertscore"]
    assert apart["settings"]["enabled"] is True and apart["device"] and apart["git"]
    assert record["config"]["eval"]["metrics"]["bertscore"]["enabled"] is False  # as it ran
    after = [
        r["scores"]["bertscore_f1"] for r in read_generations(folder / "0/generations.jsonl.gz")
    ]
    assert after == pytest.approx(before, abs=1e-6)
    first = gzip.decompress((folder / "0/generations.jsonl.gz").read_bytes()).split(b"\n")[0]
    assert "source" in json.loads(first)  # packed again
    assert rescore_folder(folder) == []  # scored: left as it is


def test_a_folder_without_published_jobs_is_refused_by_name(tmp_path):
    with pytest.raises(RescoreError, match="not a published results folder"):
        rescore_folder(tmp_path)
