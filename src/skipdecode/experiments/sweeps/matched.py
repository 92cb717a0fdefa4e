"""Methods compared at the same reached speed, not at the same nominal target.

Two schedules both called "2x" can reach 1.62x and 2.00x: comparing their quality there compares
points 20% apart in speed. Here each method's quality is read off its own curve at common
speedups instead. For every seed, a method's curve is its cells of that seed as (speedup,
metric) points, anchored at (1.0, the ``full`` cell of the same seed): the full model is where
every method starts. Cells evaluated after a number of fine-tuning steps (a budget sweep's
``train_steps``) make one curve per number of steps, anchored at full after as many: models
fine-tuned for different budgets are not points of one curve. The value at a common speedup
``s`` is the linear interpolation between the two points of the curve around ``s`` (never an
extrapolation: a seed whose curve does not reach ``s`` has no value there). Across seeds: the
mean, its 95% t-interval, and the same for the difference against full of the same seed (the
seed-aware interval).

The speedup is the measured decode speedup where the cells were timed, else the theoretical one
(the table says which). The lossless mode is left out: its quality is the full model's by
construction, whatever its speed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...io import write_text_atomic
from .seeds import mean_ci95
from .table import num

__all__ = ["MATCHED_MD", "MATCHED_SPEEDUPS", "matched_rows", "format_matched", "write_matched"]

MATCHED_MD = "matched.md"
MATCHED_SPEEDUPS = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
METRICS = (("bleu", "BLEU", 2), ("bertscore_f1", "BERT-F", 3))
_LEFT_OUT = ("full", "speculative")


def speed_column(cells: Sequence[Mapping[str, Any]]) -> str:
    """The measured decode speedup when every finished cell has one, else the theoretical."""
    ok = [c for c in cells if c.get("status") == "ok" and c.get("method") != "full"]
    if ok and all(num(c.get("measured_speedup_decode")) is not None for c in ok):
        return "measured_speedup_decode"
    return "theoretical_speedup"


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """Linear interpolation of ``points`` (any order) at ``x``; None outside their range."""
    pts = sorted(points)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[0][1] if len(pts) == 1 and pts[0][0] == x else None


def _on_curve(
    anchor: Mapping[str, Any], points: Sequence[tuple[float, Mapping]], metric: str, x: float
) -> float | None:
    """``metric`` at speedup ``x`` on one seed's curve: ``points`` (speedup, cell) anchored at
    (1.0, the full cell); None where a point lacks the metric or the curve does not reach."""
    pts = [(1.0, num(anchor.get(metric)))] + [(sx, num(c.get(metric))) for sx, c in points]
    return None if any(y is None for _, y in pts) else interpolate(pts, x)


def _steps(cell: Mapping[str, Any]) -> str:
    """The fine-tuning steps a cell was evaluated after ("" where its folder does not say)."""
    steps = num(cell.get("train_steps"))
    return "" if steps is None else str(int(steps))


def matched_rows(
    cells: Sequence[Mapping[str, Any]], speedups: Sequence[float] = MATCHED_SPEEDUPS
) -> list[dict[str, Any]]:
    """One row per (dataset, model, method, fine-tuning steps, speedup) that at least one
    seed's curve reaches."""
    x = speed_column(cells)
    ok = [c for c in cells if c.get("status") == "ok"]
    full = {
        (c["dataset"], c["model"], str(c.get("seed")), _steps(c)): c
        for c in ok
        if c["method"] == "full"
    }
    curves: dict[tuple, dict[str, list[tuple[float, Mapping]]]] = {}
    for c in ok:
        if c.get("method") in _LEFT_OUT or num(c.get(x)) is None:
            continue
        key = (c["dataset"], c["model"], c["method"], _steps(c))
        curves.setdefault(key, {}).setdefault(str(c.get("seed")), []).append((num(c[x]), c))
    rows = []
    for (dataset, model, method, steps), by_seed in sorted(curves.items()):
        for s in speedups:
            row: dict[str, Any] = {
                "dataset": dataset,
                "model": model,
                "method": method,
                "steps": steps,
                "speedup": s,
                "speed": x,
            }
            seeds = []
            values: dict[str, list[float]] = {m: [] for m, _, _ in METRICS}
            deltas: dict[str, list[float]] = {m: [] for m, _, _ in METRICS}
            for seed, points in sorted(by_seed.items()):
                anchor = full.get((dataset, model, seed, steps))
                if anchor is None:
                    continue
                got = {m: _on_curve(anchor, points, m, s) for m, _, _ in METRICS}
                if any(v is None for v in got.values()):
                    continue
                seeds.append(seed)
                for metric in got:
                    values[metric].append(got[metric])
                    deltas[metric].append(got[metric] - num(anchor[metric]))
            if not seeds:
                continue
            row["seeds"] = " ".join(seeds)
            for metric, _, _ in METRICS:
                row[metric], row[f"{metric}_low"], row[f"{metric}_high"] = mean_ci95(values[metric])
                d, lo, hi = mean_ci95(deltas[metric])
                row[f"{metric}_delta"], row[f"{metric}_delta_low"], row[f"{metric}_delta_high"] = (
                    d,
                    lo,
                    hi,
                )
            rows.append(row)
    return sorted(
        rows,
        key=lambda r: (r["dataset"], r["model"], r["speedup"], r["method"], int(r["steps"] or 0)),
    )


def _value(row: Mapping[str, Any], key: str, digits: int, sign: bool = False) -> str:
    fmt = f"{{:{'+' if sign else ''}.{digits}f}}"
    text = fmt.format(row[key])
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    if low is not None and high is not None:
        text += f" [{fmt.format(low)}, {fmt.format(high)}]"
    return text


def format_matched(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The matched-speed table (Markdown), or None when no method reaches a common speedup. A
    ``steps`` column after the method where the cells were evaluated after a number of steps."""
    if not rows:
        return None
    speed = "measured decode" if rows[0]["speed"] == "measured_speedup_decode" else "theoretical"
    stepped = any(r.get("steps") for r in rows)
    header = ["dataset", "model", f"speedup ({speed})", "method", *(["steps"] * stepped), "seeds"]
    for _, label, _ in METRICS:
        header += [label, f"Δ{label} vs full [per-seed t CI]"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        cells = [r["dataset"], r["model"], f"{r['speedup']:.1f}x", r["method"]]
        cells += [*([r["steps"]] * stepped), r["seeds"]]
        for metric, _, digits in METRICS:
            cells += [_value(r, metric, digits), _value(r, f"{metric}_delta", digits, True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_matched(cells: Sequence[Mapping[str, Any]], out_dir: str | Path) -> Path | None:
    """Write ``matched.md`` into ``out_dir`` (atomically); None when there is nothing to match."""
    text = format_matched(matched_rows(cells))
    return None if text is None else write_text_atomic(Path(out_dir) / MATCHED_MD, text)
