"""``make audit`` on the lossless-mode benchmark: the committed records and pages recompute
from their counts and seconds, and a planted defect in a record or a page is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from published import RESULTS, published_copy

from skipdecode.experiments.recompute.speculative import check_speculative

#: One record of the current layout (with a round's cost split) and one of the first.
RECORDS = ("speculative-budgets-b10", "speculative-smollm2")


@pytest.fixture
def bench(tmp_path) -> Path:
    pages = [f"bench/{name}{suffix}" for name in RECORDS for suffix in (".json", ".md")]
    results = published_copy(tmp_path, *pages)
    found = check_speculative(results)
    assert found.differences == [] and found.checked > 200
    return results / "bench"


def _differences(bench: Path) -> list[str]:
    return check_speculative(bench.parent).differences


def _edit_record(bench: Path, name: str, edit) -> None:
    path = bench / f"{name}.json"
    record = json.loads(path.read_text())
    edit(record["cells"][0]["variants"])
    path.write_text(json.dumps(record))


def test_the_committed_lossless_benchmarks_recompute():
    found = check_speculative(RESULTS)
    assert found.differences == [] and found.checked > 2000


def test_a_count_or_a_time_that_does_not_give_the_records_figures_is_caught(bench):
    def fewer_accepted(variants):
        variants["speculative-k2"]["per_batch"][0]["accepted"] -= 1

    _edit_record(bench, "speculative-budgets-b10", fewer_accepted)
    differences = _differences(bench)
    assert any("speculative-k2: acceptance_rate" in d for d in differences)
    assert any("speculative-k2: tokens_per_verify" in d for d in differences)

    def slower_full(variants):
        variants["skipdecode-full"]["ms_per_token"] *= 1.01

    _edit_record(bench, "speculative-smollm2", slower_full)
    assert any(
        "speculative-smollm2.json batch 1 speculative-k2: speedup_vs_full" in d
        for d in _differences(bench)
    )


def test_a_median_its_repeats_do_not_give_is_caught(bench):
    def repeats(variants):
        k2 = variants["speculative-k2"]
        k2["decode_s_per_repeat"] = [k2["decode_s"], 2 * k2["decode_s"], 0.5 * k2["decode_s"]]
        for b in k2["per_batch"]:
            b["decode_s_per_repeat"] = [b["decode_s"], b["decode_s"] + 1.0]

    _edit_record(bench, "speculative-budgets-b10", repeats)
    differences = _differences(bench)
    assert not any("decode_s (median)" in d for d in differences)
    assert any("batch 0 decode_s" in d for d in differences)  # the median of two is their mean


def test_a_page_cell_or_row_its_record_does_not_give_is_caught(bench):
    page = bench / "speculative-budgets-b10.md"
    text = page.read_text()
    row = next(line for line in text.splitlines() if "| speculative-k2 |" in line)
    cells = row.split(" | ")
    cells[-3] = "9.99x"  # measured vs full
    page.write_text(text.replace(row, " | ".join(cells)))
    assert any("measured vs full '9.99x'" in d for d in _differences(bench))
    page.write_text(text.replace(row + "\n", ""))
    assert any("no row for export compiled 1 speculative-k2" in d for d in _differences(bench))


def test_a_column_lost_from_a_page_of_todays_layout_is_caught(bench):
    page = bench / "speculative-budgets-b10.md"
    lines = page.read_text().splitlines()
    cut = [
        line[: line.rstrip().rstrip("|").rindex("|") + 1] if line.startswith("|") else line
        for line in lines
    ]
    page.write_text("\n".join(cut) + "\n")  # the last column, exact, gone
    assert any("no column 'exact'" in d for d in _differences(bench))
