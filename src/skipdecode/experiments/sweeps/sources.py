"""A published folder's inputs, stored once: its cells' generations without the rows' sources.

Every cell of a published folder decodes the same inputs, so each cell's ``generations.jsonl.gz``
repeated each input's ``input``, ``prompt`` and ``references`` (about 80% of a SciTLDR line):
30 MiB of the tracked tree, which every GPU call copies. :func:`pack_folder` keeps them once, in
the folder's ``sources.jsonl.gz`` (one line per distinct source, named by its digest), and each
cell's rows name theirs (``source``). :func:`read_generations` gives the rows whole again, in
their own key order, and :func:`generations_bytes` the file a cell's evaluation wrote, byte for
byte: a cell is packed only where unpacking gives back exactly its bytes.

    python -m skipdecode.experiments.sweeps.sources results/<folder> ...   # pack (idempotent)
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from ...io import plain_or_gzipped, read_jsonl, write_jsonl_gz_atomic

__all__ = ["SOURCES", "SOURCE_KEYS", "generations_bytes", "pack_folder", "read_generations"]

#: The folder's file of sources, beside its cells.
SOURCES = "sources.jsonl.gz"
#: The fields of a generation row that are its source (what every cell shares).
SOURCE_KEYS = ("input", "prompt", "references")
_GENERATIONS = "generations.jsonl.gz"


def _digest(source: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()[:16]


def _lines(rows: list[dict[str, Any]]) -> bytes:
    """The rows as the evaluation writes them (:func:`~skipdecode.io.write_jsonl_atomic`)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


@functools.lru_cache(maxsize=8)
def _sources(path: Path, mtime_ns: int) -> dict[str, dict[str, Any]]:
    return {row.pop("source"): row for row in read_jsonl(path)}


def _folder_sources(folder: Path) -> dict[str, dict[str, Any]]:
    path = folder / SOURCES
    return _sources(path, path.stat().st_mtime_ns) if path.is_file() else {}


def _whole(rows: list[dict[str, Any]], sources: dict[str, dict[str, Any]], where: Path) -> list:
    out = []
    for row in rows:
        if "source" not in row:
            out.append(row)
            continue
        key = row["source"]
        if key not in sources:
            raise ValueError(f"{where}: source {key} is not in {where.parent.parent / SOURCES}")
        first, rest = {"index": row["index"]}, {k: v for k, v in row.items() if k != "source"}
        out.append({**first, **sources[key], **rest})
    return out


def read_generations(path: str | Path) -> list[dict[str, Any]]:
    """A cell's generation rows, whole (its folder's sources put back where it is packed);
    ``path``: ``generations.jsonl`` or its ``.gz``."""
    path = plain_or_gzipped(path)
    return _whole(read_jsonl(path), _folder_sources(path.parent.parent), path)


def generations_bytes(path: str | Path) -> bytes:
    """The uncompressed ``generations.jsonl`` the cell's evaluation wrote."""
    path = plain_or_gzipped(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if b'"source": ' not in raw:
        return raw
    return _lines(read_generations(path))


def _packed(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, dict]] | None:
    """The rows without their sources and the sources by digest; None where unpacking would not
    give back the same bytes (a row without an index or a source field, say)."""
    slim, sources = [], {}
    for row in rows:
        if "index" not in row or "source" in row or not all(k in row for k in SOURCE_KEYS):
            return None
        source = {k: row[k] for k in SOURCE_KEYS}
        key = _digest(source)
        sources[key] = source
        slim.append({k: v for k, v in row.items() if k not in SOURCE_KEYS} | {"source": key})
    if _lines(_whole(slim, sources, Path("?/?"))) != _lines(rows):
        return None
    return slim, sources


def pack_folder(folder: str | Path) -> int:
    """Pack every cell of a published folder that is not yet packed; returns how many were.
    The folder's sources are written first (the old ones and the new), then each cell's file, so
    a run stopped midway leaves every cell readable; sources no cell names are dropped."""
    folder = Path(folder)
    cells = sorted(folder.glob(f"*/{_GENERATIONS}"))
    known = dict(_folder_sources(folder))
    todo = []
    for path in cells:
        raw = gzip.decompress(path.read_bytes())
        if b'"source": ' in raw:
            continue
        rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line]
        if _lines(rows) != raw:
            continue  # not written as the evaluation writes: left as it is
        packed = _packed(rows)
        if packed is not None:
            todo.append((path, packed[0]))
            known.update(packed[1])
    used = {r["source"] for p in cells for r in read_jsonl(p) if "source" in r}
    used |= {r["source"] for _, slim in todo for r in slim}
    if not used:
        return 0
    write_jsonl_gz_atomic(
        folder / SOURCES, ({"source": k, **known[k]} for k in sorted(known) if k in used)
    )
    for path, slim in todo:
        write_jsonl_gz_atomic(path, slim)
    return len(todo)


def main(argv: list[str] | None = None) -> None:
    for folder in argv if argv is not None else sys.argv[1:]:
        print(f"{folder}: {pack_folder(folder)} cells packed")


if __name__ == "__main__":
    main()
