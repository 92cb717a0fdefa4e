"""``make audit`` on the lossless mode's draft comparisons: the committed pages recompute from
the benchmark records they compare, and a planted defect is caught."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from published import RESULTS, published_copy

from skipdecode.experiments.recompute.drafts import check_drafts

NAME = "speculative-budgets"


@pytest.fixture
def bench(tmp_path) -> Path:
    runs = [f"bench/{NAME}-b{b}.json" for b in (6, 8, 10, 12)]
    results = published_copy(tmp_path, f"bench/{NAME}.json", f"bench/{NAME}.md", *runs)
    found = check_drafts(results)
    assert found.differences == [] and found.checked > 200
    return results / "bench"


def test_the_committed_draft_comparisons_recompute():
    found = check_drafts(RESULTS)
    assert found.differences == [] and found.checked > 1000


def test_a_prompts_time_that_moved_changes_the_paired_interval(bench):
    path = bench / f"{NAME}-b6.json"
    record = json.loads(path.read_text())
    for name, variant in record["cells"][0]["variants"].items():  # whichever k is its best
        if name.startswith("speculative"):
            variant["per_batch"][0]["decode_s"] *= 3
    path.write_text(json.dumps(record))
    assert any("against 6:" in d for d in check_drafts(bench.parent).differences)


def test_a_misplaced_chosen_mark_or_interval_is_caught(bench):
    page = bench / f"{NAME}.md"
    text = page.read_text()
    chosen = re.search(r"^\| 1 \| (\d+) \| 2 \(chosen\) \|", text, re.M)[1]
    other = next(b for b in ("6", "8", "10", "12") if b != chosen)
    moved = text.replace(f"| 1 | {chosen} | 2 (chosen) |", f"| 1 | {chosen} | 2 |", 1).replace(
        f"| 1 | {other} | 2 |", f"| 1 | {other} | 2 (chosen) |", 1
    )
    page.write_text(moved)
    differences = check_drafts(bench.parent).differences
    assert any(f"1 {chosen} 2: k '2' != '2 (chosen)'" in d for d in differences)
    assert any(f"1 {other} 2: k '2 (chosen)' != '2'" in d for d in differences)
    row = next(line for line in text.splitlines() if re.match(r"\| \d+ \| [+-]\d.*\[\+", line))
    against = row.split("|")[1].strip()  # a row against another draft with a positive bound
    page.write_text(text.replace(row, row.replace("[+", "[-", 1)))
    assert any(f"against {against}:" in d for d in check_drafts(bench.parent).differences)


def test_a_seed_comparison_its_runs_do_not_give_is_caught(tmp_path):
    seeds = "speculative-b10-shape-seeds"
    record = json.loads((RESULTS / "bench" / f"{seeds}.json").read_text())
    runs = [
        Path(name).relative_to("results").as_posix() for name in record["first"] + record["second"]
    ]
    out = published_copy(tmp_path, f"bench/{seeds}.json", f"bench/{seeds}.md", *runs) / "bench"
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
