"""Reading local record files (CSV, JSON, JSONL, Parquet) and finding the file of a split."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import DataConfigError, DataNotFoundError, MissingColumnsError

SUPPORTED_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv", ".parquet")
Row = dict[str, Any]


def read_rows(path: Path) -> list[Row]:
    """All rows of a local data file as dicts; the format follows the file suffix."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8-sig") as handle:
            return list(csv.DictReader(handle))
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        return _read_json(path)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise DataConfigError(
        f"data file {str(path)!r} has an unsupported format {suffix!r}; "
        f"allowed: {', '.join(SUPPORTED_SUFFIXES)}"
    )


def _read_jsonl(path: Path) -> list[Row]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataConfigError(
                    f"data file {str(path)!r} line {number} is not valid JSON: {error}"
                ) from error
            if not isinstance(row, dict):
                raise DataConfigError(
                    f"data file {str(path)!r} line {number} is a {type(row).__name__}, "
                    "expected a JSON object"
                )
            rows.append(row)
    return rows


def _read_json(path: Path) -> list[Row]:
    """A JSON list of objects, ``{"data": [...]}``, or JSON Lines saved as ``.json``."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return _read_jsonl(path)  # datasets' to_json writes JSON Lines by default
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if isinstance(data, dict):  # a single record
        data = [data]
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise DataConfigError(
            f"data file {str(path)!r} must hold a list of JSON objects, "
            '{"data": [objects]}, or one JSON object per line'
        )
    return data


def require_columns(rows: Sequence[Row], needed: Sequence[str], path: Path | str) -> None:
    """Raise ``MissingColumnsError`` naming the file, the columns found and the ones needed.

    No rows means nothing to check (the caller reports an empty split instead).
    """
    if not rows:
        return
    found: dict[str, None] = {}
    for row in rows[:1000]:
        found.update(dict.fromkeys(row))
    missing = [column for column in needed if column not in found]
    if missing:
        raise MissingColumnsError(
            f"data file {str(path)!r} lacks column(s) {missing}; "
            f"columns found: {sorted(found)}; columns needed: {list(needed)}"
        )


def find_split_file(data_dir: Path, candidates: Sequence[str], setting_hint: str) -> Path:
    """The first existing file among ``candidates`` (names with or without a suffix).

    A candidate without a suffix is tried with each of ``SUPPORTED_SUFFIXES``.
    """
    tried = []
    for candidate in candidates:
        names = (
            [candidate]
            if Path(candidate).suffix
            else [candidate + suffix for suffix in SUPPORTED_SUFFIXES]
        )
        for name in names:
            path = data_dir / name
            tried.append(name)
            if path.is_file():
                return path
    raise DataNotFoundError(
        f"no data file for this split in data_dir={str(data_dir)!r}: expected one of "
        f"{tried}. {setting_hint}"
    )
