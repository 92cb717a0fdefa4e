"""How much fine-tuning a schedule needs: its quality difference from ``full`` against the
training steps both were evaluated at (a sweep with ``sweep.eval_step``, :mod:`.steps`).

From a results folder's ``results.csv`` (one row per schedule and ``train_steps``, each paired
with ``full`` at the same steps over the seeds both have): a table per schedule of the metric,
Δ against full with its two-level bootstrap interval (seeds x inputs) and, with two or more
paired seeds, the t-interval over per-seed differences; whether the difference is decided (every
interval excludes 0); and the smallest budget from which it is not decided at any larger one.
Writes ``budget.md``, ``budget.csv`` and ``budget.png`` (Δ against steps, intervals as bars),
each whole or not at all; nothing where the folder has no ``train_steps`` rows.

    python -m skipdecode.experiments.sweeps.budget results/<folder> [...]
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...io import write_text_atomic
from .plots import save_figure
from .summaries import markdown_table
from .table import TABLE_CSV, csv_text, num, page_command

__all__ = ["budget_rows", "write_budget"]

#: The metrics a budget page reads from results.csv, with their page labels and scales.
METRICS = {"bleu": ("BLEU", 1.0), "rougeL": ("ROUGE-L per-type max", 100.0)}
COLUMNS = ("schedule", "train_steps", "seeds", "delta_seeds", "metric", "full", "value",
           "delta", "delta_ci95_low", "delta_ci95_high", "delta_seed_ci95_low",
           "delta_seed_ci95_high", "decided")  # fmt: skip


def _metric(rows: Sequence[Mapping[str, Any]]) -> str:
    """BLEU where the rows have it, else ROUGE-L (summarization)."""
    return "bleu" if any(num(r.get("bleu_mean")) is not None for r in rows) else "rougeL"


def budget_rows(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (schedule other than full, steps), on the page's scale, ordered by both."""
    stepped = [r for r in results if num(r.get("train_steps")) is not None]
    if not stepped:
        return []
    metric = _metric(stepped)
    scale = METRICS[metric][1]
    full = {int(num(r["train_steps"])): r for r in stepped if r.get("schedule") == "full"}
    out = []
    for r in stepped:
        steps = int(num(r["train_steps"]))
        if r.get("schedule") == "full" or num(r.get(f"{metric}_delta")) is None:
            continue

        def scaled(key: str, row: Mapping[str, Any] = r) -> float | None:
            value = num(row.get(key))
            return None if value is None else value * scale

        bounds = [scaled(f"{metric}_delta_{k}") for k in ("ci95_low", "ci95_high")]
        seed = [scaled(f"{metric}_delta_seed_{k}") for k in ("ci95_low", "ci95_high")]
        intervals = [b for b in (bounds, seed) if None not in b]
        decided = bool(intervals) and all(lo > 0 or hi < 0 for lo, hi in intervals)
        out.append(
            {
                "schedule": r["schedule"], "train_steps": steps, "seeds": r.get("seeds"),
                "delta_seeds": r.get("delta_seeds"), "metric": METRICS[metric][0],
                "full": scaled(f"{metric}_mean", full.get(steps, {})),
                "value": scaled(f"{metric}_mean"), "delta": scaled(f"{metric}_delta"),
                "delta_ci95_low": bounds[0], "delta_ci95_high": bounds[1],
                "delta_seed_ci95_low": seed[0], "delta_seed_ci95_high": seed[1],
                "decided": decided,
            }
        )  # fmt: skip
    return sorted(out, key=lambda x: (str(x["schedule"]), x["train_steps"]))


def _from_where(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per schedule: the smallest budget from which no larger one is decided."""
    parts = []
    for schedule in sorted({r["schedule"] for r in rows}):
        mine = [r for r in rows if r["schedule"] == schedule]
        decided = [r["train_steps"] for r in mine if r["decided"]]
        if not decided:
            parts.append(f"{schedule}: not separable from full at any budget measured")
        elif decided[-1] == mine[-1]["train_steps"]:
            parts.append(f"{schedule}: still separable from full at {decided[-1]} steps")
        else:
            later = [r["train_steps"] for r in mine if r["train_steps"] > decided[-1]]
            parts.append(f"{schedule}: not separable from full from {later[0]} steps on")
    return "; ".join(parts) + "."


def _plot(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for schedule in sorted({r["schedule"] for r in rows}):
        mine = [r for r in rows if r["schedule"] == schedule]
        x = [r["train_steps"] for r in mine]
        y = [r["delta"] for r in mine]
        err = [[r["delta"] - r["delta_ci95_low"] for r in mine],
               [r["delta_ci95_high"] - r["delta"] for r in mine]]  # fmt: skip
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=schedule)
    ax.axhline(0.0, color="grey", linestyle="--")
    ax.set_xlabel("fine-tuning steps")
    ax.set_ylabel(f"Δ{rows[0]['metric']} vs full at the same steps")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def write_budget(folder: Path, plot: bool = True) -> dict[str, Path] | None:
    """The folder's budget page, CSV and (with ``plot``) plot; None where no row has
    ``train_steps``. ``make docs`` leaves the published plot as it is (a PNG's bytes depend on
    the plotting library's version)."""
    table = folder / TABLE_CSV
    if not table.is_file():
        return None
    rows = budget_rows(list(csv.DictReader(table.open())))
    if not rows:
        return None

    def text(value: Any) -> str:
        return "" if value is None else f"{value:+.2f}"

    lines = [
        [str(r["schedule"]), str(r["train_steps"]), str(r["delta_seeds"] or ""),
         f"{r['full']:.2f}" if r["full"] is not None else "", f"{r['value']:.2f}",
         f"{text(r['delta'])} [{text(r['delta_ci95_low'])}, {text(r['delta_ci95_high'])}]",
         "" if r["delta_seed_ci95_low"] is None
         else f"[{text(r['delta_seed_ci95_low'])}, {text(r['delta_seed_ci95_high'])}]",
         "yes" if r["decided"] else "no"]
        for r in rows
    ]  # fmt: skip
    metric = rows[0]["metric"]
    header = ["schedule", "steps", "paired seeds", f"full {metric}", metric,
              f"Δ{metric} [seeds x inputs]", "Δ [per-seed t]", "decided"]  # fmt: skip
    page = [
        "# How much fine-tuning each schedule needs",
        "",
        f"Written by `python -m skipdecode.experiments.sweeps.budget {folder.as_posix()}` from "
        "the folder's results table; do not edit. Every row: the schedule's model and the full "
        "model, each evaluated as it was after that many fine-tuning steps (one training run "
        "per schedule, `sweep.eval_step`), paired over the seeds both have. Decided: every "
        "interval excludes 0.",
        "",
        _from_where(rows),
        "",
        *markdown_table(header, lines),
        "",
        "![Δ against fine-tuning steps](budget.png)",
    ]
    paths = {"md": folder / "budget.md", "csv": folder / "budget.csv", "png": folder / "budget.png"}
    write_text_atomic(paths["csv"], csv_text(rows, COLUMNS))
    if plot:
        _plot(rows, paths["png"])
    write_text_atomic(paths["md"], "\n".join(page) + "\n")
    return paths


def main(argv: list[str] | None = None) -> None:
    page_command(__doc__.split("\n\n")[0], argv, write_budget, "no train_steps rows")


if __name__ == "__main__":
    main()
