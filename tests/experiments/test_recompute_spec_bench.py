"""``make audit`` on Spec-Bench's pages: the committed pages recompute from their runs' answers,
and a planted defect in a page or an answer is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from published import RESULTS, published_copy

from skipdecode.experiments.recompute.spec_bench import check_spec_bench

RUNS = ("spec-bench-b8-base", "spec-bench-b8-finetuned", "spec-bench-240-b8-base")
PAGES = ("spec-bench-b8-compare", "spec-bench-240-b8-base-intervals")


@pytest.fixture
def results(tmp_path) -> Path:
    """Two small runs, a third with its intervals page, and the comparison of the first two,
    laid out as in the repository (records name their runs by ``results/bench/<name>``)."""
    pages = [f"bench/{name}{suffix}" for name in (*RUNS, *PAGES) for suffix in (".json", ".md")]
    results = published_copy(tmp_path, *(f"bench/{name}" for name in RUNS), *pages)
    found = check_spec_bench(results)
    assert found.differences == [] and found.checked > 300
    return results


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new, 1))


def test_the_committed_spec_bench_pages_recompute():
    found = check_spec_bench(RESULTS)
    assert found.differences == []
    assert found.checked > 1000


def test_a_run_page_cell_its_answers_do_not_give_is_caught(results):
    page = results / "bench" / "spec-bench-b8-base.md"
    _replace(
        page,
        "| plain | overall | 18 | 1839 | 1.00 | 24.4 |",
        "| plain | overall | 18 | 1839 | 1.00 | 24.5 |",
    )
    differences = check_spec_bench(results).differences
    assert any("plain overall: tokens/s '24.5'" in d for d in differences)


def test_an_answer_whose_time_moved_changes_the_page_it_gave(results):
    answers = results / "bench" / "spec-bench-b8-base" / "plain.jsonl"
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    rows[0]["choices"][0]["wall_time"] = [2 * t for t in rows[0]["choices"][0]["wall_time"]]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    differences = check_spec_bench(results).differences
    assert any("spec-bench-b8-base.md plain mt_bench: tokens/s" in d for d in differences)
    assert any("spec-bench-b8-compare.md" in d and "speedup" in d for d in differences)


def test_an_interval_the_draws_do_not_give_or_a_missing_row_is_caught(results):
    page = results / "bench" / "spec-bench-240-b8-base-intervals.md"
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| qa |"))
    bound = row.split("[")[1].split(",")[0]
    moved = f"{float(bound) + 0.001:.3f}"
    page.write_text(text.replace(row, row.replace(f"[{bound},", f"[{moved},", 1)))
    differences = check_spec_bench(results).differences
    assert any("intervals.md qa: mean accepted tokens per step" in d for d in differences)
    page.write_text(text.replace(row + "\n", ""))
    assert any("no row for qa" in d for d in check_spec_bench(results).differences)


def test_a_comparison_that_misstates_a_difference_or_the_turns_alike_is_caught(results):
    page = results / "bench" / "spec-bench-b8-compare.md"
    text = page.read_text()
    alike = text[text.index("answered alike by both models: ") :].split(" of ")[0].split(": ")[1]
    page.write_text(text.replace(f"models: {alike} of", f"models: {int(alike) + 1} of"))
    assert any("plain turns alike" in d for d in check_spec_bench(results).differences)
    row = next(line for line in text.splitlines() if line.startswith("| mean accepted tokens"))
    delta = row.split("|")[4].split()[0]
    flipped = delta.replace("+", "-") if delta.startswith("+") else "+" + delta.lstrip("-")
    page.write_text(text.replace(row, row.replace(delta, flipped, 1)))
    differences = check_spec_bench(results).differences
    assert any("overall mean accepted tokens per step" in d for d in differences)
