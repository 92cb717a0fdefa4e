"""Reading local record files (CSV, JSON, JSONL, Parquet) through ``datasets`` and finding the
file of a split; missing files and columns get errors that name the file and what was expected."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import DataConfigError, DataNotFoundError, MissingColumnsError

SUPPORTED_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv", ".parquet")
Row = dict[str, Any]


#: The ``datasets`` packaged builder that reads each suffix.
BUILDERS: dict[str, str] = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def read_rows(path: Path) -> list[Row]:
    """All rows of a local data file as dicts, read by ``datasets.load_dataset`` (its csv, json
    and parquet builders; the format follows the suffix). CSV cells stay strings (no NaN
    guessing); a ``.json`` file may hold a list of objects, ``{"data": [objects]}`` or JSON Lines.
    The Arrow cache lives in a temporary folder, so nothing is left behind."""
    import tempfile

    import datasets

    suffix = path.suffix.lower()
    builder = BUILDERS.get(suffix)
    if builder is None:
        raise DataConfigError(
            f"data file {str(path)!r} has an unsupported format {suffix!r}; "
            f"allowed: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    options: dict[str, Any] = {}
    if builder == "csv":
        options = {"na_filter": False, "encoding": "utf-8-sig"}
    elif suffix == ".json" and _is_wrapped_json(path):
        options = {"field": "data"}
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory(prefix="skipdecode-data-") as cache:
            table = datasets.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=cache, **options
            )
            return table.to_list()
    except (datasets.exceptions.DatasetGenerationError, ValueError) as error:
        if "corresponds to no data" in str(error):  # a header, or nothing: an empty split
            return []
        cause = error.__cause__ or error
        raise DataConfigError(
            f"data file {str(path)!r} could not be read as {builder}: {cause}"
        ) from error
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _is_wrapped_json(path: Path) -> bool:
    """Whether a ``.json`` file is one object with a ``"data"`` list (``field="data"``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return False  # JSON Lines, or broken: the json builder says which
    return isinstance(data, dict) and isinstance(data.get("data"), list)


def require_columns(
    rows: Sequence[Row], needed: Sequence[str], path: Path | str, fix: str | None = None
) -> None:
    """Raise ``MissingColumnsError`` naming the file, the columns found and the ones needed
    (and ``fix``: the settings that choose the columns, where a caller has them).

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
            + (f"; {fix}" if fix else "")
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
