"""A decode benchmark's step profiles (``--profile``) recomputed from the two profiled calls each
keeps (``raw``: the one-token call's and the decoding call's device events by name and host calls).

Own arithmetic: for every event name, what the decoding call ran beyond the one-token call (only
names it ran more often count, as the profile defines), over the decode steps; their sum is the
events a step, and the decoding call's microseconds of them less those of their earliest runs
(kept beside them: the prefill's) the time a step; host calls by kind likewise; the busy share
is that time over the variant's timed ms a step, which is the variant's own median in the same
cell. On the GPU page the line of each profiled variant prints these numbers at its digits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .findings import Findings, heading_block

__all__ = ["check_profiles"]


def _step_figures(raw: Mapping[str, Any]) -> dict[str, Any]:
    steps = raw["steps"]
    before, after = raw["prefill_only"], raw["decode"]
    events = micros = 0.0
    for name, (count, us, us_prefill) in after["names"].items():
        base_count = before["names"].get(name, (0, 0.0))[0]
        if count > base_count:
            events += count - base_count
            micros += us - us_prefill
    host = {k: (after["host"][k] - before["host"].get(k, 0)) / steps for k in after["host"]}
    return {"events": events / steps, "us": micros / steps, "host": host}


def _line(section: str, shape: str, name: str, batch: int) -> str | None:
    """The variant's line under the shape's heading of the record's section."""
    start = f"- {name} at batch {batch}: "
    lines = heading_block(section, 3, shape).splitlines()
    return next((line for line in lines if line.startswith(start)), None)


def check_profiles(
    where: str, cell: Mapping[str, Any], found: Findings, page: str | None = None
) -> None:
    """One cell's profiles against their raw tallies, and (``page``: its record's section of
    the GPU page) each one's printed line."""
    for name, p in (cell.get("step_profile") or {}).items():
        if "error" in p:
            continue
        at = f"{where} step_profile {name}"
        if "raw" not in p:
            found.skip("step profiles without their raw tallies")
            continue
        got = _step_figures(p["raw"])
        found.compare(at, "events_per_step", p["events_per_step"], got["events"])
        found.compare(at, "device_us_per_step", p["device_us_per_step"], got["us"])
        for kind, value in got["host"].items():
            found.compare(at, f"host_per_step {kind}", p["host_per_step"][kind], value)
        timed = (cell["variants"].get(name) or {}).get("decode_ms_per_step")
        found.compare(at, "timed_ms_per_step", p["timed_ms_per_step"], timed)
        busy = None if not timed else got["us"] / (timed * 1000)
        found.compare(at, "busy_share", p["busy_share"], busy)
        if page is None:
            continue
        line = _line(page, cell["shape"], name, cell["batch_size"]) or ""
        fragments = [
            f"{got['events']:.1f} {p['unit']} a step",
            f"{got['us'] / 1000:.3f} ms in them",
        ]
        fragments += [f"{v:.1f} {k.replace('_', ' ')}" for k, v in got["host"].items()]
        if busy is not None:
            fragments.append(f"({100 * busy:.0f}% of the timed step)")
        for fragment in fragments:
            found.compare(f"bench/decode-gpu.md {at}", fragment, fragment in line, True)
