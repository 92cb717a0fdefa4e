"""``make audit`` on the matched-speed pages: each recomputes from its folder's cells, and a
planted defect in the cells or the page is caught."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from published import RESULTS, published_copy

from skipdecode.experiments.recompute.matched import check_matched


@pytest.fixture
def folder(tmp_path) -> Path:
    results = published_copy(tmp_path, "e2e_smollm2/cells.csv", "e2e_smollm2/matched.md")
    found = check_matched(results)
    assert found.differences == [] and found.checked > 50
    return results / "e2e_smollm2"


def test_the_committed_matched_pages_recompute():
    found = check_matched(RESULTS)
    assert found.differences == [] and found.checked > 300


def test_a_cell_whose_score_moved_changes_the_rows_it_anchors(folder):
    path = folder / "cells.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    full = next(r for r in rows if r["method"] == "full" and r["seed"] == "1")
    full["bleu"] = str(float(full["bleu"]) + 1.0)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    differences = check_matched(folder.parent).differences
    assert any("1.5x power law: ΔBLEU vs full" in d for d in differences)


def test_a_page_row_the_cells_do_not_give_is_caught(folder):
    page = folder / "matched.md"
    text = page.read_text()
    page.write_text(text.replace("| 2.0x | skipdecode | 1 2 3 |", "| 2.0x | skipdecode | 1 2 |", 1))
    assert any("seeds '1 2' != '1 2 3'" in d for d in check_matched(folder.parent).differences)
    page.write_text(text.replace("| 2.0x | skipdecode |", "| 2.1x | skipdecode |", 1))
    differences = check_matched(folder.parent).differences
    assert any("2.1x skipdecode: a row its record does not give" in d for d in differences)
    assert any("no row for e2e smollm2-135m 2.0x skipdecode" in d for d in differences)
