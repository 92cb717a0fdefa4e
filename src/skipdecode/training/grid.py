"""The paper grid planned offline, before renting it: per ``paper_opt*`` cell its strategy,
devices, memory per device (:mod:`.memory`) and the GPU hours its fine-tuning needs, without
weights or data.

GPU hours bound a cell's training from both sides, each from a measurement:

- **at the card's peak** (a lower bound): the cell's training FLOPs, ``6 N T`` for ``N``
  parameters and ``T`` trained tokens, over the bf16 matrix rate ``make bench-gpu`` measured
  (``results/bench/decode-gpu-*.json``, ``limits.peak_tflops``) per device;
- **at the measured training rate** (an upper bound): the same FLOPs over the rate the SmolLM2
  GPU cells reached (``results/e2e_smollm2_gpu``: each full cell's mean training tokens per
  second times ``6 N``) per device. GPU hours count every device (a cell on 8 GPUs for one
  hour is 8 GPU hours). A 135M model trains far below a card's peak (its steps are
  launch-bound, and those cells shared their card), so the paper's models land in between.

``T`` is the cell's steps times its global batch (per-device batch x devices x accumulation)
times its longest sequence (source + target tokens): the real mean length is shorter, so ``T``
is itself an upper bound. Evaluation (generation) is not counted.

    python -m skipdecode.training.grid [--schedules 5] [--gib 80]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean
from typing import Any

from .memory import PLAN_HEADER, experiment_plan, paper_grid, plan_cells, shape_sizes

__all__ = ["measured_rates", "grid_rows", "main"]

RESULTS = Path(__file__).resolve().parents[3] / "results"


def measured_rates(results: Path = RESULTS) -> dict[str, Any]:
    """The measured bf16 peak (TFLOP/s, its card) and the SmolLM2 GPU cells' training rate
    (FLOP/s per cell), with where each came from."""
    peak = None
    for path in sorted((results / "bench").glob("decode-gpu-*.json")):
        record = json.loads(path.read_text())
        for cell in record.get("cells", []):
            limits = cell.get("limits") or {}
            if limits.get("peak_tflops"):
                card = ((record.get("provenance") or {}).get("device") or {}).get("device")
                peak = {"tflops": limits["peak_tflops"], "card": card, "record": path.name}
                break
    params = shape_sizes("smollm2-135m").params
    rates = []
    for path in sorted((results / "e2e_smollm2_gpu").glob("*/record.json")):
        record = json.loads(path.read_text())
        metrics = (record.get("train_meta") or {}).get("metrics") or {}
        schedule = record.get("schedule") or {}
        name = schedule.get("name") if isinstance(schedule, dict) else schedule
        if name == "full" and metrics.get("train/tokens_per_s_mean"):
            rates.append(metrics["train/tokens_per_s_mean"])
    training = None
    if rates:
        training = {
            "flops": 6 * params * mean(rates),
            "tokens_per_s": mean(rates),
            "cells": len(rates),
            "record": "e2e_smollm2_gpu",
        }
    return {"peak": peak, "training": training}


def grid_rows(experiments: list[str], rates: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per experiment: its plan and GPU hours per cell (None where unmeasured)."""
    rows = []
    for name in experiments:
        cfg, plan = experiment_plan(name, [])
        trainer = cfg["trainer"]
        accumulate = int(trainer.get("accumulate_grad_batches") or 1)
        steps = int(trainer.get("max_steps") or 0)
        tokens = steps * plan.batch * plan.devices * accumulate * plan.seq_len
        flops = 6 * plan.params * tokens
        peak, training = rates["peak"], rates["training"]
        rows.append(
            {
                "experiment": name,
                "plan": plan,
                "steps": steps,
                "tokens": tokens,
                "hours_at_peak": None if peak is None else flops / (peak["tflops"] * 1e12) / 3600,
                "hours_at_measured": None if training is None else flops / training["flops"] / 3600,
            }
        )
    return rows


def _hours(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m skipdecode.training.grid",
        description="The paper grid offline: strategy, devices, memory per device and GPU hours "
        "per cell, without weights or data.",
    )
    p.add_argument("--schedules", type=int, default=5, help="cells per experiment (make "
                   "reproduce: full and 2x-5x)")  # fmt: skip
    p.add_argument("--gib", type=float, default=80.0, help="memory of one device (default 80)")
    args = p.parse_args(argv)
    rates = measured_rates()
    rows = grid_rows(paper_grid(), rates)
    print(
        f"| experiment | {PLAN_HEADER} | fits {args.gib:g} GiB | steps | "
        "GPU hours a cell: at peak - at the measured rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    total = [0.0, 0.0]
    for r in rows:
        plan = r["plan"]
        hours = (r["hours_at_peak"] or 0.0, r["hours_at_measured"] or 0.0)
        total = [total[0] + hours[0] * args.schedules, total[1] + hours[1] * args.schedules]
        print(
            f"| {r['experiment']} | {plan_cells(plan, args.gib)} | {r['steps']} | "
            f"{_hours(hours[0])} - {_hours(hours[1])} |"
        )
    peak, training = rates["peak"], rates["training"]
    print(
        f"\nThe grid, {args.schedules} cells an experiment: {total[0]:,.0f} - {total[1]:,.0f} "
        "GPU hours of fine-tuning (evaluation not counted)."
    )
    if peak:
        print(f"Peak: {peak['tflops']:.0f} TFLOP/s bf16 measured on {peak['card']} "
              f"({peak['record']}).")  # fmt: skip
    if training:
        print(f"Measured rate: {training['tokens_per_s']:,.0f} tokens/s a cell "
              f"({training['flops'] / 1e12:.1f} TFLOP/s), the mean of {training['cells']} "
              f"full-schedule SmolLM2 cells ({training['record']}).")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
