"""Gather a sweep's cells into its table and plots (and W&B); works on interrupted sweeps.

``python -m skipdecode.aggregate SWEEP_DIR [--wandb]``: rebuilds ``cells.csv``/``cells.md`` (one
row per cell), ``results.csv``/``results.md`` (one row per model, dataset and schedule over its
seeds, :mod:`.seeds`), ``samples.md`` (:mod:`.samples`) and one
``quality_vs_speedup_<dataset>.png`` per dataset from the cells' files (:mod:`.table`,
:mod:`.plots`). ``--publish results/<name>`` first copies the records of one or more sweeps into
the repository (:mod:`.publish`) and aggregates the copy; ``--restore`` puts published
evaluations back into a cells directory (with ``--discard-failed-publication``, after discarding
a failed run's uncommitted publication: :mod:`.unlanded`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .identity import CELL_FILE
from .matched import write_matched
from .plots import plot_sweep
from .publish import publish, restore
from .samples import write_samples
from .seeds import summarize_seeds
from .table import COLUMNS, PLAN_FILE, RESULT_COLUMNS, collect, num, write_tables
from .unlanded import discard_failed_publication

log = logging.getLogger(__name__)

__all__ = ["aggregate", "log_wandb", "quality_series", "CHARTS", "main"]


def aggregate(sweep_dir: str | Path, plots: bool = True) -> dict[str, Any]:
    """Write the cell table, the results table (means over seeds with intervals) and one PNG
    per dataset into ``sweep_dir``; returns the rows, paths and counts of cells by status."""
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir)
    results = summarize_seeds(rows)
    paths = write_tables(rows, results, sweep_dir)
    samples = write_samples(rows, results, sweep_dir)
    matched = write_matched(rows, sweep_dir)
    pngs: list[Path] = []
    if plots:
        try:
            pngs = plot_sweep(results, sweep_dir)
        except Exception as e:  # a plot must never cost the table
            log.warning("plotting failed: %s", e)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return {
        "rows": rows,
        "results": results,
        **paths,
        "samples": samples,
        "matched": matched,
        "plots": pngs,
        "counts": counts,
    }


#: The sweep run's charts: quality metric (results column) against the measured decode speedup.
CHARTS = (("bleu_mean", "BLEU"), ("rougeL_mean", "ROUGE-L"), ("bertscore_f1_mean", "BERTScore F1"))


def quality_series(
    results: Sequence[Mapping[str, Any]], metric: str
) -> tuple[str, dict[str, list[tuple[float, float]]]]:
    """``(x column, {method: [(speedup, metric), ...] sorted by speedup})`` over the results
    rows: the measured decode speedup, or the theoretical one where no row was timed."""
    x = "measured_speedup_decode"
    if not any(num(r.get(x)) is not None for r in results):
        x = "theoretical_speedup"
    series: dict[str, list[tuple[float, float]]] = {}
    for row in results:
        sx, sy = num(row.get(x)), num(row.get(metric))
        if row.get("status") == "ok" and sx is not None and sy is not None:
            label = f"{row.get('model')} ({row.get('method')})"
            series.setdefault(label, []).append((sx, sy))
    return x, {k: sorted(v) for k, v in sorted(series.items())}


def log_wandb(result: Mapping[str, Any], wcfg: Mapping[str, Any], group: str | None) -> None:
    """The sweep as one W&B run (job_type=aggregate) in the sweep's group: the cell and results
    tables, one ``wandb.plot.line_series`` chart per quality metric against the measured speedup
    (one series per method), and the PNG plots."""
    import wandb

    run = wandb.init(
        project=wcfg.get("project") or "skipdecode",
        group=group,
        name=f"{group}-aggregate" if group else "aggregate",
        job_type="aggregate",
        mode=wcfg.get("mode") or "offline",
        dir=str(wcfg.get("dir") or Path(result["csv"]).parent),
        config={"sweep_name": group},
        reinit="finish_previous",
    )
    try:
        payload: dict[str, Any] = {
            "sweep/cells": _table(wandb, COLUMNS, result["rows"]),
            "sweep/results": _table(
                wandb,
                RESULT_COLUMNS,
                result.get("results") or [],
            ),
        }
        for metric, title in CHARTS:
            x, series = quality_series(result.get("results") or [], metric)
            if series:
                payload[f"sweep/{metric}_vs_speedup"] = wandb.plot.line_series(
                    xs=[[p[0] for p in pts] for pts in series.values()],
                    ys=[[p[1] for p in pts] for pts in series.values()],
                    keys=list(series),
                    title=f"{title} vs {x.replace('_', ' ')}",
                    xname=x,
                )
        for png in result.get("plots", []):
            payload[f"sweep/{Path(png).stem}"] = wandb.Image(str(png))
        run.log(payload)
        run.summary["sweep/counts"] = dict(result["counts"])
    finally:
        run.finish()


def _table(wandb: Any, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> Any:
    table = wandb.Table(columns=list(columns))
    for row in rows:
        table.add_data(
            *[
                None if num(row.get(c)) is None and isinstance(row.get(c), float) else row.get(c)
                for c in columns
            ]
        )
    return table


def _parser() -> argparse.ArgumentParser:
    """The command's options."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="examples: python -m skipdecode.aggregate outputs/sweep/demo; "
        "python -m skipdecode.aggregate outputs/sweep/a outputs/sweep/b --publish results/ab; "
        "python -m skipdecode.aggregate --restore results/ab --cells-dir outputs/sweep_cells",
    )
    parser.add_argument(
        "sweep_dir",
        nargs="*",
        help="multirun directories (outputs/sweep/<name>); several only "
        "with --publish, which merges them",
    )
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--wandb", action="store_true", help="log the table to W&B (offline)")
    parser.add_argument("--wandb-project", default="skipdecode")
    parser.add_argument(
        "--publish",
        metavar="DIR",
        help="copy the records into DIR (e.g. results/<name>) and aggregate them there",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="with --publish: keep what DIR already publishes and replace a job only by one "
        "that finished (or whose published twin did not); for reruns that retry failed cells",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="with --publish: accept cells evaluated from a checkout with uncommitted changes "
        "(their records keep the diff)",
    )
    parser.add_argument(
        "--allow-busy",
        action="store_true",
        help="with --publish: accept cells timed while other processes used more than a "
        "quarter of the CPUs (their records say how much)",
    )
    parser.add_argument(
        "--restore",
        metavar="DIR",
        help="put the evaluations published in DIR back into --cells-dir, so rerunning the "
        "sweeps reuses them",
    )
    parser.add_argument(
        "--discard-failed-publication",
        action="store_true",
        help="with --restore: first put DIR back as the commit holds it when it holds an "
        "uncommitted publication with failed jobs (a failed run's) and that makes the tree clean, "
        "so the rerun evaluates from a clean tree; an error when its finished jobs' records are "
        "not in --cells-dir (see skipdecode.experiments.sweeps.unlanded)",
    )
    parser.add_argument("--cells-dir", metavar="DIR", help="the sweeps' cells directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.restore:
        if not args.cells_dir or args.sweep_dir:
            parser.error("--restore takes --cells-dir and no sweep directory")
        if args.discard_failed_publication:
            discarded, why_not = discard_failed_publication(args.restore, args.cells_dir)
            if discarded:
                print(
                    f"discarded the uncommitted publication in {args.restore} (job(s) "
                    f"{', '.join(discarded)}; a failed run's, its finished evaluations kept in "
                    f"{args.cells_dir})"
                )
            elif why_not:
                print(f"kept: {why_not}")
        written = restore(args.restore, args.cells_dir)
        print(f"restored {len(written)} evaluation(s) from {args.restore} into {args.cells_dir}")
        return 0
    if args.discard_failed_publication:
        parser.error("--discard-failed-publication only with --restore")
    if not args.sweep_dir:
        parser.error("give a sweep directory")
    if len(args.sweep_dir) > 1 and not args.publish:
        parser.error(f"{len(args.sweep_dir)} sweep directories given: several only with --publish")
    sweep_dir = args.sweep_dir[0]
    for given in args.sweep_dir:  # never tables written into a mistyped folder
        folder = Path(given)
        if not folder.is_dir() or not (
            any(folder.glob(f"*/{CELL_FILE}")) or (folder / PLAN_FILE).is_file()
        ):
            parser.error(
                f"sweep_dir {given!r} holds no <job>/{CELL_FILE} and no {PLAN_FILE}; give a "
                "sweep's folder, e.g. outputs/sweep/<sweep.name>, or a results/<folder>"
            )
    if args.publish:
        sweep_dir = str(
            publish(
                args.sweep_dir,
                args.publish,
                aggregate,
                update=args.update,
                allow_dirty=args.allow_dirty,
                allow_busy=args.allow_busy,
            )
        )
    elif args.update or args.allow_dirty or args.allow_busy:
        parser.error("--update, --allow-dirty and --allow-busy only with --publish")
    result = aggregate(sweep_dir, plots=not args.no_plots)
    print(Path(result["markdown"]).read_text())
    print(Path(result["cells_markdown"]).read_text())
    print(f"tables: {result['csv']}  {result['markdown']}  {result['cells_csv']}")
    for png in result["plots"]:
        print(f"plot: {png}")
    print("cells: " + ", ".join(f"{k}={v}" for k, v in sorted(result["counts"].items())))
    if args.wandb:
        log_wandb(result, {"project": args.wandb_project}, Path(sweep_dir).name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
