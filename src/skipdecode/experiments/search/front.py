"""The schedule search's page: every trial, its Pareto front, and the best schedule.

From a search's sweep folder (``<job>/trial.json`` of each trial; :mod:`.trial`): one row per
trial (its schedule, measured decode speedup, quality difference from full, whether it meets the
floor), the Pareto front over the two objectives (no other trial is at least as fast and at
least as good, and better in one), and the best schedule: the fastest trial that meets the
floor. Writes ``search.md``, ``search.csv`` and ``search_front.png`` (every trial, the front
joined) into ``--out`` (default: the sweep folder), each whole or not at all. ``--min-speed S``
also names the best-quality trial at least S fast, and ``--preset conf/schedule/<name>.yaml``
writes the chosen trial's schedule as a preset, which the sweep then scores on the test split
like any schedule (``make study NAME=searched_scitldr``). ``--against`` a
published randomized model's folder (its ``one_model.csv``) puts the per-schedule fine-tuned
cells beside the front: their measured decode speedup and quality difference from their own
full cell, on the test split (the trials' are on the validation subset; the page says so).

    python -m skipdecode.experiments.search.front outputs/search/<time> [--out results/...]
        [--against results/scitldr_randomized]
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...io import read_json_or_none, write_text_atomic
from ..sweeps.one_model import against_of
from ..sweeps.plots import save_figure
from ..sweeps.table import csv_text
from .trial import METRICS, TRIAL_FILE

__all__ = [
    "WRITTEN_BY", "best_at_speed", "best_trial", "pareto_front", "read_trials", "rewrite_page",
    "write_front",
]  # fmt: skip

COLUMNS = ("trial", "status", "schedule", "speed", "delta", "feasible", "front", "error")


def read_trials(sweep: Path) -> list[dict[str, Any]]:
    """Every trial of the sweep folder, by job number."""
    found = []
    for path in sweep.glob(f"*/{TRIAL_FILE}"):
        trial = read_json_or_none(path) or {}
        found.append({**trial, "trial": path.parent.name})
    return sorted(found, key=lambda t: int(t["trial"]) if t["trial"].isdigit() else 1 << 30)


def pareto_front(trials: Sequence[Mapping[str, Any]]) -> list[str]:
    """The trials no other dominates on (speed, delta), both maximised."""
    ok = [t for t in trials if t.get("status") == "ok"]

    def dominated(t: Mapping[str, Any]) -> bool:
        return any(
            o["speed"] >= t["speed"]
            and o["delta"] >= t["delta"]
            and (o["speed"] > t["speed"] or o["delta"] > t["delta"])
            for o in ok
        )

    return [t["trial"] for t in ok if not dominated(t)]


def best_trial(trials: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The fastest trial that meets its floor (None if none does)."""
    feasible = [t for t in trials if t.get("status") == "ok" and t.get("feasible")]
    return max(feasible, key=lambda t: (t["speed"], t["delta"]), default=None)


def best_at_speed(
    trials: Sequence[Mapping[str, Any]], min_speed: float
) -> Mapping[str, Any] | None:
    """The trial with the best quality among those at least ``min_speed`` fast (ties: the
    faster); None if no trial is that fast."""
    fast = [t for t in trials if t.get("status") == "ok" and t["speed"] >= min_speed]
    return max(fast, key=lambda t: (t["delta"], t["speed"]), default=None)


def write_preset(trial: Mapping[str, Any], path: Path, sweep: Path, why: str) -> None:
    """The trial's schedule as a schedule preset (``conf/schedule/<name>.yaml``), so that the
    sweep can evaluate it on the test split like any other schedule."""
    head = (
        f"# Written by python -m skipdecode.experiments.search.front {sweep.as_posix()}: trial "
        f"{trial['trial']}, {why}\n# (measured {trial['speed']:.2f}x decode, "
        f"Δ{trial.get('metric')} {trial['delta']:+.2f} on the validation subset); do not edit.\n"
    )
    body = "".join(f"{k}: {json.dumps(v)}\n" for k, v in trial["schedule"].items())
    write_text_atomic(path, head + body)


def per_schedule_points(one_model_csv: Path, metric: str) -> list[dict[str, Any]]:
    """The per-schedule fine-tuned cells of a randomized model's ``one_model.csv``: each
    schedule's measured decode speedup and ``metric`` difference from the full cell (the
    page's scale), test split."""
    import csv

    rows = list(csv.DictReader(one_model_csv.open()))
    column = f"per_schedule_{metric}"
    full = next((r for r in rows if r["schedule"] == "full"), None)
    if full is None or column not in full or not full[column]:
        raise ValueError(f"{one_model_csv} has no full row with {column}")
    points = []
    for r in rows:
        speed = r.get("per_schedule_measured_speedup_decode")
        if r["schedule"] == "full" or not speed or not r.get(column):
            continue
        if r.get("per_schedule") not in (None, "", r["schedule"]):
            continue  # a schedule compared with another's cells (a searched one): not beside
        delta = METRICS[metric] * (float(r[column]) - float(full[column]))
        points.append({"schedule": r["schedule"], "speed": float(speed), "delta": delta})
    return points


def _plot(
    trials: Sequence[Mapping[str, Any]],
    front: Sequence[str],
    floor: float,
    path: Path,
    beside: Sequence[Mapping[str, Any]] = (),
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [t for t in trials if t.get("status") == "ok"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([t["speed"] for t in ok], [t["delta"] for t in ok], s=18, label="trials")
    line = sorted((t for t in ok if t["trial"] in front), key=lambda t: t["speed"])
    ax.plot(
        [t["speed"] for t in line],
        [t["delta"] for t in line],
        "o-",
        color="C3",
        label="Pareto front",
    )
    if beside:
        ax.scatter([p["speed"] for p in beside], [p["delta"] for p in beside], marker="x",
                   color="C2", label="per-schedule fine-tuned cells (test split)")  # fmt: skip
        for p in beside:
            ax.annotate(p["schedule"], (p["speed"], p["delta"]), fontsize=7)
    ax.axhline(floor, color="grey", linestyle="--", label=f"quality floor {floor:+g}")
    ax.set_xlabel("measured decode speedup vs full (validation subset)")
    ax.set_ylabel(f"Δ{ok[0]['metric'] if ok else 'quality'} vs full")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def _trial_lines(trials: Sequence[Mapping[str, Any]], front: Sequence[str]) -> list[str]:
    lines = []
    for t in trials:
        if t.get("status") != "ok":
            lines.append(
                f"| {t['trial']} | {t.get('schedule')} | invalid: {t.get('error')} |  |  |  |"
            )
            continue
        lines.append(
            f"| {t['trial']} | `{json.dumps(t['schedule'], sort_keys=True)}` | {t['speed']:.2f}x | "
            f"{t['delta']:+.2f} | {'yes' if t.get('feasible') else 'no'} | "
            f"{'yes' if t['trial'] in front else ''} |"
        )
    return lines


def _beside_lines(beside: Sequence[Mapping[str, Any]], against: Path, base: Path) -> list[str]:
    return [
        "",
        f"Beside the front (the plot's crosses): the per-schedule fine-tuned cells of "
        f"`{against_of(base / against) or against.as_posix()}` (from "
        f"`{against.as_posix()}/one_model.csv`), each against its own full cell on the test "
        "split (the trials above are on the validation subset, against the searched model's "
        "full).",
        "",
        "| per-schedule cell | speedup | Δ |",
        "|---|---|---|",
        *(f"| {p['schedule']} | {p['speed']:.2f}x | {p['delta']:+.2f} |" for p in beside),
    ]


def write_front(
    sweep: Path,
    out: Path | None = None,
    against: Path | None = None,
    min_speed: float | None = None,
    preset: Path | None = None,
    plot: bool = True,
    root: Path | None = None,
) -> dict[str, Path] | None:
    """Write the page, its CSV and (``plot``) the plot; None when the folder holds no trial.
    ``against``: a randomized model's folder whose per-schedule cells go beside the front;
    ``min_speed``: also name the best-quality trial at least that fast; ``preset``: write the
    chosen trial (that one, else the best at the floor) as a schedule preset. ``root``: the
    folder ``sweep`` and ``against`` are read from (default: the working directory); the page
    names them as given."""
    base = root or Path()
    trials = read_trials(base / sweep)
    if not trials:
        return None
    beside = [] if against is None else per_schedule_points(
        base / against / "one_model.csv", trials[0].get("metric")
    )  # fmt: skip
    out = out or base / sweep
    out.mkdir(parents=True, exist_ok=True)
    front = pareto_front(trials)
    best = best_trial(trials)
    fast = None if min_speed is None else best_at_speed(trials, min_speed)
    floor = float(trials[0].get("quality_floor", 0.0))
    metric = trials[0].get("metric")
    rows = [
        {
            **t,
            "schedule": json.dumps(t.get("schedule"), sort_keys=True),
            "front": t["trial"] in front,
        }
        for t in trials
    ]
    lines = [
        "# Schedule search: every trial, the Pareto front, the best schedule",
        "",
        f"Written by `python -m skipdecode.experiments.search.front {sweep.as_posix()}"
        + (f" --against {against.as_posix()}" if against is not None else "")
        + (f" --min-speed {min_speed:g}" if min_speed is not None else "")
        + "` from the "
        f"trials' records; do not edit. {len(trials)} trials on the validation subset (never the "
        f"test split); objectives, both maximised: the measured decode speedup against full on "
        f"the same batches, and Δ{metric} against full; floor {floor:+g}.",
        "",
        "Best (the fastest trial at or above the floor): "
        + (_named(best, metric) if best else "none: no trial meets the floor."),
        "",
        *_at_speed_lines(fast, min_speed, metric),
        "| trial | schedule | speedup | Δ | meets floor | front |",
        "|---|---|---|---|---|---|",
    ]
    lines += _trial_lines(trials, front)
    if beside:
        lines += _beside_lines(beside, against, base)
    paths = {"md": out / "search.md", "csv": out / "search.csv", "png": out / "search_front.png"}
    if preset is not None:
        chosen, why = _chosen(best, fast, min_speed)
        write_preset(chosen, preset, sweep, why)
        paths["preset"] = preset
    write_text_atomic(paths["csv"], csv_text(rows, COLUMNS))
    if plot:
        _plot(trials, front, floor, paths["png"], beside)
    write_text_atomic(paths["md"], "\n".join(lines) + "\n")
    return paths


#: The command a page says wrote it: the sweep, ``--against`` and ``--min-speed``.
WRITTEN_BY = re.compile(r"search\.front (\S+)(?: --against (\S+))?(?: --min-speed (\S+))?`")


def rewrite_page(sweep: Path, root: Path) -> Path | None:
    """``make docs``: the published page of ``sweep`` written again with the command it names
    (paths from the repository ``root``), from the committed trials and the ``one_model.csv``
    it names as they are now; the plot is left as published. None without a page."""
    page = root / sweep / "search.md"
    if not page.is_file():
        return None
    found = WRITTEN_BY.search(page.read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"{page}: names no search.front command to write it again")
    named, against, min_speed = found.groups()
    write_front(
        Path(named), None, None if against is None else Path(against),
        None if min_speed is None else float(min_speed), plot=False, root=root,
    )  # fmt: skip
    return page


def _named(trial: Mapping[str, Any], metric: Any) -> str:
    """A trial as the page names it: number, schedule, speed and quality difference."""
    return (
        f"trial {trial['trial']}, `{json.dumps(trial['schedule'], sort_keys=True)}`, "
        f"{trial['speed']:.2f}x, Δ{metric} {trial['delta']:+.2f}."
    )


def _at_speed_lines(
    fast: Mapping[str, Any] | None, min_speed: float | None, metric: Any
) -> list[str]:
    if min_speed is None:
        return []
    text = _named(fast, metric) if fast else "none: no trial is that fast."
    return [f"Best quality at or above {min_speed:g}x measured: {text}", ""]


def _chosen(
    best: Mapping[str, Any] | None, fast: Mapping[str, Any] | None, min_speed: float | None
) -> tuple[Mapping[str, Any], str]:
    """The trial a preset is written for: the best at ``min_speed`` where given, else the
    fastest at the floor."""
    if min_speed is not None:
        if fast is None:
            raise ValueError(f"--min-speed {min_speed:g}: no trial is that fast; no preset")
        return fast, f"the best quality at or above {min_speed:g}x"
    if best is None:
        raise ValueError("--preset: no trial meets the floor; give --min-speed to choose one")
    return best, "the fastest at or above the floor"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", type=Path, help="the search's sweep folder")
    p.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep)")
    p.add_argument(
        "--against", type=Path, default=None,
        help="a randomized model's results folder (its one_model.csv): the per-schedule cells",
    )  # fmt: skip
    p.add_argument(
        "--min-speed", type=float, default=None,
        help="also name the best-quality trial at least this fast (measured decode speedup)",
    )  # fmt: skip
    p.add_argument(
        "--preset", type=Path, default=None,
        help="write the chosen trial's schedule as a preset (conf/schedule/<name>.yaml)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.min_speed is not None and not args.min_speed > 0:
        p.error(f"--min-speed: {args.min_speed!r}; allowed: a speedup > 0")
    if not args.sweep.is_dir():
        p.error(f"sweep: {str(args.sweep)!r} is not a directory")
    if args.against is not None and not (args.against / "one_model.csv").is_file():
        p.error(f"--against: {str(args.against)!r} has no one_model.csv")
    try:
        written = write_front(args.sweep, args.out, args.against, args.min_speed, args.preset)
    except ValueError as e:
        p.error(str(e))
    print(written["md"] if written else f"{args.sweep}: no trials")


if __name__ == "__main__":
    main()
