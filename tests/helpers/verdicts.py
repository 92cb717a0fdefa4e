"""What a results row's interval columns decide, worked out here from the CSV text alone."""

from __future__ import annotations

from collections.abc import Mapping


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
    if all(high < 0 for _, high in intervals):
        verdict = "lower"
    elif all(low > 0 for low, _ in intervals):
        verdict = "higher"
    else:
        return "undecided"
    return verdict if len(intervals) > 1 else f"{verdict} (inputs only)"
