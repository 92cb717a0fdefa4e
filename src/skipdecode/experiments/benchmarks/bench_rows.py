"""A decode cell's rows from its timed calls: per variant the median and quartiles of its ms per
step, its throughput (and the seconds of every timed call they come from), its tokens against
its reference's, its compile time apart; each row's multiples of the device's floors; and the
cost split of a full step."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from ...core.costs import step_cost_split
from ...core.floor import DeviceLimits, step_floor_seconds
from .bench_speedups import reference_of
from .bench_timing import quartiles

__all__ = ["add_floors", "cost_split_of", "path_split_of", "step_splits", "variant_rows"]


def variant_rows(
    samples: dict[str, list[dict[str, Any]]],
    warm: dict[str, dict[str, Any]],
    batch_size: int,
    new_tokens: int,
    compiled_suffixes: tuple[str, ...],
) -> dict[str, dict[str, Any]]:
    """One row per timed variant (``samples``: its timed calls; ``warm``: its warm-up call)."""
    rows: dict[str, dict[str, Any]] = {}
    for name, runs in samples.items():
        steps = runs[0]["steps"]
        per_step = [1000 * r["decode_s"] / max(steps, 1) for r in runs]
        decode = statistics.median(r["decode_s"] for r in runs)
        prefill = statistics.median(r["prefill_s"] for r in runs)
        med, q1, q3 = quartiles(per_step)
        rows[name] = {
            "prefill_ms": 1000 * prefill,
            "decode_ms_per_step": med,
            "decode_ms_q1": q1,
            "decode_ms_q3": q3,
            "tokens_per_s": batch_size * new_tokens / (prefill + decode),
            "decode_tokens_per_s": batch_size * steps / decode if decode > 0 else float("nan"),
            "layers_per_token": runs[0]["layers_per_token"],
            "compiled": name.endswith(compiled_suffixes),
            # every timed call's seconds, in order: the figures above recompute from these
            "raw": {
                "steps": steps,
                "prefill_s": [r["prefill_s"] for r in runs],
                "decode_s": [r["decode_s"] for r in runs],
            },
        }
        if "tokens_per_round" in runs[0]:  # the lossless rounds': measured in each run
            rows[name]["tokens_per_round"] = statistics.median(r["tokens_per_round"] for r in runs)
            rows[name]["raw"]["tokens_per_round"] = [r["tokens_per_round"] for r in runs]
        reference = warm[name].get("reference") or reference_of(name)
        if reference in warm and "generated" in warm[name]:
            rows[name]["tokens_equal"] = reference
            rows[name]["tokens_equal_reference"] = torch.equal(
                warm[name]["generated"], warm[reference]["generated"]
            )
        if name.endswith(compiled_suffixes):  # the warm-up call's compiling, apart from decoding
            w = warm[name]
            steady = statistics.median(r.get("wall_s", 0.0) for r in runs)
            rows[name]["compile_s"] = (
                w["compile_s"] if "compile_s" in w else max(0.0, w["wall_s"] - steady)
            )
    return rows


def add_floors(
    rows: dict[str, dict[str, Any]],
    adapter: Any,
    batch_size: int,
    positions: int,
    limits: DeviceLimits,
) -> None:
    """Each row's floor (the slower of bandwidth and compute) and both apart, with its
    multiple of each, at its layers per token (rows without a time per step are left)."""
    for r in rows.values():
        if r["decode_ms_per_step"] is None:
            continue
        floor = step_floor_seconds(adapter, r["layers_per_token"], batch_size, positions, limits)
        r["floor_ms"] = 1000 * floor["seconds"]
        r["floor_multiple"] = r["decode_ms_per_step"] / r["floor_ms"]
        for kind in ("bandwidth", "compute"):
            r[f"{kind}_floor_ms"] = 1000 * floor[f"{kind}_seconds"]
            r[f"{kind}_floor_multiple"] = r["decode_ms_per_step"] / r[f"{kind}_floor_ms"]


def cost_split_of(split: dict[str, float], full: float, layers: int) -> dict[str, float]:
    """A full step of ``full`` seconds split into the time outside the layers (``split``'s,
    capped at the step), the head, and the time a layer."""
    other = min(split["non_layer_s"], full)
    return {
        "full_step_ms": 1000 * full,
        "non_layer_ms": 1000 * other,
        "head_ms": 1000 * split["head_s"],
        "per_layer_ms": 1000 * (full - other) / layers,
        "non_layer_fraction": other / full,
        "head_fraction": min(split["head_s"], full) / full,
        "overhead_fraction": max(other - split["head_s"], 0.0) / full,
    }


def path_split_of(split: dict[str, float]) -> dict[str, float]:
    """A path's split as a cell keeps it beside the eager one: the time outside the layers and
    the head's (ms); its shares follow from its own full variant's ms per step."""
    return {"non_layer_ms": 1000 * split["non_layer_s"], "head_ms": 1000 * split["head_s"]}


def step_splits(
    decoders: dict[str, Any], prompts: tuple[torch.Tensor, torch.Tensor], repeats: int
) -> dict[str, dict[str, float]]:
    """Each timed path's cost split of a decode step, by its suffix (none for a path that runs
    one graph a pass: there is no split inside it)."""
    ids, mask = prompts
    return {
        suffix: step_cost_split(d, ids, mask, steps=max(5, 2 * repeats))
        for suffix, d in decoders.items()
        if suffix not in ("-compiled-plan", "-step")
    }
