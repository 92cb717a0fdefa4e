"""Tables README and ``docs/`` copy from generated pages, and ``make audit``'s check of every
number those documents quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from skipdecode.experiments.recompute.quotes import check_quotes
from skipdecode.experiments.sweeps.excerpts import END, START, parse_spec, render, write_excerpts

PAGE = """# a page

Some prose.

| schedule | seeds | BLEU [95% CI] | ΔBLEU vs full [per-seed t CI] |
|---|---|---|---|
| full | 3 | 53.19 [50.59, 55.78] |  |
| target_2x | 3 | 52.38 [49.57, 55.19] | -0.81 [-1.66, +0.03] |
| target_3x | 3 | 48.60 [45.52, 51.68] | -4.59 [-7.55, -1.63] |

| other | table |
|---|---|
| a | b |
"""

SPEC = "results/e2e/results.md {schedule=target_3x,full}: schedule | ΔBLEU vs full [per-seed t CI]"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "results" / "e2e").mkdir(parents=True)
    (tmp_path / "results" / "e2e" / "results.md").write_text(PAGE)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "RESULTS.md").write_text(
        f"Intro.\n\n{START}{SPEC} -->\n| stale |\n{END}\n\n"
        "At 2x BLEU moves by −0.81 [−1.66, +0.03], within its seeds.\n"
    )
    return tmp_path


def test_an_excerpt_copies_the_named_columns_of_the_filtered_rows_in_the_filter_order(root):
    assert write_excerpts(root / "docs" / "RESULTS.md", root) == "docs/RESULTS.md: 1 excerpts"
    text = (root / "docs" / "RESULTS.md").read_text()
    assert (
        f"{START}{SPEC} -->\n"
        "| schedule | ΔBLEU vs full [per-seed t CI] |\n|---|---|\n"
        "| target_3x | -4.59 [-7.55, -1.63] |\n| full |  |\n"
        f"{END}\n\nAt 2x"
    ) in text
    assert text.startswith("Intro.\n\n") and text.endswith("within its seeds.\n")


def test_an_excerpt_without_a_filter_copies_every_row_and_pages_join_with_plus(root):
    spec = parse_spec("results/e2e/results.md + results/e2e/results.md {schedule=full}: seeds")
    assert render(spec, root).splitlines()[2:] == ["| 3 |"] * 4


BENCH = """| batch | variant | ms |
|---|---|---|
| 1 | generate | 53.21 |
| 1 | full | 37.63 |
| 1 | 2x | 21.70 |
| 8 | generate | 162.02 |
| 8 | full | 82.97 |
"""


def test_several_filters_take_a_row_for_every_combination_first_filter_outermost(root):
    (root / "results" / "bench.md").write_text(BENCH)
    spec = parse_spec("results/bench.md {batch=1,8} {variant=full,generate}: batch | variant | ms")
    assert render(spec, root).splitlines()[2:] == [
        "| 1 | full | 37.63 |",
        "| 1 | generate | 53.21 |",
        "| 8 | full | 82.97 |",
        "| 8 | generate | 162.02 |",
    ]
    missing = parse_spec("results/bench.md {batch=1,8} {variant=2x}: ms")
    with pytest.raises(ValueError, match="0 rows with batch='8', variant='2x'"):
        render(missing, root)
    with pytest.raises(ValueError, match="filtered twice"):
        parse_spec("results/bench.md {batch=1} {batch=8}: ms")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("results/e2e/results.md: schedule | ROUGE", "has the columns ['ROUGE', 'schedule']"),
        ("results/e2e/results.md {schedule=target_9x}: seeds", "0 rows with schedule='target_9x'"),
        ("results/none.md: seeds", "page 'results/none.md' does not exist"),
        ("results/e2e/results.md seeds", "expected 'PAGE"),
        ("results/e2e/results.md {schedule=}: seeds", "names no value"),
        ("results/e2e/results.md {schedule=full,full}: seeds", "repeats a value"),
    ],
)
def test_an_excerpt_that_cannot_be_copied_is_refused_and_says_why(root, spec, message):
    with pytest.raises(ValueError) as error:
        render(parse_spec(spec), root)
    assert message in str(error.value)


def test_a_refused_excerpt_leaves_the_document_as_it_was(root):
    doc = root / "docs" / "RESULTS.md"
    doc.write_text(doc.read_text().replace("schedule=target_3x", "schedule=target_9x"))
    before = doc.read_text()
    with pytest.raises(ValueError):
        write_excerpts(doc, root)
    assert doc.read_text() == before


def test_the_audit_passes_a_current_excerpt_and_quotes_found_on_a_page(root):
    write_excerpts(root / "docs" / "RESULTS.md", root)
    found = check_quotes(root / "results", root)
    assert found.differences == []
    assert found.checked == 5  # the excerpt's 4 cells and one quote


def test_the_audit_catches_a_stale_excerpt_cell(root):
    doc = root / "docs" / "RESULTS.md"
    write_excerpts(doc, root)
    doc.write_text(doc.read_text().replace("-4.59 [-7.55, -1.63]", "-4.59 [-7.55, -1.64]"))
    assert check_quotes(root / "results", root).differences == [
        "docs/RESULTS.md excerpt of results/e2e/results.md {schedule=target_3x,full} line 3: "
        "cell '-4.59 [-7.55, -1.64]' != '-4.59 [-7.55, -1.63]'"
    ]


@pytest.mark.parametrize(
    "quote",
    [
        "−0.81 [−1.66, +0.04]",
        "−0.82 [−1.66, +0.03]",
        "−0.81 [−1.7, +0.03]",
        "[−1.66, 0.02]",
        "+0.81 [−1.66, +0.03]",  # the sign flipped
        "2.38 [49.57, 55.19]",  # a digit lost at the front
    ],
)
def test_the_audit_catches_a_quote_that_no_page_prints(root, quote):
    doc = root / "docs" / "RESULTS.md"
    write_excerpts(doc, root)
    doc.write_text(doc.read_text().replace("−0.81 [−1.66, +0.03]", quote))
    differences = check_quotes(root / "results", root).differences
    assert differences == [f"docs/RESULTS.md:10: {quote!r} is printed on no page under results/"]


def test_the_audit_reports_an_excerpt_whose_page_lost_a_row(root):
    doc = root / "docs" / "RESULTS.md"
    write_excerpts(doc, root)
    page = root / "results" / "e2e" / "results.md"
    page.write_text(page.read_text().replace("| target_3x |", "| target_4x |"))
    (difference,) = check_quotes(root / "results", root).differences
    assert "0 rows with schedule='target_3x'" in difference


def test_two_excerpts_are_written_in_place_and_the_prose_between_them_kept(root):
    doc = root / "docs" / "RESULTS.md"
    second = "results/e2e/results.md {schedule=full}: seeds"
    doc.write_text(doc.read_text() + f"Between.\n{START}{second} -->\n{END}\nAfter.\n")
    assert write_excerpts(doc, root) == "docs/RESULTS.md: 2 excerpts"
    text = doc.read_text()
    assert text.endswith(
        f"within its seeds.\nBetween.\n{START}{second} -->\n| seeds |\n|---|\n| 3 |\n{END}\nAfter.\n"
    )
    assert write_excerpts(doc, root) and doc.read_text() == text  # rewriting changes nothing


def test_an_excerpt_without_its_end_is_refused_by_the_writer_and_reported_by_the_audit(root):
    doc = root / "docs" / "RESULTS.md"
    doc.write_text(doc.read_text().replace(END, "") + f"{START}{SPEC} -->\n| x |\n{END}\n")
    with pytest.raises(ValueError, match=r"docs/RESULTS.md: line 3: excerpt .* has no"):
        write_excerpts(doc, root)
    found = check_quotes(root / "results", root).differences
    assert "docs/RESULTS.md:3: a generated block without its end" in found


def test_a_readme_block_unknown_or_unclosed_is_reported(root):
    write_excerpts(root / "docs" / "RESULTS.md", root)
    (root / "README.md").write_text(
        "<!-- generated by make docs: headlines -->\n| a |\n<!-- end: headlines -->\n"
        "<!-- generated by make docs: summaries -->\nSee −9.99 [−1.00, +1.00].\n"
    )
    found = check_quotes(root / "results", root).differences
    assert found == [
        "README.md:1: no generated block is called 'headlines'",
        "README.md:4: a generated block without its end",
    ]


def test_a_table_cell_with_an_escaped_pipe_stays_one_cell(root):
    page = root / "results" / "e2e" / "results.md"
    page.write_text(page.read_text().replace("| full | 3 |", "| full \\| all | 3 |"))
    table = render(parse_spec("results/e2e/results.md: schedule | seeds"), root)
    assert "| full \\| all | 3 |" in table.splitlines()


def test_a_row_shorter_than_its_header_is_refused(root):
    page = root / "results" / "e2e" / "results.md"
    page.write_text(
        page.read_text().replace("| full | 3 | 53.19 [50.59, 55.78] |  |", "| full | 3 |")
    )
    with pytest.raises(ValueError, match="has 2 cells, its header 4"):
        render(parse_spec("results/e2e/results.md: schedule"), root)
