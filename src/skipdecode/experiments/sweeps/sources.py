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
def _source_rows(path: Path, stamp: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    """Each source by its digest (without its ``source`` field), checked against its content (a
    source edited in place would change every cell that names it). Read once; each row that
    names a source gets its own copy (:func:`_whole`)."""
    rows = {}
    for line in gzip.decompress(path.read_bytes()).decode("utf-8").split("\n"):
        if not line:
            continue
        row = json.loads(line)
        key = row.pop("source")
        if _digest(row) != key:
            raise ValueError(f"{path}: source {key} does not match its content")
        rows[key] = row
    return rows


def _folder_sources(folder: Path) -> dict[str, dict[str, Any]]:
    path = (folder / SOURCES).resolve()
    if not path.is_file():
        return {}
    st = path.stat()
    return _source_rows(path, (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino))


def _copy(value: Any) -> Any:
    """A source's value for one row: its lists (the references) copied, its strings shared."""
    return [_copy(v) for v in value] if isinstance(value, list) else value


def _rows_of(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in raw.decode("utf-8").split("\n") if line]


def _whole(rows: list[dict[str, Any]], sources: dict[str, dict[str, Any]], where: Path) -> list:
    out = []
    for row in rows:
        if "source" not in row:
            out.append(row)
            continue
        key = row["source"]
        if key not in sources:
            raise ValueError(f"{where}: source {key} is not in {where.parent.parent / SOURCES}")
        source = {k: _copy(v) for k, v in sources[key].items()}
        rest = {k: v for k, v in row.items() if k != "source"}
        out.append({"index": row["index"], **source, **rest})
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
    rows = _rows_of(raw)
    if not any("source" in row for row in rows):
        return raw
    return _lines(_whole(rows, _folder_sources(path.parent.parent), path))


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
    a run stopped midway leaves every cell readable; sources no cell names are dropped (the file
    too, where no cell names any)."""
    folder = Path(folder)
    cells = sorted(folder.glob(f"*/{_GENERATIONS}"))
    known = dict(_folder_sources(folder))
    todo, used = [], set()
    for path in cells:
        raw = gzip.decompress(path.read_bytes())
        rows = _rows_of(raw)
        if any("source" in row for row in rows):
            used |= {row["source"] for row in rows if "source" in row}
            continue
        packed = _packed(rows) if _lines(rows) == raw else None  # else: left as it is
        if packed is not None:
            todo.append((path, packed[0]))
            known.update(packed[1])
            used |= set(packed[1])
    if not used:
        (folder / SOURCES).unlink(missing_ok=True)  # no cell names a source any more
        return 0
    write_jsonl_gz_atomic(folder / SOURCES, ({"source": k, **known[k]} for k in sorted(used)))
    for path, slim in todo:
        write_jsonl_gz_atomic(path, slim)
    return len(todo)


def main(argv: list[str] | None = None) -> None:
    for folder in argv if argv is not None else sys.argv[1:]:
        print(f"{folder}: {pack_folder(folder)} cells packed")


if __name__ == "__main__":
    main()
