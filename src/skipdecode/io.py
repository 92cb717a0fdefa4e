"""The one place files are written and read: JSON records, JSONL rows and text, atomically.

Writes go to a temporary file in the target's directory, are flushed and fsync'ed, then moved
over the target with ``os.replace``: a reader sees either the old file or the complete new one,
never a half-written file. A value that cannot be serialised fails the write and leaves the old
file (if any) untouched and no temporary file behind.

Besides plain JSON types, values may be numpy/torch scalars and arrays/tensors, ``pathlib.Path``,
sets, dataclasses, ``datetime``/``date`` and OmegaConf containers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import gzip
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "RecordError",
    "to_jsonable",
    "write_json_atomic",
    "write_jsonl_atomic",
    "write_jsonl_gz_atomic",
    "write_text_atomic",
    "write_bytes_atomic",
    "read_record",
    "read_json_or_none",
    "read_jsonl",
]


class RecordError(ValueError):
    """A record file is malformed or a value cannot be written as JSON."""


# --------------------------------------------------------------------------------------------
# serialisation


def to_jsonable(obj: Any) -> Any:
    """``json.dumps`` ``default=`` hook: numpy/torch values, Paths, sets, dataclasses, dates."""
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, set | frozenset):
        try:
            return sorted(obj)
        except TypeError:
            return list(obj)
    if isinstance(obj, _dt.datetime | _dt.date | _dt.time):
        return obj.isoformat()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    mod = type(obj).__module__ or ""
    if mod.startswith("numpy"):
        if hasattr(obj, "tolist"):  # ndarray and numpy scalars (item() for 0-d)
            return obj.tolist()
    if mod.startswith("torch"):
        import torch

        if isinstance(obj, torch.Tensor):
            return obj.detach().cpu().tolist()
        if isinstance(obj, torch.dtype | torch.device):
            return str(obj)
    if mod.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(obj, resolve=True)
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    raise TypeError(
        f"object of type {type(obj).__module__}.{type(obj).__qualname__} is not JSON "
        "serialisable; allowed: JSON types, numpy/torch scalars and arrays, Path, set, "
        "dataclass, datetime, OmegaConf containers"
    )


def _dumps(obj: Any, *, indent: int | None, where: str) -> str:
    try:
        return json.dumps(obj, default=to_jsonable, indent=indent, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise RecordError(f"{where}: {e}") from e


@contextlib.contextmanager
def _atomic_text_writer(path: str | os.PathLike, binary: bool = False) -> Iterator[Any]:
    """Yield a text (or ``binary``) file in ``path``'s directory; on success fsync +
    ``os.replace`` onto ``path``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        opened = (
            os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        )
        with opened as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:  # keep an existing file's mode, else the umask default (mkstemp makes 0600)
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # persist the rename itself (POSIX)
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def write_json_atomic(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically (parents created); returns the path.

    NaN/Infinity are written as Python's json does (``NaN``), which :func:`read_record` reads back.
    """
    text = _dumps(obj, indent=indent, where=f"write_json_atomic({os.fspath(path)!r})")
    with _atomic_text_writer(path) as f:
        f.write(text)
        f.write("\n")
    return Path(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (parents created); returns the path."""
    with _atomic_text_writer(path) as f:
        f.write(text)
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (parents created); returns the path."""
    with _atomic_text_writer(path, binary=True) as f:
        f.write(data)
    return Path(path)


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """Write one JSON value per line (e.g. ``{"input", "references", "output"}``) atomically.

    ``rows`` may be a generator; it is streamed to the temporary file. Returns the row count.
    """
    n = 0
    with _atomic_text_writer(path) as f:
        for row in rows:
            f.write(
                _dumps(row, indent=None, where=f"write_jsonl_atomic({os.fspath(path)!r}) row {n}")
            )
            f.write("\n")
            n += 1
    return n


def write_jsonl_gz_atomic(path: str | os.PathLike, rows: Iterable[Any]) -> int:
    """:func:`write_jsonl_atomic`, gzipped with no timestamp (the same rows give the same
    bytes, so a rewritten results file leaves git clean). Returns the row count."""
    lines = [
        _dumps(row, indent=None, where=f"write_jsonl_gz_atomic({os.fspath(path)!r}) row {i}")
        for i, row in enumerate(rows)
    ]
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    with _atomic_text_writer(path, binary=True) as f:
        f.write(gzip.compress(data, mtime=0))
    return len(lines)


# --------------------------------------------------------------------------------------------
# reading


def _open_text(path: str | os.PathLike, where: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{where}: no such record file: {os.fspath(path)!r}")
    try:
        if p.suffix == ".gz":
            return gzip.decompress(p.read_bytes()).decode("utf-8")
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as e:
        raise RecordError(
            f"{where}: {os.fspath(path)!r} is not UTF-8 text or not valid gzip ({e})"
        ) from e


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    """Read one JSON record (a JSON object); clear :class:`RecordError` if malformed."""
    text = _open_text(path, "read_record")
    if not text.strip():
        raise RecordError(f"read_record: {os.fspath(path)!r} is empty; expected a JSON object")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(
            f"read_record: {os.fspath(path)!r} is not valid JSON: {e.msg} at line {e.lineno} "
            f"column {e.colno} (file has {len(text)} characters; truncated or hand-edited?)"
        ) from e
    if not isinstance(obj, dict):
        raise RecordError(
            f"read_record: {os.fspath(path)!r} holds a JSON {type(obj).__name__}; "
            "expected a JSON object (one record per file)"
        )
    return obj


def read_json_or_none(path: str | os.PathLike) -> Any:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable (a sweep reads cell
    files that may not exist yet; their absence is a state, not an error)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def plain_or_gzipped(path: str | os.PathLike) -> Path:
    """``path`` if it is a file, else ``path + ".gz"`` if that is (published results keep large
    JSONL files gzipped); ``path`` itself when neither exists."""
    p = Path(path)
    gz = p.with_name(p.name + ".gz")
    return gz if not p.is_file() and gz.is_file() else p


def read_jsonl(path: str | os.PathLike) -> list[Any]:
    """Read a JSONL file, plain or ``.gz`` (blank lines skipped); clear :class:`RecordError` naming the bad line."""
    rows = []
    for i, line in enumerate(_open_text(path, "read_jsonl").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise RecordError(
                f"read_jsonl: {os.fspath(path)!r} line {i} is not valid JSON: {e.msg} "
                f"(column {e.colno})"
            ) from e
    return rows
