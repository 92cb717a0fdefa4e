"""``make audit`` on the lossless mode's draft comparisons: the committed pages recompute from
the benchmark records they compare, and a planted defect is caught."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skipdecode.experiments.recompute.drafts import check_drafts

RESULTS = Path(__file__).resolve().parents[2] / "results"
NAME = "speculative-budgets"


@pytest.fixture
def bench(tmp_path) -> Path:
    out = tmp_path / "results" / "bench"
    out.mkdir(parents=True)
    for name in (NAME, *(f"{NAME}-b{b}" for b in (6, 8, 10, 12))):
        shutil.copy(RESULTS / "bench" / f"{name}.json", out / f"{name}.json")
    shutil.copy(RESULTS / "bench" / f"{NAME}.md", out / f"{NAME}.md")
    found = check_drafts(tmp_path / "results")
    assert found.differences == [] and found.checked > 200
    return out


def test_the_committed_draft_comparisons_recompute():
    found = check_drafts(RESULTS)
    assert found.differences == [] and found.checked > 1000


def test_a_prompts_time_that_moved_changes_the_paired_interval(bench):
    path = bench / f"{NAME}-b6.json"
    record = json.loads(path.read_text())
    batch = record["cells"][0]["variants"]["speculative-k2"]["per_batch"][0]
    batch["decode_s"] *= 3
    path.write_text(json.dumps(record))
    assert any("against 6:" in d for d in check_drafts(bench.parent).differences)


def test_a_misplaced_chosen_mark_or_interval_is_caught(bench):
    page = bench / f"{NAME}.md"
    text = page.read_text()
    moved = text.replace("| 1 | 10 | 2 (chosen) |", "| 1 | 10 | 2 |", 1).replace(
        "| 1 | 8 | 2 |", "| 1 | 8 | 2 (chosen) |", 1
    )
    page.write_text(moved)
    differences = check_drafts(bench.parent).differences
    assert any("1 10 2: k '2' != '2 (chosen)'" in d for d in differences)
    assert any("1 8 2: k '2 (chosen)' != '2'" in d for d in differences)
    row = next(line for line in text.splitlines() if line.startswith("| 8 | +"))  # against 8
    page.write_text(text.replace(row, row.replace("[+", "[-", 1)))
    assert any("against 8:" in d for d in check_drafts(bench.parent).differences)


def test_a_seed_comparison_its_runs_do_not_give_is_caught(tmp_path):
    seeds = "speculative-b10-shape-seeds"
    out = tmp_path / "results" / "bench"
    out.mkdir(parents=True)
    record = json.loads((RESULTS / "bench" / f"{seeds}.json").read_text())
    for name in [*record["first"], *record["second"], f"results/bench/{seeds}.json"]:
        shutil.copy(RESULTS.parent / name, out / Path(name).name)
    shutil.copy(RESULTS / "bench" / f"{seeds}.md", out / f"{seeds}.md")
    assert check_drafts(tmp_path / "results").differences == []
    page = out / f"{seeds}.md"
    text = page.read_text()
    t_low = text.split("own differences [")[1].split(",")[0]
    page.write_text(text.replace(f"own differences [{t_low},", "own differences [+0.001,"))
    assert any("the intervals read" in d for d in check_drafts(tmp_path / "results").differences)
    page.write_text(text)
    first = out / Path(record["first"][1]).name
    run = json.loads(first.read_text())
    cell = next(c for c in run["cells"] if c["batch_size"] == 1)
    cell["variants"]["speculative-k2"]["per_batch"][0]["accepted"] += 5
    first.write_text(json.dumps(run))
    assert any("seed 2:" in d for d in check_drafts(tmp_path / "results").differences)
