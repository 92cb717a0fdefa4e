"""``make audit``'s results tables: every difference from full recomputes from the cells'
generations, every results page prints its table, and each planted defect is caught."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from skipdecode.experiments.recompute.deltas import check_deltas

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "compare_tiny"


@pytest.fixture
def folder(tmp_path) -> Path:
    """A copy of a published folder with three seeds a row (so every interval is there)."""
    results = tmp_path / "results"
    shutil.copytree(PUBLISHED, results / PUBLISHED.name)
    return results / PUBLISHED.name


def _differences(folder: Path) -> list[str]:
    return check_deltas(folder.parent).differences


def _edit(path: Path, schedule: str, column: str, value: str) -> None:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row["schedule"] == schedule:
            row[column] = value
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_the_published_differences_and_page_recompute(folder):
    found = check_deltas(folder.parent)
    assert found.differences == []
    assert found.checked > 500  # every row's deltas and every page cell


@pytest.mark.parametrize(
    "column",
    ["bleu_delta", "bleu_delta_ci95_low", "rougeL_delta_ci95_high",
     "bertscore_f1_delta_seed_ci95_low", "delta_seeds"],
)  # fmt: skip
def test_a_difference_that_the_generations_do_not_give_is_caught(folder, column):
    _edit(folder / "results.csv", "target_2x", column, "0.5")
    found = _differences(folder)
    assert any("results.csv target_2x" in d and column in d for d in found), found


def test_a_difference_on_the_full_row_is_caught(folder):
    _edit(folder / "results.csv", "full", "bleu_delta", "0.0")
    assert any("results.csv full (full): bleu_delta" in d for d in _differences(folder))


def test_a_results_page_that_misprints_its_table_is_caught(folder):
    page = folder / "results.md"
    lines = page.read_text(encoding="utf-8").splitlines()
    row = next(i for i, line in enumerate(lines) if "| target_2x |" in line)
    cells = lines[row].split(" | ")
    bleu = next(i for i, c in enumerate(cells) if c.startswith("+") or c.startswith("-"))
    cells[bleu] = "+9.99" + cells[bleu][cells[bleu].index(" ") :]
    lines[row] = " | ".join(cells)
    dropped = next(i for i, line in enumerate(lines) if "| target_4x |" in line)
    del lines[dropped]
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = _differences(folder)
    assert any("results.md" in d and "target_2x" in d and "ΔBLEU" in d for d in found), found
    assert any("results.md: no row for" in d and "target_4x" in d for d in found), found


def test_an_output_changed_after_scoring_is_caught(folder):
    job = next(
        r["job"] for r in csv.DictReader((folder / "cells.csv").open()) if r["schedule"] == "full"
    )
    path = folder / job / "generations.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(path, "rt", encoding="utf-8")]
    rows[0]["output"] = "an output nobody scored"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    found = _differences(folder)
    assert any(f"cells.csv job {job}: rougeL (from its outputs)" in d for d in found), found
    assert any("results.csv" in d and "rougeL_delta" in d for d in found), found


def _budget_folder(
    tmp_path: Path,
    last: tuple = (-0.5, -1.5, 0.5),
    middle: tuple = (-2, -3, -1, -4, 0.5),
    first: tuple = (-5, -7, -3, -9, -1),
) -> Path:
    from skipdecode.experiments.sweeps.budget import write_budget
    from skipdecode.experiments.sweeps.table import RESULT_COLUMNS, csv_text

    def row(schedule, steps, delta, low, high, seed_low=None, seed_high=None):
        return {"status": "ok", "schedule": schedule, "train_steps": steps,
                "bleu_mean": 60.0 + (delta or 0), "bleu_delta": delta,
                "bleu_delta_ci95_low": low, "bleu_delta_ci95_high": high,
                "bleu_delta_seed_ci95_low": seed_low, "bleu_delta_seed_ci95_high": seed_high,
                "seeds": "1 2", "delta_seeds": "1 2"}  # fmt: skip

    rows = [{**row("full", s, None, None, None), "seeds": "1 2 3"} for s in (90, 180, 270)]
    rows += [row("target_2x", 90, *first), row("target_2x", 180, *middle)]
    rows += [row("target_2x", 270, *last)]
    folder = tmp_path / "results" / "budget_tiny"
    folder.mkdir(parents=True)
    (folder / "results.csv").write_text(csv_text(rows, [*RESULT_COLUMNS, "train_steps"]))
    write_budget(folder, plot=False)
    return folder


def test_a_budget_page_recomputes_and_each_planted_defect_is_caught(tmp_path):
    from skipdecode.experiments.recompute.budget import check_budget

    folder = _budget_folder(tmp_path)
    clean = check_budget(folder.parent)
    assert clean.differences == [] and clean.checked > 30
    page = (folder / "budget.md").read_text(encoding="utf-8")
    assert "target_2x: not separable from full from 180 steps on." in page

    _edit(folder / "budget.csv", "target_2x", "delta_ci95_high", "0.25")
    assert any("budget.csv target_2x" in d and "delta_ci95_high" in d
               for d in check_budget(folder.parent).differences)  # fmt: skip

    folder = _budget_folder(tmp_path / "b")
    (folder / "budget.md").write_text(page.replace("from 180 steps on", "from 90 steps on"))
    assert any("the sentence is not" in d for d in check_budget(folder.parent).differences)

    folder = _budget_folder(tmp_path / "c")
    (folder / "budget.md").write_text(page.replace("-2.00 [-3.00, -1.00]", "-2.00 [-3.10, -1.00]"))
    assert any("budget.md target_2x 180" in d for d in check_budget(folder.parent).differences)

    # full's mean covers its own seeds, and the page must say which: a page that shows full's
    # seeds as the paired ones is caught
    assert "| target_2x | 180 | 1 2 3 | 60.00 | 1 2 | 58.00 | 1 2 |" in page
    folder = _budget_folder(tmp_path / "d")
    (folder / "budget.md").write_text(page.replace("| 180 | 1 2 3 |", "| 180 | 1 2 |"))
    assert any("budget.md target_2x 180" in d and "full seeds" in d
               for d in check_budget(folder.parent).differences)  # fmt: skip
    _edit(folder / "budget.csv", "target_2x", "full_seeds", "1 2")
    assert any("budget.csv target_2x" in d and "full_seeds" in d
               for d in check_budget(folder.parent).differences)  # fmt: skip


def test_a_budget_sentence_must_say_when_only_the_per_seed_interval_leaves_it_undecided(tmp_path):
    """At 180 and 270 steps every seeds x inputs interval excludes 0 and only the per-seed
    t-interval includes it: the sentence says so, and a page without that clause (or with it
    where a seeds x inputs interval includes 0) is caught."""
    from skipdecode.experiments.recompute.budget import check_budget

    clause = " (there every seeds x inputs interval excludes 0; only the per-seed one includes it)"
    folder = _budget_folder(tmp_path / "a", last=(-1.0, -2.0, -0.5, -3.0, 1.0))
    page = (folder / "budget.md").read_text(encoding="utf-8")
    assert f"target_2x: not separable from full from 180 steps on{clause}." in page
    assert check_budget(folder.parent).differences == []
    (folder / "budget.md").write_text(page.replace(clause, ""), encoding="utf-8")
    assert any("the sentence is not" in d for d in check_budget(folder.parent).differences)

    # nothing decided (90 is undecided too), every seeds x inputs interval excluding 0
    both = (-1.0, -2.0, -0.5, -3.0, 1.0)
    folder = _budget_folder(tmp_path / "n", last=both, middle=both, first=both)
    page = (folder / "budget.md").read_text(encoding="utf-8")
    assert f"target_2x: not separable from full at any budget measured{clause}." in page
    assert check_budget(folder.parent).differences == []
    (folder / "budget.md").write_text(page.replace(clause, ""), encoding="utf-8")
    assert any("the sentence is not" in d for d in check_budget(folder.parent).differences)

    # undecided from 180: at 270 (b) or at 180 alone (c) a seeds x inputs interval includes 0
    for name, last, middle in (
        ("b", (-0.5, -1.5, 0.5), (-2, -3, -1, -4, 0.5)),
        ("c", both, (-1.0, -3.0, 0.5, -4.0, 0.5)),
    ):
        folder = _budget_folder(tmp_path / name, last=last, middle=middle)
        page = (folder / "budget.md").read_text(encoding="utf-8")
        assert "target_2x: not separable from full from 180 steps on.\n" in page
        planted = page.replace("from 180 steps on.", f"from 180 steps on{clause}.")
        assert planted != page
        (folder / "budget.md").write_text(planted, encoding="utf-8")
        assert any("the sentence is not" in d for d in check_budget(folder.parent).differences)
