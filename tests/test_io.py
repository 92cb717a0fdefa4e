"""Tests for skipdecode.io: atomic JSON/JSONL/text writes and reading errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from skipdecode import io as records
from skipdecode.io import (
    RecordError,
    read_json_or_none,
    read_jsonl,
    read_record,
    write_bytes_atomic,
    write_json_atomic,
    write_jsonl_atomic,
    write_text_atomic,
)
from skipdecode.provenance import provenance


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tmp"))


@dataclasses.dataclass
class _Point:
    x: int
    y: float


def test_json_round_trip_with_numpy_torch_paths(tmp_path):
    obj = {
        "f32": np.float32(0.5),
        "i64": np.int64(7),
        "b": np.bool_(True),
        "arr": np.arange(3),
        "t0": torch.tensor(2.5),
        "t": torch.tensor([[1, 2], [3, 4]]),
        "dtype": torch.float16,
        "path": Path("/a/b"),
        "set": {3, 1, 2},
        "dc": _Point(1, 2.0),
        "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
        "text": "ünïcödé",
        "nested": [{"k": (1, 2)}],
    }
    out = write_json_atomic(tmp_path / "sub" / "run.json", obj)  # parent dirs created
    assert out == tmp_path / "sub" / "run.json"
    back = read_record(out)
    assert back == {
        "f32": 0.5,
        "i64": 7,
        "b": True,
        "arr": [0, 1, 2],
        "t0": 2.5,
        "t": [[1, 2], [3, 4]],
        "dtype": "torch.float16",
        "path": "/a/b",
        "set": [1, 2, 3],
        "dc": {"x": 1, "y": 2.0},
        "when": "2024-01-02T03:04:05+00:00",
        "text": "ünïcödé",
        "nested": [{"k": [1, 2]}],
    }
    assert _leftovers(out.parent) == []
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600


def test_json_overwrite_keeps_mode(tmp_path):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"v": 1})
    os.chmod(p, 0o640)
    write_json_atomic(p, {"v": 2})
    assert read_record(p) == {"v": 2}
    assert p.stat().st_mode & 0o777 == 0o640


def test_json_failure_leaves_old_file_intact(tmp_path):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"v": 1})
    before = p.read_bytes()
    with pytest.raises(RecordError, match="not JSON serialisable"):
        write_json_atomic(p, {"v": 2, "bad": object()})
    assert p.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_json_failure_creates_no_file(tmp_path):
    p = tmp_path / "new.json"
    with pytest.raises(RecordError, match=r"write_json_atomic.*object"):
        write_json_atomic(p, [1, 2, object()])
    assert not p.exists()
    assert list(tmp_path.iterdir()) == []


def test_replace_failure_mid_write_cleans_up(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"v": 1})

    def boom(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(records.os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        write_json_atomic(p, {"v": 2})
    assert read_record(p) == {"v": 1}
    assert _leftovers(tmp_path) == []


def test_jsonl_round_trip_streaming(tmp_path):
    rows = (
        {
            "input": f"prompt {i}",
            "references": [f"ref {i}", "alt"],
            "output": f"out {i}",
            "n_tokens": np.int32(i),
        }
        for i in range(5)
    )
    p = tmp_path / "generations.jsonl"
    assert write_jsonl_atomic(p, rows) == 5
    lines = p.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5 and all(line.startswith("{") for line in lines)
    back = read_jsonl(p)
    assert back[3] == {
        "input": "prompt 3",
        "references": ["ref 3", "alt"],
        "output": "out 3",
        "n_tokens": 3,
    }


def test_gzipped_jsonl_is_found_and_read_like_the_plain_file(tmp_path):
    import gzip

    plain = tmp_path / "generations.jsonl"
    write_jsonl_atomic(plain, [{"output": "a"}, {"output": "b"}])
    assert records.plain_or_gzipped(plain) == plain
    gz = tmp_path / "generations.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    assert records.plain_or_gzipped(plain) == plain  # the plain file wins while it exists
    plain.unlink()
    assert records.plain_or_gzipped(plain) == gz
    assert read_jsonl(gz) == [{"output": "a"}, {"output": "b"}]
    gz.write_bytes(b"not gzip at all")
    with pytest.raises(records.RecordError, match="generations.jsonl.gz"):
        read_jsonl(gz)


def test_jsonl_failure_mid_write_keeps_old_file(tmp_path):
    p = tmp_path / "g.jsonl"
    write_jsonl_atomic(p, [{"output": "old"}])
    before = p.read_bytes()

    def rows():
        yield {"output": "a"}
        yield {"output": "b"}
        yield {"output": object()}  # fails after two rows were written to the temp file

    with pytest.raises(RecordError, match="row 2"):
        write_jsonl_atomic(p, rows())
    assert p.read_bytes() == before
    assert _leftovers(tmp_path) == []

    with pytest.raises(RecordError):
        write_jsonl_atomic(tmp_path / "fresh.jsonl", rows())
    assert not (tmp_path / "fresh.jsonl").exists()


def test_jsonl_generator_exception_propagates_and_cleans(tmp_path):
    def rows():
        yield {"output": "a"}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_jsonl_atomic(tmp_path / "g.jsonl", rows())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content, match",
    [
        ('{"a": 1, "b": [1, 2', r"not valid JSON: .* line 1 column \d+"),
        ("", "is empty"),
        ("   \n", "is empty"),
        ("[1, 2]", "holds a JSON list; expected a JSON object"),
        ('{"a": 1}\n{"b": 2}\n', "not valid JSON: Extra data at line 2"),
    ],
)
def test_read_record_malformed(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(RecordError, match=match) as ei:
        read_record(p)
    assert "bad.json" in str(ei.value)


def test_read_record_missing_and_binary(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such record file"):
        read_record(tmp_path / "missing.json")
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecordError, match="not UTF-8"):
        read_record(p)


def test_read_jsonl_names_bad_line(tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text('{"a": 1}\n\n{"a": 2\n', encoding="utf-8")
    with pytest.raises(RecordError, match="line 3 is not valid JSON"):
        read_jsonl(p)


def test_record_with_provenance_round_trip(tmp_path):
    rec = {
        "config": {"schedule": {"type": "linear"}},
        "metrics": {"bleu": np.float64(12.5)},
        "provenance": provenance(),
    }
    write_json_atomic(tmp_path / "run.json", rec)
    back = read_record(tmp_path / "run.json")
    assert back["metrics"]["bleu"] == 12.5
    assert back["provenance"]["packages"]["torch"] == torch.__version__


def test_write_text_atomic_and_tolerant_read(tmp_path):
    target = tmp_path / "sub" / "table.md"
    write_text_atomic(target, "| a |\n")
    assert target.read_text() == "| a |\n"
    assert _leftovers(target.parent) == []
    assert read_json_or_none(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert read_json_or_none(tmp_path / "bad.json") is None
    write_json_atomic(tmp_path / "ok.json", {"a": [1, 2]})
    assert read_json_or_none(tmp_path / "ok.json") == {"a": [1, 2]}


def test_bytes_are_written_whole_with_no_temporary_left(tmp_path):
    data = bytes(range(256)) * 3
    target = write_bytes_atomic(tmp_path / "deep" / "generations.jsonl", data)
    assert target.read_bytes() == data
    assert [p.name for p in target.parent.iterdir()] == ["generations.jsonl"]
