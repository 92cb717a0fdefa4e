"""``make audit`` on the decode records' cost splits: the shares, the time a layer, the ideal
speedups they predict and the where-skipping-pays page recompute, and a planted defect is
caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from published import RESULTS, published_copy

from skipdecode.experiments.recompute.split import check_splits

NAME = "where-skipping-pays-cpu"


@pytest.fixture
def bench(tmp_path) -> Path:
    pages = (f"bench/{NAME}.json", f"bench/{NAME}.md", f"bench/{NAME}-split.md")
    results = published_copy(tmp_path, *pages)
    found = check_splits(results)
    assert found.differences == [] and found.checked > 100
    return results / "bench"


def test_the_committed_cost_splits_recompute():
    found = check_splits(RESULTS)
    assert found.differences == [] and found.checked > 1000


def test_a_split_that_does_not_give_its_shares_or_ideal_speedups_is_caught(bench):
    path = bench / f"{NAME}.json"
    record = json.loads(path.read_text())
    record["cells"][0]["cost_split"]["non_layer_ms"] *= 1.1
    path.write_text(json.dumps(record))
    differences = check_splits(bench.parent).differences
    for what in ("non_layer_fraction", "per_layer_ms", "skipdecode-2x: ideal_speedup"):
        assert any(what in d for d in differences), what
    assert any(f"{NAME}-split.md smollm2-135m 1: ceiling" in d for d in differences)


def test_a_split_page_cell_its_record_does_not_give_is_caught(bench):
    page = bench / f"{NAME}-split.md"
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| smollm2-135m | 8 |"))
    cells = row.split(" | ")
    cells[6] = "9.9x"  # the ceiling
    page.write_text(text.replace(row, " | ".join(cells)))
    assert any("ceiling '9.9x'" in d for d in check_splits(bench.parent).differences)


def test_a_decode_pages_cell_table_cell_its_record_does_not_give_is_caught(tmp_path):
    out = published_copy(tmp_path, "bench/decode-cpu.json", "bench/decode-cpu.md") / "bench"
    assert check_splits(tmp_path / "results").differences == []
    page = out / "decode-cpu.md"
    lines = page.read_text().splitlines(keepends=True)
    at = next(i for i, x in enumerate(lines) if x.startswith("| shape | batch | full step ms"))
    cells = lines[at + 2].split(" | ")
    cells[3] = f"{float(cells[3]) + 0.01:.2f}"  # outside layers ms
    lines[at + 2] = " | ".join(cells)
    page.write_text("".join(lines))
    differences = check_splits(tmp_path / "results").differences
    assert len(differences) == 1 and "cells opt-1.3b 1: outside layers ms" in differences[0]
