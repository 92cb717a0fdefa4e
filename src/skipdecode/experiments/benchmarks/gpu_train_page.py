"""The GPU training page, ``results/training/gpu-runs.md``, written by ``make docs`` from the
committed training runs under ``results/training/<run>/`` (each run's own ``metrics.json``, which
holds its memory plan and, where a GPU measured it, its peak); never typed.

One row per run: its strategy and devices, the card the plan was checked against, the plan per
device and the peak the allocator reserved and allocated on the busiest device, the plan over the
reserved peak, and where training ended (steps, training and validation loss, tokens a second).
A run's ``env.log`` (the card, the versions and the manifest check of the copy it ran from) is
linked beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...io import read_record, write_text_atomic
from ...training.memory import GIB

__all__ = ["TRAIN_PAGE", "train_page", "write_train_page"]

TRAIN_PAGE = "training/gpu-runs.md"
HEADER = (
    "| run | strategy | devices | checked against | batch x tokens | plan GiB | reserved GiB "
    "| allocated GiB | plan / reserved | steps | train loss | val loss | tokens/s |"
)


def _gib(value: int | None) -> str:
    return f"{value / GIB:.2f}" if value else "not measured"


def _row(run: Path, record: dict[str, Any]) -> str:
    plan = record.get("memory_plan") or {}
    peak = record.get("device_peak") or {}
    metrics = record.get("metrics") or {}
    ratio = peak.get("plan_over_peak")
    env = f" ([env](./{run.name}/env.log))" if (run / "env.log").is_file() else ""
    cells = [
        f"`{run.name}`{env}",
        plan.get("strategy", ""),
        str(plan.get("devices", "")),
        str(plan.get("checked", "")),
        f"{plan.get('batch', '')} x {plan.get('seq_len', '')}",
        _gib(plan.get("total")),
        _gib(peak.get("peak_reserved_bytes")),
        _gib(max(peak["allocated_bytes"]) if peak.get("allocated_bytes") else None),
        f"{ratio:.2f}" if ratio else "",
        str(metrics.get("global_step", "")),
        f"{metrics['train/loss']:.4f}" if "train/loss" in metrics else "",
        f"{metrics['val/loss']:.4f}" if "val/loss" in metrics else "",
        f"{metrics['train/tokens_per_s_mean']:.0f}" if "train/tokens_per_s_mean" in metrics else "",
    ]
    return "| " + " | ".join(cells) + " |"


def train_page(folder: Path) -> str:
    """The page: one row per run folder under ``folder`` that holds a ``metrics.json``."""
    runs = sorted(p for p in folder.iterdir() if (p / "metrics.json").is_file())
    intro = (
        "# Training runs on a GPU: the memory plan beside the measured peak\n\n"
        "Written by `make docs` from each run's `metrics.json` (its memory plan, printed and "
        "checked before any weight loaded, and the peak `DevicePeak` measured when training "
        "ended). The commands are in docs/TRAINING.md.\n"
    )
    if not runs:
        return intro + "\nNo GPU training run recorded yet.\n"
    rows = [_row(run, read_record(run / "metrics.json")) for run in runs]
    return intro + "\n" + "\n".join([HEADER, "|" + "---|" * 13, *rows]) + "\n"


def write_train_page(results: Path) -> str | None:
    """Write the page where ``results/training/`` exists; what was done."""
    folder = results / "training"
    if not folder.is_dir():
        return None
    write_text_atomic(results / TRAIN_PAGE, train_page(folder))
    return TRAIN_PAGE
