"""One process per run directory: a second process on the same dir is refused, clearly.

``claim_dir(path)`` takes an exclusive ``fcntl.flock`` on ``<path>/.skipdecode.lock`` and writes
the holder's PID, host and command line into it. The kernel releases the lock when the holder
exits, also on SIGKILL, so a killed run never leaves a stale claim; a second process that tries
while the holder lives gets :class:`DirectoryBusyError` naming the directory and the holder.
Workers that a distributed launcher starts for the same run (``LOCAL_RANK``/``RANK`` > 0) share
their rank-0 process's claim.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DirectoryBusyError", "claim_dir", "LOCK_FILE"]

LOCK_FILE = ".skipdecode.lock"


class DirectoryBusyError(RuntimeError):
    """Another live process holds the run directory."""


def _worker_of_a_distributed_run() -> bool:
    return any(int(os.environ.get(k, "0") or 0) > 0 for k in ("LOCAL_RANK", "RANK"))


@contextlib.contextmanager
def claim_dir(path: str | os.PathLike, purpose: str = "run", wait_s: float = 0.0) -> Iterator[Path]:
    """Hold ``path`` for this process for the ``with`` block (see module docstring). With
    ``wait_s`` > 0 a busy directory is waited for (polled) that long before giving up: sweep
    cells that share a trained model run one after the other, the later one reusing it."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    if _worker_of_a_distributed_run():
        yield directory
        return
    lock_path = directory / LOCK_FILE
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _acquire(fd, wait_s):
            holder = _read_holder(lock_path)
            raise DirectoryBusyError(
                f"{purpose} directory {str(directory)!r} is in use by process "
                f"{holder.get('pid', '?')} on {holder.get('host', '?')} "
                f"({holder.get('command', 'unknown command')}); wait for it to finish, or give "
                "this run another directory"
            ) from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": " ".join(sys.argv)[:300],
            "purpose": purpose,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield directory
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, wait_s: float) -> bool:
    """Take the exclusive lock, polling for up to ``wait_s`` seconds; whether it was taken."""
    deadline = time.monotonic() + max(0.0, wait_s)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(1.0, left))


def _read_holder(lock_path: Path) -> dict:
    try:
        return json.loads(lock_path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
