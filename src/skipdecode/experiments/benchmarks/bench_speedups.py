"""What the decode benchmark derives from its timings: each schedule's speedups over its own
path's full schedule and over transformers' ``generate``, the variant whose tokens a variant must
equal, and batches slower per step than larger ones."""

from __future__ import annotations

from typing import Any

from ...schedules import StaticSchedule

__all__ = ["derive_speedups", "flag_batches", "reference_of"]


def derive_speedups(
    rows: dict[str, dict[str, Any]],
    schedules: dict[str, StaticSchedule],
    splits: dict[str, dict[str, float]],
    L: int,
    with_transformers: bool,
) -> None:
    """Each schedule's theoretical, measured and ideal speedup over the full schedule of its
    own path (eager over eager, compiled over compiled), the ideal from that path's own cost
    split, and the speedup over the optimized peer. A measured speedup above the theoretical
    one, or above the ideal one (efficiency above 1), is flagged. A path timed without a cost
    split (whole-step graphs: one graph a pass) gets no ideal speedup. A peer whose decode timed
    at zero (``generate``'s decode is its whole call less a one-token call, which noise can
    match on a tiny model) gives no speedups and is flagged."""
    paths: dict[str, dict[str, float] | None] = dict(splits)
    if "skipdecode-full-step" in rows:
        paths["-step"] = None
    for suffix, split in paths.items():
        full = rows[f"skipdecode-full{suffix}"]["decode_ms_per_step"] / 1000
        for name, sched in schedules.items():
            if name + suffix not in rows:  # not timed on this path
                continue
            r = rows[name + suffix]
            m = r["layers_per_token"]
            r["theoretical_speedup"] = L / m
            r["measured_speedup"] = full / (r["decode_ms_per_step"] / 1000)
            r["schedule"] = sched.describe()
            flags = []
            if r["measured_speedup"] > r["theoretical_speedup"] * 1.02:
                flags.append("measured above theoretical")
            if split is not None:
                other = min(split["non_layer_s"], full)
                r["ideal_speedup"] = full / (other + m * (full - other) / L)
                r["efficiency"] = r["measured_speedup"] / r["ideal_speedup"]
                if r["efficiency"] > 1.02:
                    flags.append("measured above ideal")
            if flags:
                r["flag"] = "; ".join(flags)
    if not with_transformers:
        return
    for peer in (
        "transformers-generate",
        "transformers-generate-compiled",
        "transformers-loop-compiled",
    ):
        if peer not in rows:
            continue
        t = rows[peer]["decode_ms_per_step"]
        if not t:  # its whole call timed no longer than its one-token call: no decode to divide
            note = "decode not timed above zero (its prefill call took as long): no speedups"
            rows[peer]["flag"] = "; ".join(x for x in (rows[peer].get("flag"), note) if x)
            continue
        for r in rows.values():
            if r["decode_ms_per_step"]:  # a row timed at zero has no speedup over anything
                r[f"speedup_vs_{peer.replace('-', '_')}"] = t / r["decode_ms_per_step"]


def reference_of(name: str) -> str:
    """The variant whose tokens ``name``'s must equal: the compiled path's for a CUDA-graph
    variant (the same compiled kernels, replayed), the per-layer graphs' for a whole-step one
    (the same layer kernels; the embedding, head and choice compiled into the step)."""
    if name.endswith("-step"):
        return name.removesuffix("-step") + "-graphs"
    return name.removesuffix("-graphs") + "-compiled" if name.endswith("-graphs") else ""


def flag_batches(cells: list[dict[str, Any]]) -> None:
    """Flag a variant whose ms per step at some batch exceeds its ms per step at a larger
    batch of the same shape (a smaller batch should never be slower per step)."""
    by_shape: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        by_shape.setdefault(c["shape"], []).append(c)
    for group in by_shape.values():
        group.sort(key=lambda c: c["batch_size"])
        for i, small in enumerate(group):
            for big in group[i + 1 :]:
                for name, r in small["variants"].items():
                    other = big["variants"].get(name)
                    if other is None or None in (
                        r["decode_ms_per_step"],
                        other["decode_ms_per_step"],
                    ):
                        continue
                    if r["decode_ms_per_step"] > other["decode_ms_per_step"]:
                        note = f"slower per step than batch {big['batch_size']}"
                        r["flag"] = "; ".join(x for x in (r.get("flag"), note) if x)
