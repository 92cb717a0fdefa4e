"""Timing helpers of the decode benchmark: interleaved repeats, quartiles, and what compiled or
declined CUDA graphs while a cell ran."""

from __future__ import annotations

import statistics
import traceback
from collections.abc import Callable
from typing import Any

__all__ = [
    "cudagraph_skips", "quartiles", "timed", "variants_without_raw", "warm_up", "with_compile",
]  # fmt: skip


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(median, first quartile, third quartile)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q2, q1, q3


def cudagraph_skips() -> int:
    """How often inductor has declined to use CUDA graphs in this process."""
    from torch._dynamo.utils import counters

    return int(sum(counters["inductor"][k] for k in counters["inductor"] if "cudagraph_skip" in k))


def with_compile(first: dict[str, float], second: dict[str, float]) -> dict[str, float]:
    """A second warm-up call, keeping the first's compile time and wall time."""
    out = dict(second)
    for key in ("compile_s", "wall_s"):
        if key in first:
            out[key] = first[key] + second.get(key, 0.0)
    return out


def timed(
    variants: dict[str, Callable[[], dict[str, float]]], repeats: int
) -> tuple[dict[str, list[dict[str, float]]], int]:
    """Every variant ``repeats`` times, interleaved; and the graphs dynamo compiled meanwhile
    (none should be: the warm-up compiled them)."""
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            samples[name].append(fn())
    return samples, int(counters["stats"]["unique_graphs"] - graphs)


def warm_up(
    variants: dict[str, Callable[[], dict[str, Any]]], twice: bool
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each variant's warm-up call (it compiles), or two (``twice``: a CUDA graph records on the
    second call), the second keeping the first's compile and wall time; a variant that raises is
    removed from ``variants`` and its error kept: ``(warm-up results, errors)``."""
    warm: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for name, fn in list(variants.items()):
        try:
            warm[name] = fn()
            if twice:
                warm[name] = with_compile(warm[name], fn())
        except Exception as e:  # noqa: BLE001 - one variant's failure is recorded, not fatal
            failed[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
            del variants[name]
    return warm, failed


#: A timed figure of a benchmark variant, and the raw seconds it is derived from.
_TIMED = (("decode_ms_per_step", "raw"), ("ms_per_round", "raw"), ("step_ms", "step_s_per_repeat"),
          ("decode_s", "decode_s_per_repeat"))  # fmt: skip


def variants_without_raw(record: dict[str, Any]) -> int:
    """How many of a benchmark record's variants time something without the seconds it comes
    from (decode: raw timings; training steps and lossless decodes: each repeat's seconds)."""
    count = 0
    for cell in record.get("cells") or []:
        variants = cell.get("variants") if isinstance(cell, dict) else None
        for v in variants.values() if isinstance(variants, dict) else ():
            count += any(figure in v and raw not in v for figure, raw in _TIMED)
    return count
