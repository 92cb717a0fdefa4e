"""How much fine-tuning a schedule needs: its quality difference from ``full`` against the
training steps both were evaluated at (a sweep with ``sweep.eval_step``, :mod:`.steps`).

From a results folder's table of one row per schedule and ``train_steps``, each paired with
``full`` at the same steps over the seeds both have (:data:`SOURCES`: ``summaries.csv``'s ROUGE-L
in SciTLDR's *max* convention for a summarization folder, else ``results.csv``'s BLEU, else its
ROUGE-L per-type max): a table per schedule of the metric (each side's mean over its own seeds,
which the table names), Δ against full with its two-level bootstrap interval (seeds x inputs)
and, with two or more paired seeds, the t-interval over per-seed differences; whether the
difference is decided (every interval excludes 0); and the smallest budget from which it is not
decided at any larger one, saying where only the per-seed interval leaves those budgets
undecided. Writes ``budget.md``, ``budget.csv`` and ``budget.png`` (Δ against steps, intervals
as bars), each whole or not at all; nothing where the folder has no ``train_steps`` rows.

    python -m skipdecode.experiments.sweeps.budget results/<folder> [...]
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...io import write_text_atomic
from .plots import save_figure
from .summaries import SUMMARIES_CSV, markdown_table
from .table import TABLE_CSV, csv_text, num, page_command

__all__ = ["SOURCES", "budget_rows", "stepped_rows", "write_budget"]

#: Where a budget page reads its metric, the first that has stepped rows with it: (table, metric,
#: the column of its mean, page label, scale).
SOURCES = (
    (SUMMARIES_CSV, "rougeL_max", "rougeL_max", "ROUGE-L max", 100.0),
    (TABLE_CSV, "bleu", "bleu_mean", "BLEU", 1.0),
    (TABLE_CSV, "rougeL", "rougeL_mean", "ROUGE-L per-type max", 100.0),
)
COLUMNS = ("schedule", "train_steps", "full_seeds", "seeds", "delta_seeds", "metric", "full",
           "value", "delta", "delta_ci95_low", "delta_ci95_high", "delta_seed_ci95_low",
           "delta_seed_ci95_high", "decided")  # fmt: skip


def stepped_rows(folder: Path) -> tuple[list[dict[str, Any]], tuple] | None:
    """The rows evaluated at a training step of the folder's first :data:`SOURCES` table that
    has them with its metric, and that source (None: no such rows)."""
    for source in SOURCES:
        table = folder / source[0]
        rows = list(csv.DictReader(table.open())) if table.is_file() else []
        stepped = [r for r in rows if num(r.get("train_steps")) is not None]
        if any(num(r.get(source[2])) is not None for r in stepped):
            return stepped, source
    return None


def budget_rows(stepped: Sequence[Mapping[str, Any]], source: tuple) -> list[dict[str, Any]]:
    """One row per (schedule other than full, steps), on the page's scale, ordered by both."""
    _, metric, mean, label, scale = source
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
                "schedule": r["schedule"], "train_steps": steps,
                "full_seeds": full.get(steps, {}).get("seeds"), "seeds": r.get("seeds"),
                "delta_seeds": r.get("delta_seeds"), "metric": label,
                "full": scaled(mean, full.get(steps, {})),
                "value": scaled(mean), "delta": scaled(f"{metric}_delta"),
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
            tail = mine
            part = f"{schedule}: not separable from full at any budget measured"
        elif decided[-1] == mine[-1]["train_steps"]:
            parts.append(f"{schedule}: still separable from full at {decided[-1]} steps")
            continue
        else:
            tail = [r for r in mine if r["train_steps"] > decided[-1]]
            part = f"{schedule}: not separable from full from {tail[0]['train_steps']} steps on"
        parts.append(part + _only_per_seed(tail))
    return "; ".join(parts) + "."


def _only_per_seed(tail: Sequence[Mapping[str, Any]]) -> str:
    """Where every undecided row's seeds x inputs interval excludes 0, say so: only the
    per-seed t-interval (wide with few seeds) leaves those budgets undecided."""
    bounds = [(r["delta_ci95_low"], r["delta_ci95_high"]) for r in tail]
    if any(None in b or b[0] <= 0 <= b[1] for b in bounds):  # missing counts as including 0
        return ""
    return " (there every seeds x inputs interval excludes 0; only the per-seed one includes it)"


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
    found = stepped_rows(folder)
    rows = budget_rows(*found) if found else []
    if not found or not rows:
        return None

    def text(value: Any) -> str:
        return "" if value is None else f"{value:+.2f}"

    lines = [
        [str(r["schedule"]), str(r["train_steps"]), str(r["full_seeds"] or ""),
         f"{r['full']:.2f}" if r["full"] is not None else "", str(r["seeds"] or ""),
         f"{r['value']:.2f}", str(r["delta_seeds"] or ""),
         f"{text(r['delta'])} [{text(r['delta_ci95_low'])}, {text(r['delta_ci95_high'])}]",
         "" if r["delta_seed_ci95_low"] is None
         else f"[{text(r['delta_seed_ci95_low'])}, {text(r['delta_seed_ci95_high'])}]",
         "yes" if r["decided"] else "no"]
        for r in rows
    ]  # fmt: skip
    metric = rows[0]["metric"]
    header = ["schedule", "steps", "full seeds", f"full {metric}", "seeds", metric, "paired seeds",
              f"Δ{metric} [seeds x inputs]", "Δ [per-seed t]", "decided"]  # fmt: skip
    page = [
        "# How much fine-tuning each schedule needs",
        "",
        f"Written by `python -m skipdecode.experiments.sweeps.budget {folder.as_posix()}` from "
        f"the folder's `{found[1][0]}`; do not edit. Every row: the schedule's model and the full "
        "model, each evaluated as it was after that many fine-tuning steps (one training run "
        "per schedule, `sweep.eval_step`). Each side's value is its mean over its own seeds; "
        "the difference pairs them over the seeds both have. Decided: every interval excludes 0.",
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
