"""The matched-speed pages (``matched.md``) recomputed from their folder's ``cells.csv``.

Own arithmetic: the speed axis is the measured decode speedup where every finished cell other
than full has one, else the theoretical one. Each method (full and the lossless mode left out)
has one curve a seed: its cells of that seed as (speed, metric) points and (1.0, the full cell
of the same seed); where cells name the fine-tuning steps they were evaluated after
(``train_steps``), one curve a seed and number of steps, anchored at full after as many. A
method's value at a common speed ``s`` is the straight line between the two points of the curve
around ``s`` (the first such pair in speed order; no value where the curve does not reach
``s``); over the seeds that reach it: the mean and its 95% t-interval, of the value and of its
difference from full of the same seed. Every row the page prints must be one of these and every
one of these must be printed. ``cells.csv`` itself is checked against the records by
:mod:`.tables`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..sweeps.excerpts import page_tables
from .findings import Findings, check_rows, csv_rows
from .tables import mean_interval

__all__ = ["check_matched"]

SPEEDS = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
METRICS = (("bleu", "BLEU"), ("bertscore_f1", "BERT-F"))
_LEFT_OUT = ("full", "speculative")


def _num(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _at(points: list[tuple[float, float]], x: float) -> float | None:
    ordered = sorted(points)
    for (x0, y0), (x1, y1) in zip(ordered, ordered[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ordered[0][1] if len(ordered) == 1 and ordered[0][0] == x else None


def _expected(cells: list[dict[str, str]]) -> dict[tuple[str, ...], dict[str, Any]]:
    ok = [c for c in cells if c.get("status") == "ok"]
    others = [c for c in ok if c.get("method") != "full"]
    axis = "measured_speedup_decode"
    if not others or any(_num(c.get(axis)) is None for c in others):
        axis = "theoretical_speedup"
    full = {
        (c["dataset"], c["model"], c["seed"], c.get("train_steps") or ""): c
        for c in ok
        if c["method"] == "full"
    }
    curves: dict[tuple[str, ...], dict[str, list[Mapping[str, str]]]] = {}
    for c in ok:
        if c["method"] not in _LEFT_OUT and _num(c.get(axis)) is not None:
            curve = (c["dataset"], c["model"], c["method"], c.get("train_steps") or "")
            curves.setdefault(curve, {}).setdefault(c["seed"], []).append(c)
    out = {}
    for (dataset, model, method, steps), by_seed in curves.items():
        for s in SPEEDS:
            seeds, values = [], {m: ([], []) for m, _ in METRICS}
            for seed in sorted(by_seed):
                anchor = full.get((dataset, model, seed, steps))
                if anchor is None:
                    continue
                got = {}
                for m, _ in METRICS:
                    pts = [(1.0, _num(anchor.get(m)))] + [
                        (_num(c[axis]), _num(c.get(m))) for c in by_seed[seed]
                    ]
                    got[m] = None if any(y is None for _, y in pts) else _at(pts, s)
                if any(v is None for v in got.values()):
                    continue
                seeds.append(seed)
                for m, _ in METRICS:
                    values[m][0].append(got[m])
                    values[m][1].append(got[m] - _num(anchor[m]))
            if seeds:
                row: dict[str, Any] = {"seeds": " ".join(seeds)}
                for m, label in METRICS:
                    row[label] = [v for v in mean_interval(values[m][0]) if v is not None]
                    row[f"Δ{label} vs full [per-seed t CI]"] = [
                        v for v in mean_interval(values[m][1]) if v is not None
                    ]
                out[(dataset, model, f"{s:.1f}x", method, *([steps] if steps else []))] = row
    return out


def _leading(row: dict[str, str]) -> tuple[str, ...]:
    """A row's key: dataset, model, speed and method, its first four cells, and its steps
    where the page has them."""
    return (*list(row.values())[:4], *([row["steps"]] if "steps" in row else []))


def _check_page(folder: Path, found: Findings) -> None:
    expected = _expected(csv_rows(folder / "cells.csv"))
    tables = page_tables((folder / "matched.md").read_text(encoding="utf-8"))
    table = tables[0] if tables else ([], [])
    check_rows(found, f"{folder.name}/matched.md", table, expected, _leading)


def check_matched(results: Path) -> Findings:
    """Every folder's ``matched.md`` from its ``cells.csv``."""
    found = Findings("matched-speed pages from cells")
    for page in sorted(results.glob("*/matched.md")):
        _check_page(page.parent, found)
    return found
