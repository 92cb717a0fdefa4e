"""``make audit`` on E2E's metric-suite pages: each recomputes from its per-cell scores, and a
planted defect in the scores or the page is caught."""

from __future__ import annotations

import csv

from published import RESULTS, published_copy

from skipdecode.experiments.recompute.e2e_suite import check_e2e_suite


def test_the_committed_suite_pages_recompute():
    found = check_e2e_suite(RESULTS)
    assert found.differences == [] and found.checked > 400


def test_a_score_or_a_page_cell_that_moved_is_caught(tmp_path):
    names = ("e2e_smollm2/e2e_suite.csv", "e2e_smollm2/e2e_suite.md")
    folder = published_copy(tmp_path, *names) / "e2e_smollm2"
    assert check_e2e_suite(tmp_path / "results").differences == []
    page = folder / "e2e_suite.md"
    text = page.read_text()
    page.write_text(text.replace("| -8.96 [-13.97, -3.96] |", "| -8.96 [-13.97, -3.95] |", 1))
    differences = check_e2e_suite(tmp_path / "results").differences
    assert differences and all("target_2x" in d for d in differences)
    page.write_text(text)
    path = folder / "e2e_suite.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    next(r for r in rows if r["schedule"] == "full" and r["seed"] == "2")["cider"] = "9.9"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    differences = check_e2e_suite(tmp_path / "results").differences
    assert any("smollm2-135m full: CIDEr" in d for d in differences)
    assert any("differences smollm2-135m target_2x: ΔCIDEr" in d for d in differences)
