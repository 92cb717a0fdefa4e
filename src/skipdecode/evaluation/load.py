"""How busy the machine was while a timing ran: other processes' share of the CPUs.

A speed measured beside another job is not the speed of the code alone (a shared 2-core machine
once made a cell's full decode run at 1,051 ms a step against 142-164 for the same work alone).
:class:`CpuLoad` reads the machine's busy CPU time (``/proc/stat``) and this process's own
(``os.times``, children included) around a block; what the machine spent beyond this process, over
the block's wall time and the CPU count, is ``other_share`` (0: nothing else ran; 1: every CPU
busy with other work the whole time). Off Linux nothing is read and the record says so.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

__all__ = ["BUSY_SHARE", "CpuLoad", "timed_busy"]

_STAT = Path("/proc/stat")

#: Other processes' share of the CPUs above which a record's timings are refused for publishing.
BUSY_SHARE = 0.25


def timed_busy(load: dict[str, Any] | None) -> bool:
    """Whether a :class:`CpuLoad` result says other processes used more than :data:`BUSY_SHARE`
    of the CPUs while timing (a load not measured is not busy: nothing says it was)."""
    return bool(load and load.get("measured")) and float(load.get("other_share", 0.0)) > BUSY_SHARE


def _busy_seconds() -> float | None:
    """Busy CPU seconds of the whole machine since boot (every field but idle and iowait)."""
    try:
        fields = _STAT.read_text().splitlines()[0].split()
    except OSError:
        return None
    if fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is already in user and nice)
    ticks = [int(v) for v in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuLoad:
    """Context manager: the CPU shares of this process and of everything else over its block."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {"measured": False}

    def __enter__(self) -> CpuLoad:
        self._start = (time.perf_counter(), _busy_seconds(), _own_seconds())
        return self

    def __exit__(self, *exc: object) -> None:
        wall0, busy0, own0 = self._start
        wall, busy, own = time.perf_counter() - wall0, _busy_seconds(), _own_seconds() - own0
        cpus = os.cpu_count() or 1
        if busy0 is None or busy is None or wall <= 0:
            self.result = {"measured": False, "why": "no /proc/stat on this machine"}
            return
        capacity = wall * cpus
        machine = busy - busy0
        self.result = {
            "measured": True,
            "wall_seconds": wall,
            "cpus": cpus,
            "own_share": own / capacity,
            "other_share": max(0.0, machine - own) / capacity,
            "source": "/proc/stat (machine) and os.times (this process and its children)",
        }
