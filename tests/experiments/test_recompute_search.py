"""``make audit`` on the schedule-search pages: each recomputes from its trials and the
one-model page it names, and ``make docs`` writes it again from them; a planted defect is
caught."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from published import RESULTS, published_copy

from skipdecode.experiments.recompute.search import check_search
from skipdecode.experiments.search.front import rewrite_page

FOLDER = "scitldr_randomized"


@pytest.fixture
def results(tmp_path) -> Path:
    results = published_copy(tmp_path, f"{FOLDER}/search", f"{FOLDER}/one_model.csv")
    found = check_search(results)
    assert found.differences == [] and found.checked > 60
    return results


def test_the_committed_search_pages_recompute_and_rewrite_unchanged(tmp_path):
    found = check_search(RESULTS)
    assert found.differences == [] and found.checked > 100
    for folder in ("scitldr_randomized", "e2e_randomized"):
        page = RESULTS / folder / "search" / "search.md"
        copy = published_copy(tmp_path, folder) / folder / "search" / "search.md"
        lines = page.read_text().splitlines(keepends=True)
        copy.write_text("".join(lines[:-1]))  # a row lost: the rewrite must put it back
        rewrite_page(Path("results") / folder / "search", tmp_path)
        assert copy.read_text() == page.read_text()


def test_a_trial_whose_quality_moved_is_caught(results):
    path = results / FOLDER / "search" / "14" / "trial.json"
    trial = json.loads(path.read_text())
    trial["delta"] = -9.0  # below trial 5, at a slower speed: off the front, no longer the best
    path.write_text(json.dumps(trial))
    differences = check_search(results).differences
    assert any("search.md 14: Δ '-4.62'" in d for d in differences)
    assert any("search.md 14: front 'yes' != ''" in d for d in differences)
    assert any("best at speed" in d for d in differences)


def test_a_trial_that_failed_is_a_row_of_its_own(results):
    path = results / FOLDER / "search" / "3" / "trial.json"
    trial = {**json.loads(path.read_text()), "status": "invalid", "error": "no plan"}
    path.write_text(json.dumps(trial))
    page = results / FOLDER / "search" / "search.md"
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 3 |"))
    page.write_text(text.replace(row, f"| 3 | {trial['schedule']} | invalid: no plan |  |  |  |"))
    assert check_search(results).differences == []
    page.write_text(text.replace(row, f"| 3 | {trial['schedule']} | invalid: other |  |  |  |"))
    differences = check_search(results).differences
    assert any("search.md 3: speedup 'invalid: other'" in d for d in differences)


def test_a_stale_cell_beside_the_front_is_caught(results):
    path = results / FOLDER / "one_model.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    row = next(r for r in rows if r["schedule"] == "target_3x")
    row["per_schedule_measured_speedup_decode"] = "3.13"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    page = (results / FOLDER / "search" / "search.md").read_text()
    printed = re.search(r"^\| target_3x \| ([\d.]+x) \|", page, re.M).group(1)
    assert printed != "3.13x"
    differences = check_search(results).differences
    assert differences == [
        f"{FOLDER}/search/search.md beside target_3x: speedup '{printed}' != [3.13]"
    ]
