"""Measured speedups recomputed from an evaluation record's raw timings (``speed.raw``).

Own arithmetic, from the definitions in docs/METRICS.md: per timed batch the median over rounds
of each of the four timings (schedule and baseline, prefill and decode); the decode speedup is
the baseline's summed medians over the schedule's, the end-to-end one the same with prefill
added; each round's decode ratio sums that round over the timed batches; the prefill shares are
prefill over prefill + decode of each side's summed medians. A record that keeps no raw timings
(written before they were kept) is counted as not recomputable.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .findings import Findings

__all__ = ["check_speeds", "recomputed_speeds"]


def recomputed_speeds(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The speed figures the raw timings give (keys as in the record's ``speed`` section)."""
    timed = [b for b in raw.get("batches", []) if b.get("timed")]
    if not timed:
        return {}

    def total(key: str) -> float:
        return sum(statistics.median(b[key]) for b in timed)

    decode, base_decode = total("decode"), total("base_decode")
    prefill, base_prefill = total("prefill"), total("base_prefill")
    rounds = min(len(b["decode"]) for b in timed)
    return {
        "measured_speedup_decode": base_decode / decode,
        "measured_speedup_e2e": (base_decode + base_prefill) / (decode + prefill),
        "per_repeat": [
            sum(b["base_decode"][r] for b in timed) / sum(b["decode"][r] for b in timed)
            for r in range(rounds)
        ],
        "prefill_share": prefill / (prefill + decode),
        "prefill_share_baseline": base_prefill / (base_prefill + base_decode),
    }


def check_speeds(records: list[tuple[Path, Mapping[str, Any]]]) -> Findings:
    """Every evaluation record's speedups against its raw timings."""
    found = Findings("speedups from raw timings")
    for path, record in records:
        speed = record.get("speed") or {}
        raw = speed.get("raw")
        if not raw:
            found.skip("evaluation records without raw timings (written before they were kept)")
            continue
        got = recomputed_speeds(raw)
        if not got:
            found.skip("evaluation records with no batch timed against a baseline")
            continue
        where = str(path)
        for key in ("measured_speedup_decode", "measured_speedup_e2e"):
            found.compare(where, key, speed.get(key), got[key])
        per_repeat = (speed.get("timing") or {}).get("measured_speedup_decode_per_repeat") or []
        for r, value in enumerate(got["per_repeat"]):
            found.compare(
                where,
                f"round {r} decode ratio",
                per_repeat[r] if r < len(per_repeat) else None,
                value,
            )
        prompts = speed.get("long_prompts") or {}
        for key in ("prefill_share", "prefill_share_baseline"):
            found.compare(where, key, prompts.get(key), got[key])
    return found
