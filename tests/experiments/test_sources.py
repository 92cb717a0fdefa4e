"""A published folder keeps its cells' shared sources once and gives every row back whole."""

from __future__ import annotations

import gzip
import json

import pytest

from skipdecode.experiments.sweeps.sources import (
    SOURCES,
    generations_bytes,
    pack_folder,
    read_generations,
)
from skipdecode.io import write_jsonl_gz_atomic


def _rows(outputs: list[str]) -> list[dict]:
    return [
        {"index": i, "input": f"name[{i}] é", "prompt": f"Describe: name[{i}] é",
         "references": [f"ref {i}", "other"], "output": out, "generated_tokens": 3,
         "ended": True, "scores": {"rougeL": 0.5}}
        for i, out in enumerate(outputs)
    ]  # fmt: skip


def _write(folder, cell: str, rows: list[dict]) -> bytes:
    path = folder / cell / "generations.jsonl.gz"
    write_jsonl_gz_atomic(path, rows)
    return gzip.decompress(path.read_bytes())


def test_a_folder_packs_its_shared_sources_once_and_reads_back_byte_for_byte(tmp_path):
    a, b = _rows(["x", "y", "z"]), _rows(["p", "q", "r"])
    raw = {"0": _write(tmp_path, "0", a), "1": _write(tmp_path, "1", b)}
    odd = [{"index": 0, "output": "no source fields"}]
    raw["2"] = _write(tmp_path, "2", odd)
    assert pack_folder(tmp_path) == 2  # the cell without sources stays as it is
    assert len(gzip.decompress((tmp_path / SOURCES).read_bytes()).splitlines()) == 3
    for cell, rows in (("0", a), ("1", b), ("2", odd)):
        path = tmp_path / cell / "generations.jsonl.gz"
        assert read_generations(path) == rows
        assert [list(r) for r in read_generations(path)] == [list(r) for r in rows]  # key order
        assert generations_bytes(path) == raw[cell]
    assert b"input" not in gzip.decompress((tmp_path / "0/generations.jsonl.gz").read_bytes())
    assert pack_folder(tmp_path) == 0  # packed already: nothing changes


def test_a_new_cell_joins_the_sources_and_unused_ones_are_dropped(tmp_path):
    _write(tmp_path, "0", _rows(["x", "y"]))
    pack_folder(tmp_path)
    (tmp_path / "0" / "generations.jsonl.gz").unlink()  # that cell replaced by another's inputs
    other = [{**r, "input": "new", "prompt": "Describe: new"} for r in _rows(["u"])]
    _write(tmp_path, "1", other)
    assert pack_folder(tmp_path) == 1
    sources = [
        json.loads(x) for x in gzip.decompress((tmp_path / SOURCES).read_bytes()).splitlines()
    ]
    assert [s["input"] for s in sources] == ["new"]
    assert read_generations(tmp_path / "1" / "generations.jsonl.gz") == other


def test_a_row_whose_source_is_missing_is_refused_by_name(tmp_path):
    _write(tmp_path, "0", _rows(["x"]))
    pack_folder(tmp_path)
    (tmp_path / SOURCES).unlink()
    with pytest.raises(ValueError, match=r"source [0-9a-f]{16} is not in .*sources\.jsonl\.gz"):
        read_generations(tmp_path / "0" / "generations.jsonl.gz")


def test_each_read_is_its_own_and_an_edited_source_is_refused(tmp_path):
    _write(tmp_path, "0", _rows(["x", "y"]))
    pack_folder(tmp_path)
    path = tmp_path / "0" / "generations.jsonl.gz"
    read_generations(path)[0]["references"].append("changed by a caller")
    assert read_generations(path) == _rows(["x", "y"])  # nothing shared between reads
    lines = gzip.decompress((tmp_path / SOURCES).read_bytes()).decode().splitlines()
    edited = [json.dumps({**json.loads(lines[0]), "input": "edited"})] + lines[1:]
    (tmp_path / SOURCES).write_bytes(gzip.compress(("\n".join(edited) + "\n").encode()))
    with pytest.raises(ValueError, match=r"source [0-9a-f]{16} does not match its content"):
        read_generations(path)


def test_a_folder_whose_cells_name_no_source_keeps_no_sources_file(tmp_path):
    _write(tmp_path, "0", _rows(["x"]))
    pack_folder(tmp_path)
    _write(tmp_path, "0", [{"index": 0, "output": "a cell that cannot be packed"}])
    assert pack_folder(tmp_path) == 0 and not (tmp_path / SOURCES).exists()
