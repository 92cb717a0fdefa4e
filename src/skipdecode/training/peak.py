"""The device memory a training run used, beside its plan (:mod:`.memory`).

:class:`DevicePeak` resets each GPU's peak counters when fitting starts and, when it ends, gathers
every device's peak (what the allocator allocated, and what it reserved: the number
``gpu_peak_bytes`` records for the GPU sweep's cells) to rank 0, which writes them whole into
the run's ``device_peak.json``. The run then records them in ``metrics.json`` beside its plan,
with the plan's total over the measured peak. Off a GPU it writes nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from ..io import write_json_atomic
from .memory import GIB

__all__ = ["PEAK_FILE", "DevicePeak", "peak_record", "read_peak"]

log = logging.getLogger(__name__)
PEAK_FILE = "device_peak.json"


def peak_record(
    allocated: list[int], reserved: list[int], plan_bytes: int | None, device: str
) -> dict[str, Any]:
    """Every device's peak bytes (allocated and reserved, in rank order), their maximum, and
    the plan's total per device over the largest reserved peak (above 1: the plan is larger)."""
    if len(allocated) != len(reserved) or not allocated:
        raise ValueError(
            f"peaks: {len(allocated)} allocated and {len(reserved)} reserved; one of each per device"
        )
    top = max(reserved)
    return {
        "device": device,
        "devices": len(reserved),
        "allocated_bytes": allocated,
        "reserved_bytes": reserved,
        "peak_reserved_bytes": top,
        "peak_reserved_gib": top / GIB,
        "plan_bytes": plan_bytes,
        "plan_over_peak": plan_bytes / top if plan_bytes and top else None,
    }


def read_peak(output_dir: Path) -> dict[str, Any] | None:
    """The run's measured peaks (``device_peak.json``), or None where none was written."""
    path = Path(output_dir) / PEAK_FILE
    return json.loads(path.read_text()) if path.is_file() else None


class DevicePeak(pl.Callback):
    """Measure each GPU's peak memory over ``fit`` and write it, gathered, from rank 0."""

    def __init__(self, output_dir: Path, plan_bytes: int | None):
        self.path = Path(output_dir) / PEAK_FILE
        self.plan_bytes = plan_bytes

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        device = pl_module.device
        if device.type != "cuda":
            return
        mine = torch.tensor(
            [torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)],
            dtype=torch.int64,
            device=device,
        )
        every = trainer.strategy.all_gather(mine).reshape(-1, 2).tolist()
        if not trainer.is_global_zero:
            return
        record = peak_record(
            [a for a, _ in every], [r for _, r in every], self.plan_bytes,
            torch.cuda.get_device_name(device),
        )  # fmt: skip
        write_json_atomic(self.path, record)
        log.info(
            "measured peak: %.2f GiB reserved on the busiest of %d device(s); the plan said %s",
            record["peak_reserved_gib"],
            record["devices"],
            f"{self.plan_bytes / GIB:.2f} GiB" if self.plan_bytes else "nothing",
        )
