"""Published results (``results/<name>/``) are what the aggregate code makes from the committed
records, and publishing is whole or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from exports import make_fake_sweep

from skipdecode.experiments.aggregate import aggregate
from skipdecode.experiments.publish import publish
from skipdecode.experiments.seeds import summarize_seeds
from skipdecode.experiments.table import collect, format_markdown, format_results_markdown

RESULTS = Path(__file__).resolve().parents[2] / "results"
PUBLISHED = sorted(p for p in RESULTS.glob("*") if (p / "results.md").is_file())


@pytest.mark.parametrize("published", PUBLISHED, ids=lambda p: p.name)
def test_committed_tables_are_rebuilt_from_committed_records(published):
    rows = collect(published)
    assert rows and all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    assert (published / "cells.md").read_text() == format_markdown(rows)
    assert (published / "results.md").read_text() == format_results_markdown(summarize_seeds(rows))


def test_publish_copies_records_and_rebuilds_the_tables(tmp_path):
    sweep = make_fake_sweep(tmp_path / "sweep")
    aggregate(sweep, plots=False)
    out = publish(sweep, tmp_path / "results" / "fake", aggregate)
    assert [r["status"] for r in collect(out)] == [r["status"] for r in collect(sweep)]
    for table in ("results.md", "cells.md", "results.csv"):
        assert (out / table).read_text() == (sweep / table).read_text(), table
    assert (out / "0" / "record.json").is_file() and (out / "0" / "generations.jsonl").is_file()
    assert not any("cell_dir" in p.read_text() for p in out.glob("*/cell.json"))
    publish(sweep, out, aggregate)  # publishing again replaces the directory whole
    assert not list((tmp_path / "results").glob(".fake.*"))  # no staging left behind


def test_publish_refuses_an_empty_sweep_and_leaves_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="nothing to publish"):
        publish(tmp_path / "empty", tmp_path / "results" / "x", aggregate)
    assert not (tmp_path / "results" / "x").exists()
