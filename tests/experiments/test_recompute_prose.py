"""``make audit``'s check of the decimal numbers README's and ``docs/``' prose states outside
intervals and generated blocks: each found in a source its section names, or worked out in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skipdecode.experiments.recompute.prose import (
    check_prose,
    expand,
    stated_numbers,
    worked_out,
)

PAGE = """| schedule | BLEU | measured |
|---|---|---|
| full | 53.19 | 1.00x |
| target_2x | 52.38 | 1.437x |
| target_3x | -4.59 | 2.28x |
| a round | 0.25 | 2.49 |
| a tie | 1.125 | +0.77 |
"""

CSV = "step,val/loss,speed\n0,,1\n119,1.2005045413970947,\n"

DOC = """# Results

## E2E

At 2x BLEU is 52.38 (`results/e2e/results.md`), 2.28x measured at 3x and 1.44x at 2x; the
3x cell loses 4.59 points, -4.59 as printed, +0.77 on the other side. The record stores a
share of 12.5% and 187.0 ms (`results/bench/run-{a,b}.json`), a round costs
5 / (4 x 0.25 + 2.49) = 1.43x, and the training ended at 1.201 ([its log](../results/train/)).

## Setup

Built with OPT-6.7B and torch 2.13.0; the setting `threshold: 0.9` is a command, not a result.
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "results" / "e2e").mkdir(parents=True)
    (tmp_path / "results" / "e2e" / "results.md").write_text(PAGE)
    (tmp_path / "results" / "bench").mkdir()
    (tmp_path / "results" / "bench" / "run-a.json").write_text(json.dumps({"share": 0.125}))
    (tmp_path / "results" / "bench" / "run-b.json").write_text(json.dumps({"s": [0.18701]}))
    (tmp_path / "results" / "train").mkdir()
    (tmp_path / "results" / "train" / "metrics.csv").write_text(CSV)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "RESULTS.md").write_text(DOC)
    (tmp_path / "README.md").write_text("# skipdecode\n\nNo numbers here.\n")
    return tmp_path


def _differences(root: Path, old: str, new: str) -> list[str]:
    doc = root / "docs" / "RESULTS.md"
    text = doc.read_text()
    assert old in text
    doc.write_text(text.replace(old, new, 1))
    return check_prose(root).differences


def test_numbers_found_in_their_sections_sources_pass(root):
    found = check_prose(root)
    assert found.differences == []
    # 52.38, 2.28, 1.44 (rounded from 1.437), 4.59 and -4.59, +0.77, 12.5% (x 100), 187.0 ms
    # (x 1,000), 0.25, 2.49, the worked-out 1.43 and 1.201 (a CSV cell, rounded)
    assert found.checked == 12


@pytest.mark.parametrize(
    "old, new, difference",
    [
        ("is 52.38 (", "is 52.83 (", "docs/RESULTS.md:5: 52.83 is printed by none"),
        ("2.28x measured", "2.29x measured", "docs/RESULTS.md:5: 2.29 is printed by none"),
        ("-4.59 as printed", "+4.59 as printed", "docs/RESULTS.md:6: +4.59 is printed by none"),
        ("+0.77 on", "-0.77 on", "docs/RESULTS.md:6: -0.77 is printed by none"),
        ("1.44x at 2x", "1.43x at 2x", "docs/RESULTS.md:5: 1.43 is printed by none"),
        ("1.44x at 2x", "1.4375x at 2x", "docs/RESULTS.md:5: 1.4375 is printed by none"),
        ("187.0 ms", "188.0 ms", "docs/RESULTS.md:7: 188.0 is printed by none"),
        ("187.0 ms", "187.0 s", "docs/RESULTS.md:7: 187.0 is printed by none"),  # no ms: no x 1,000
        ("12.5%", "12.5 GiB", "docs/RESULTS.md:7: 12.5 is printed by none"),
        ("ended at 1.201", "ended at 1.210", "docs/RESULTS.md:8: 1.210 is printed by none"),
        (
            "= 1.43x",
            "= 1.45x",
            "docs/RESULTS.md:8: 5 / (4 x 0.25 + 2.49) = 1.45, but the arithmetic gives 1.43",
        ),
        (
            "a command, not a result.",
            "a command; it ran 1.5x faster.",
            "docs/RESULTS.md:12: 1.5 is stated in a section that names no source under results/",
        ),
        (
            "(`results/e2e/results.md`)",
            "(`results/e2e/result.md`)",
            "docs/RESULTS.md:5: results/e2e/result.md is named, and no such path exists",
        ),
    ],
)
def test_a_number_its_sources_do_not_give_is_a_difference(root, old, new, difference):
    differences = _differences(root, old, new)
    assert differences and differences[0].startswith(difference), differences


def test_a_number_only_an_uncited_page_prints_is_a_difference(root):
    differences = _differences(root, "(`results/e2e/results.md`)", "(the results page)")
    stated = [d.split(": ")[1].split(" is ")[0] for d in differences]
    assert stated == ["52.38", "2.28", "1.44", "4.59", "-4.59", "+0.77", "0.25", "2.49"]


def test_a_tie_may_round_either_way_and_thousands_commas_split_csv_cells(root):
    (root / "results" / "train" / "metrics.csv").write_text("a,b\n1,176.5,2\n")
    assert _differences(root, "ended at 1.201", "ended at 1.12 or 1.13 (1,176.5, 176.5)") == [
        "docs/RESULTS.md:8: 1,176.5 is printed by none of its section's sources "
        "(results/bench/run-{a,b}.json, results/e2e/results.md, results/train)"
    ]


def test_generated_blocks_comments_and_fenced_code_state_nothing(root):
    block = "<!-- generated by make docs: excerpt x -->\n| 9.99 |\n<!-- end: excerpt -->\n"
    comment = "<!-- a note\nthat spans 8.88 lines -->\n"
    fence = "  ~~~\n# a comment, not a heading: 7.77\n  ~~~\n"
    text = DOC.replace("## Setup", block + comment + fence + "\n## Setup")
    (root / "docs" / "RESULTS.md").write_text(text)
    assert check_prose(root).differences == []


def test_fenced_code_names_sources(root):
    fence = "```bash\npython -m x --out results/e2e/results.md\n```\n"
    text = DOC.replace("(`results/e2e/results.md`)", "(the page the command below writes)")
    (root / "docs" / "RESULTS.md").write_text(text.replace("## Setup", fence + "\n## Setup"))
    assert check_prose(root).differences == []


def test_a_name_glob_cannot_read_is_reported_not_raised(root):
    assert _differences(root, "`results/bench/run-{a,b}.json`", "`results/bench/x**.json`")[0] == (
        "docs/RESULTS.md:7: results/bench/x**.json is named, and no such path exists"
    )


def test_what_the_prose_states_and_what_it_leaves_alone():
    line = (
        "4.09-4.13 and −0.82, +0.32 at 2.28x/1.88x (OPT-6.7B, torch 2.13.0, 1,051.5 ms, 24.5GiB) "
        "`1.5` [a](results/x/1.5.md) −0.81 [−1.66, +0.03] 44.9% my_results/2.5.md"
    )
    assert stated_numbers(line) == [
        ("4.09", ""),
        ("4.13", ""),
        ("-0.82", ""),
        ("+0.32", ""),
        ("2.28", ""),
        ("1.88", ""),
        ("1,051.5", "ms"),
        ("24.5", "GiB"),
        ("44.9", "%"),
    ]
    assert expand("results/{a,b}/x-{1,2}.md") == [
        "results/a/x-1.md",
        "results/a/x-2.md",
        "results/b/x-1.md",
        "results/b/x-2.md",
    ]


@pytest.mark.parametrize(
    "line, worked",
    [
        # 1.99 x 0.26 + 1.06 + 0.03 is 1.6074 from the rounded inputs; 1.60 is within their rounding
        (
            "costs 1.99 x 0.26 + 1.06 + 0.03 = 1.60 steps",
            ("1.99 x 0.26 + 1.06 + 0.03", "1.60", "1.60"),
        ),
        (
            "costs 1.99 x 0.26 + 1.06 + 0.03 = 1.70 steps",
            ("1.99 x 0.26 + 1.06 + 0.03", "1.70", "1.61"),
        ),
        ("so 1 − 0.25 = 0.25", ("1 − 0.25", "0.25", "0.75")),  # subtraction read whole
        ("so 2 × 0.50 = 0.50", ("2 × 0.50", "0.50", "1.00")),
        ("so -1 / 3 = 0.33", ("-1 / 3", "0.33", "-0.33")),
        ("at 3x, 5 / 2 = 2.50", ("5 / 2", "2.50", "2.50")),
        ("a share of 4.59 / 53.19 = 8.6%", ("4.59 / 53.19", "8.6", "8.6")),
        ("2 x (-0.5) = -1.00", ("2 x (-0.5)", "-1.00", "-1.00")),
        ("1 / (0.5 - 0.5) = 1.00", ("1 / (0.5 - 0.5)", "1.00", None)),  # a divisor that may be 0
    ],
)
def test_worked_out_results_are_recomputed_within_their_inputs_rounding(line, worked):
    assert worked_out(line)[1] == [worked]


def test_a_lone_number_or_a_setting_is_not_worked_out():
    assert worked_out("pass@1 = 1.00 and 1.5 = 1.50")[1] == []
    assert worked_out("`x = 0.5 + 1` is a setting")[1] == []
