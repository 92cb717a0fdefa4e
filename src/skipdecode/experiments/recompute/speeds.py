"""Measured speedups recomputed from an evaluation record's raw timings (``speed.raw``).

Own arithmetic, from the definitions in docs/METRICS.md. A round is one paired draw: its decode
ratio is the baseline's decode seconds summed over the timed batches over the schedule's; its
end-to-end ratio adds to both sides the pooled prefill (per timed batch, the median of every
round's prefill seconds of both sides: the same work). A speedup is the median of its rounds'
ratios (records that state ``timing.definition``). Records written before that definition give
the baseline's summed per-batch medians over the schedule's, each side with its own prefill; the
audit checks each record by the definition it was written under, and the tables by the one
definition (:func:`published`). The prefill shares are prefill over prefill + decode of each
side's summed medians. A record that keeps no raw timings (written before they were kept) is
counted as not recomputable; the tables then publish the median of the decode rounds it kept and
no end-to-end speedup (it timed each side's prefill on its own and kept no prefill rounds), or 1
and 1 where the record is its own baseline.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .findings import Findings

__all__ = ["check_speeds", "recomputed_speeds", "published"]


def recomputed_speeds(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The speed figures the raw timings give, under both definitions (``paired``: the
    rounds' median; ``summed``: the older ratio of summed medians)."""
    timed = [b for b in raw.get("batches", []) if b.get("timed")]
    if not timed:
        return {}

    def total(key: str) -> float:
        return sum(statistics.median(b[key]) for b in timed)

    def round_sum(key: str, r: int) -> float:
        return sum(b[key][r] for b in timed)

    decode, base_decode = total("decode"), total("base_decode")
    prefill, base_prefill = total("prefill"), total("base_prefill")
    pooled = sum(statistics.median(list(b["prefill"]) + list(b["base_prefill"])) for b in timed)
    rounds = range(min(len(b["decode"]) for b in timed))
    per_round = [round_sum("base_decode", r) / round_sum("decode", r) for r in rounds]
    e2e_rounds = [
        (pooled + round_sum("base_decode", r)) / (pooled + round_sum("decode", r)) for r in rounds
    ]
    return {
        "paired": {
            "measured_speedup_decode": statistics.median(per_round),
            "measured_speedup_e2e": statistics.median(e2e_rounds),
        },
        "summed": {
            "measured_speedup_decode": base_decode / decode,
            "measured_speedup_e2e": (base_decode + base_prefill) / (decode + prefill),
        },
        "per_repeat": per_round,
        "e2e_per_repeat": e2e_rounds,
        "prefill_share": prefill / (prefill + decode),
        "prefill_share_baseline": base_prefill / (base_prefill + base_decode),
    }


_SELF = {"measured_speedup_decode": 1.0, "measured_speedup_e2e": 1.0}


def _own_baseline(speed: Mapping[str, Any]) -> bool:
    """Whether the record was timed against itself (full): its speedups are 1 by definition."""
    return (speed.get("baseline") or {}).get("schedule") == "self"


def published(record: Mapping[str, Any]) -> dict[str, Any]:
    """The decode and end-to-end speedups a table must show for this record: from its raw
    timings (the paired definition); 1 and 1 where its baseline is itself; else the median of
    the decode rounds it kept and no end-to-end figure (none follows from what it kept)."""
    speed = record.get("speed") or {}
    got = recomputed_speeds(speed.get("raw") or {})
    if got:
        return dict(got["paired"])
    if _own_baseline(speed):
        return dict(_SELF)
    out: dict[str, Any] = {"measured_speedup_decode": None, "measured_speedup_e2e": None}
    rounds = (speed.get("timing") or {}).get("measured_speedup_decode_per_repeat") or []
    if rounds and all(isinstance(x, (int, float)) and math.isfinite(x) for x in rounds):
        out["measured_speedup_decode"] = statistics.median(rounds)
    return out


def check_speeds(records: list[tuple[Path, Mapping[str, Any]]]) -> Findings:
    """Every evaluation record's speedups against its raw timings, by the definition it states."""
    found = Findings("speedups from raw timings")
    for path, record in records:
        speed = record.get("speed") or {}
        raw = speed.get("raw")
        if not raw and speed.get("measured_speedup_decode") is None:
            found.skip("evaluation records that publish no measured speedup (not timed)")
            continue
        if _own_baseline(speed):
            for key, one in _SELF.items():
                found.compare(str(path), f"{key} (its own baseline)", speed.get(key), one)
            continue
        if not raw:
            found.skip(
                "evaluation records without raw timings (written before they were kept): "
                "tables give the median of the decode rounds they kept (none without them) "
                "and no end-to-end speedup"
            )
            continue
        got = recomputed_speeds(raw)
        if not got:
            found.skip("evaluation records with no batch timed against a baseline")
            continue
        where = str(path)
        timing = speed.get("timing") or {}
        stated = got["paired"] if timing.get("definition") else got["summed"]
        for key in ("measured_speedup_decode", "measured_speedup_e2e"):
            found.compare(where, key, speed.get(key), stated[key])
        rounds = [("decode", got["per_repeat"])]
        if timing.get("definition"):
            rounds.append(("e2e", got["e2e_per_repeat"]))
        for name, values in rounds:
            kept = timing.get(f"measured_speedup_{name}_per_repeat") or []
            for r, value in enumerate(values):
                found.compare(
                    where, f"round {r} {name} ratio", kept[r] if r < len(kept) else None, value
                )
        prompts = speed.get("long_prompts") or {}
        for key in ("prefill_share", "prefill_share_baseline"):
            found.compare(where, key, prompts.get(key), got[key])
    return found
