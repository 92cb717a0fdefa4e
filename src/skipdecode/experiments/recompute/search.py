"""The schedule-search pages (``<folder>/search/search.md``) recomputed from the trials' records.

Own arithmetic on each trial's ``trial.json``: whether it meets the floor (its quality difference
at or above the floor the trial states), the Pareto front over (measured decode speedup, quality
difference), both maximised (no other finished trial at least as good in both and better in
one), the best trial (the fastest that meets the floor) and the best-quality trial at or above
the page's minimum speed; every trial row prints its speedup and difference at the printed
digits, its floor and front marks (a trial whose schedule could not be built, its error). The per-schedule cells beside the front come from the
``one_model.csv`` the page names: each schedule's measured decode speedup and its quality
difference from the full row, on the page's scale (a row compared with another schedule's cells
is not beside). ``one_model.csv`` itself is checked by :mod:`.summaries`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..search.front import WRITTEN_BY
from ..search.trial import METRICS
from ..sweeps.excerpts import page_tables
from .findings import Findings, check_rows, csv_rows

__all__ = ["check_search"]

_TRIAL = re.compile(r"^trial (\d+), ")


def _front(trials: list[dict[str, Any]]) -> set[str]:
    ok = [t for t in trials if t.get("status") == "ok"]
    return {
        t["trial"]
        for t in ok
        if not any(
            o["speed"] >= t["speed"]
            and o["delta"] >= t["delta"]
            and (o["speed"], o["delta"]) != (t["speed"], t["delta"])
            for o in ok
        )
    }


def _beside(one_model: Path, metric: str) -> dict[tuple[str, ...], dict[str, Any]]:
    rows = csv_rows(one_model)
    column = f"per_schedule_{metric}"
    full = float(next(r for r in rows if r["schedule"] == "full")[column])
    out = {}
    for r in rows:
        speed = r.get("per_schedule_measured_speedup_decode")
        if r["schedule"] == "full" or not speed or not r.get(column):
            continue
        if r.get("per_schedule") in (None, "", r["schedule"]):
            delta = METRICS[metric] * (float(r[column]) - full)
            out[(r["schedule"],)] = {"speedup": [float(speed)], "Δ": [delta]}
    return out


def _named(text: str, label: str) -> str | None:
    """The trial number a page's sentence starting with ``label`` names (``none`` if none)."""
    line = next((x for x in text.splitlines() if x.startswith(label)), None)
    if line is None:
        return None
    match = _TRIAL.match(line[len(label) :].strip())
    return match.group(1) if match else "none"


def _check_page(page: Path, results: Path, found: Findings) -> None:
    text = page.read_text(encoding="utf-8")
    trials = []
    for path in page.parent.glob("*/trial.json"):
        trials.append({**json.loads(path.read_text(encoding="utf-8")), "trial": path.parent.name})
    trials.sort(key=lambda t: int(t["trial"]) if t["trial"].isdigit() else 1 << 30)  # job order
    ok = [t for t in trials if t.get("status") == "ok"]
    front, where = _front(trials), f"{page.parent.parent.name}/search/search.md"
    expected: dict[tuple[str, ...], dict[str, Any]] = {
        (t["trial"],): {"speedup": f"invalid: {t.get('error')}", "Δ": "", "front": ""}
        for t in trials
        if t.get("status") != "ok"
    }
    for t in ok:
        meets = t["delta"] >= float(t["quality_floor"])
        found.compare(where, f"trial {t['trial']} feasible", t.get("feasible"), meets)
        expected[(t["trial"],)] = {
            "speedup": [t["speed"]],
            "Δ": [t["delta"]],
            "meets floor": "yes" if meets else "no",
            "front": "yes" if t["trial"] in front else "",
        }
    tables = page_tables(text)
    first = lambda row: (next(iter(row.values()), ""),)  # noqa: E731
    check_rows(found, where, tables[0] if tables else ([], []), expected, first)
    feasible = [t for t in ok if t["delta"] >= float(t["quality_floor"])]
    best = max(feasible, key=lambda t: (t["speed"], t["delta"]), default=None)
    found.compare(
        where, "best trial", _named(text, "Best (the fastest"), best["trial"] if best else "none"
    )
    command = WRITTEN_BY.search(text)
    if command and command.group(3):
        fast = [t for t in ok if t["speed"] >= float(command.group(3))]
        chosen = max(fast, key=lambda t: (t["delta"], t["speed"]), default=None)
        label = f"Best quality at or above {command.group(3)}x measured:"
        found.compare(
            where, "best at speed", _named(text, label), chosen["trial"] if chosen else "none"
        )
    if command and command.group(2):
        metric = ok[0]["metric"] if ok else "rougeL_max"
        beside = _beside(results.parent / command.group(2) / "one_model.csv", metric)
        table = next((t for t in tables if t[0] and t[0][0] == "per-schedule cell"), ([], []))
        check_rows(found, f"{where} beside", table, beside, first)


def check_search(results: Path) -> Findings:
    """Every schedule search's page from its trials."""
    found = Findings("schedule-search pages from their trials")
    for page in sorted(results.glob("*/search/search.md")):
        _check_page(page, results.resolve(), found)
    return found
