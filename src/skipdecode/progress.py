"""Progress bars for the long loops (tqdm, as Lightning uses): generation over a split, CALM and
adaptive calibration, BERTScore and the benchmarks.

Shown when stderr is a terminal; quiet otherwise (logs, CI, sweeps in the background). The
environment variable ``SKIPDECODE_PROGRESS`` forces it (``1``) or silences it (``0``), and
callers pass ``enabled`` from their own flag (``progress=false`` for evaluation, ``--no-progress``
for the benchmarks), which wins over both.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["progress", "progress_enabled", "progress_setting", "ENV_VAR"]

ENV_VAR = "SKIPDECODE_PROGRESS"
_OFF = {"0", "false", "no", "off"}
_ON = {"1", "true", "yes", "on"}

T = TypeVar("T")


_setting: list[bool] = []  # innermost progress_setting() first


@contextlib.contextmanager
def progress_setting(enabled: bool | None) -> Iterator[None]:
    """Inside the block, bars follow ``enabled`` (a run's own flag); ``None`` changes nothing."""
    if enabled is None:
        yield
        return
    _setting.insert(0, bool(enabled))
    try:
        yield
    finally:
        _setting.pop(0)


def progress_enabled(enabled: bool | None = None) -> bool:
    """``enabled`` if given, else the innermost :func:`progress_setting`, else the environment
    variable, else whether stderr is a TTY."""
    if enabled is not None:
        return bool(enabled)
    if _setting:
        return _setting[0]
    env = os.environ.get(ENV_VAR, "").strip().lower()
    if env in _OFF:
        return False
    if env in _ON:
        return True
    if env:
        raise ValueError(
            f"{ENV_VAR}={env!r} is not allowed: one of 1/0, true/false, yes/no, on/off"
        )
    return sys.stderr.isatty()


def progress(
    items: Iterable[T], desc: str, total: int | None = None, enabled: bool | None = None
) -> Iterator[T] | Iterable[T]:
    """``items``, with a bar on stderr when :func:`progress_enabled`."""
    if not progress_enabled(enabled):
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, total=total, leave=False, dynamic_ncols=True, file=sys.stderr)
