"""What a results row's interval columns decide, worked out here from the CSV text alone (the
rule itself is the audit's, which does not use the writer's)."""

from __future__ import annotations

from collections.abc import Mapping

from skipdecode.experiments.recompute.summaries import decided_by


def verdict_from_columns(row: Mapping[str, str], metric: str) -> str:
    """``lower``/``higher`` where every interval the row prints lies below/above 0 (the inputs'
    bootstrap, and the per-seed one where printed), else ``undecided``; one interval: inputs
    only, and the verdict says so."""
    intervals = []
    for kind in ("", "_seed"):
        low, high = row[f"{metric}_delta{kind}_ci95_low"], row[f"{metric}_delta{kind}_ci95_high"]
        if low != "" and high != "":
            intervals.append((float(low), float(high)))
    assert intervals, f"{metric}: no interval printed"
    return decided_by(intervals)
