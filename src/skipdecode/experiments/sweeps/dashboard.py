"""A W&B report for one sweep: quality against speedup, per method, from the cells' runs.

``python -m skipdecode.dashboard <entity/project> <sweep>`` builds a report (``wandb-workspaces``)
over the runs a sweep logged (``wandb.enabled=true``; synced with ``wandb sync`` when they were
offline) and saves it, printing its URL; ``--dry-run`` builds it without the network and prints
its blocks. The report holds:

1. quality against speed: one scatter panel each for BLEU, ROUGE-L and BERTScore F1 against the
   measured decode speedup, runs grouped by method, so every method is one colour;
2. the trade-off in one view: a parallel-coordinates panel over method, target speedup,
   theoretical, batch and measured speedups, and the three quality metrics;
3. the runs side by side (a run comparer showing where configs differ);
4. the sweep's aggregate run: its results table (seed means with intervals) and the charts
   it logged (``sweep/<metric>_vs_speedup``, one line per method).

The names it reads are the ones every cell's run carries: its W&B group (the sweep name, also
config ``sweep_name``), config ``method``, ``schedule``, ``target_speedup``, ``seed``, ``model``,
``dataset``, and summary ``eval/<name>`` (:func:`skipdecode.evaluation.record.summarize`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .aggregate import CHARTS

__all__ = ["build_report", "main", "QUALITY_METRICS", "SPEED_METRICS"]

QUALITY_METRICS = (
    ("eval/bleu", "BLEU"),
    ("eval/rougeL", "ROUGE-L"),
    ("eval/bertscore_f1", "BERTScore F1"),
)
SPEED_METRICS = (
    "eval/theoretical_speedup",
    "eval/batch_speedup",
    "eval/measured_speedup_decode",
)


def build_report(entity: str, project: str, sweep: str) -> Any:
    """The report object (nothing is sent until ``.save()``)."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    cells = wr.Runset(
        entity=entity,
        project=project,
        name=f"{sweep}: cells",
        filters=[expr.Metric("Group") == sweep],
        groupby=["config.method"],
    )
    aggregate = wr.Runset(
        entity=entity,
        project=project,
        name=f"{sweep}: table",
        filters=[expr.Metric("Group") == sweep, expr.Metric("JobType") == "aggregate"],
    )
    scatter = [
        wr.ScatterPlot(
            title=f"{title} vs measured decode speedup",
            x=wr.SummaryMetric("eval/measured_speedup_decode"),
            y=wr.SummaryMetric(metric),
        )
        for metric, title in QUALITY_METRICS
    ]
    columns = [
        wr.ParallelCoordinatesPlotColumn(metric=wr.Config(n)) for n in ("method", "target_speedup")
    ]
    columns += [
        wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(m))
        for m in (*SPEED_METRICS, *(q for q, _ in QUALITY_METRICS))
    ]
    return wr.Report(
        entity=entity,
        project=project,
        title=f"skipdecode: {sweep}"[:128],
        description="Quality against speedup for every method of the sweep (skipdecode.dashboard).",
        width="fluid",
        blocks=[
            wr.H1(text="Quality against speedup"),
            wr.P(
                text="One point per cell (model, schedule, seed), coloured by method; "
                "speedups are measured against the full model on the same batches."
            ),
            wr.PanelGrid(runsets=[cells], panels=scatter),
            wr.H1(text="The trade-off in one view"),
            wr.PanelGrid(
                runsets=[cells],
                panels=[
                    wr.ParallelCoordinatesPlot(title="method, speed, quality", columns=columns)
                ],
            ),
            wr.H1(text="The runs side by side"),
            wr.PanelGrid(runsets=[cells], panels=[wr.RunComparer(diff_only="split")]),
            wr.H1(text="The sweep's table"),
            wr.P(text="Means over seeds with 95% intervals and paired differences against full."),
            wr.PanelGrid(
                runsets=[aggregate],
                panels=[
                    wr.WeavePanelSummaryTable(table_name="sweep/results"),
                    *[
                        wr.WeavePanelSummaryTable(table_name=f"sweep/{metric}_vs_speedup_table")
                        for metric, _ in CHARTS
                    ],
                ],
            ),
        ],
    )


def describe(report: Any) -> list[str]:
    """One line per block and panel (what ``--dry-run`` prints)."""
    lines = [f"report {report.title!r} in {report.entity}/{report.project}"]
    for block in report.blocks:
        text = getattr(block, "text", None)
        lines.append(f"  {type(block).__name__}" + (f": {text}" if text else ""))
        for panel in getattr(block, "panels", []) or []:
            title = getattr(panel, "title", None) or getattr(panel, "table_name", None) or ""
            lines.append(f"    {type(panel).__name__} {title}".rstrip())
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="skipdecode-dashboard",
        description="Create a W&B report (quality vs speedup per method) for one sweep's runs.",
    )
    parser.add_argument("project", help="<entity>/<project> the sweep's runs were synced to")
    parser.add_argument("sweep", help="the sweep name (sweep.name; the runs' W&B group)")
    parser.add_argument("--dry-run", action="store_true", help="build the report, do not save it")
    args = parser.parse_args(argv)
    entity, sep, project = args.project.partition("/")
    if not sep or not entity or not project:
        parser.error(f"project={args.project!r}: expected <entity>/<project>")
    report = build_report(entity, project, args.sweep)
    print("\n".join(describe(report)))
    if not args.dry_run:
        report.save()
        print(f"saved: {report.url}")
    return 0
