"""SciTLDR and any summarization data of its shape: list fields, several references per row,
the user's own files, and errors that name the setting."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from skipdecode.data import MissingColumnsError, get_task, group_by_source, load_split

SCITLDR_DIR = Path(
    os.environ.get(
        "SKIPDECODE_SCITLDR_DIR", Path(__file__).resolve().parents[3] / "shared/data/scitldr"
    )
)
needs_scitldr = pytest.mark.skipif(
    not (SCITLDR_DIR / "test.jsonl").is_file(), reason=f"no SciTLDR files in {SCITLDR_DIR}"
)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@needs_scitldr
def test_scitldr_real_splits_keep_every_reference():
    test = group_by_source(load_split("scitldr", "test", data_dir=SCITLDR_DIR))
    assert len(test) == 618
    rows = [json.loads(line) for line in (SCITLDR_DIR / "test.jsonl").open(encoding="utf-8")]
    first = rows[0]
    assert test[0].source == " ".join(" ".join(first["source"]).split())
    assert test[0].references == tuple(" ".join(t.split()) for t in first["target"])
    assert sum(len(ex.references) for ex in test) == sum(len(set(r["target"])) for r in rows)
    # dev.jsonl is the validation split; train has one reference a row, and one of its 1,992
    # rows repeats another's abstract and TLDR: 1,991 training pairs
    assert len(group_by_source(load_split("scitldr", "val", data_dir=SCITLDR_DIR))) == 618
    assert len(load_split("scitldr", "train", data_dir=SCITLDR_DIR)) == 1991
    prompt = get_task("scitldr").prompt(test[0].source)
    assert prompt.startswith("Summarize the paper abstract") and prompt.endswith("\n\nTL;DR:")


def test_own_data_jsonl_lists_and_csv_rows(tmp_path):
    write_jsonl(
        tmp_path / "train.jsonl",
        [{"source": ["First  sentence.", "Second\nsentence."], "target": ["One ref."]}],
    )
    write_jsonl(tmp_path / "dev.jsonl", [{"source": "A text.", "target": ["R1.", "R2.", "R1."]}])
    with (tmp_path / "test.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["source", "target"])
        writer.writeheader()
        writer.writerows(
            [{"source": "Doc.", "target": "First."}, {"source": "Doc.", "target": "Second."}]
        )
    train = load_split("scitldr", "train", data_dir=tmp_path)
    assert [(ex.source, ex.target) for ex in train] == [
        ("First sentence. Second sentence.", "One ref.")
    ]
    (val,) = group_by_source(load_split("scitldr", "validation", data_dir=tmp_path))
    assert val.references == ("R1.", "R2.")  # a repeated reference counts once
    (test,) = group_by_source(load_split("scitldr", "test", data_dir=tmp_path))
    assert test.references == ("First.", "Second.")  # a CSV repeats the source, one ref a row


def test_own_data_field_names_and_split_files(tmp_path):
    write_jsonl(tmp_path / "mine.jsonl", [{"text": "Body.", "summaries": ["S one.", "S two."]}])
    examples = load_split(
        "cnn_dm",
        "test",
        data_dir=tmp_path,
        split_files={"test": "mine.jsonl"},
        source_field="text",
        target_field="summaries",
    )
    assert group_by_source(examples)[0].references == ("S one.", "S two.")


def test_missing_field_names_the_settings_and_what_the_file_holds(tmp_path):
    write_jsonl(tmp_path / "test.jsonl", [{"abstract": "x", "target": ["y"]}])
    with pytest.raises(
        MissingColumnsError,
        match=r"test\.jsonl.*\['source'\].*columns found: \['abstract', 'target'\].*"
        r"dataset\.options\.source_field \(now 'source'\)",
    ):
        load_split("scitldr", "test", data_dir=tmp_path)
