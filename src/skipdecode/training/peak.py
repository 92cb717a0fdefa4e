"""The device memory a training run used, beside its plan (:mod:`.memory`).

:class:`DevicePeak` resets each GPU's peak counters when fitting starts and, when training
ends, gathers every device's peak (what the allocator allocated, and what it reserved: the
number ``gpu_peak_bytes`` records for the GPU sweep's cells) to rank 0, which writes them whole
into the run's ``device_peak.json``. The run then records them in ``metrics.json`` beside its plan,
with the plan's total over the measured peak. Off a GPU it writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from ..io import read_record, write_json_atomic
from .memory import GIB

__all__ = ["PEAK_FILE", "DevicePeak", "cuda_peaks", "peak_record", "read_peak"]

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
    return read_record(path) if path.is_file() else None


def cuda_peaks(device: torch.device) -> tuple[int, int] | None:
    """The peak bytes CUDA's allocator allocated and reserved on ``device`` (None off a GPU)."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)


class DevicePeak(pl.Callback):
    """Measure each device's peak memory over training and write it, gathered, from rank 0.

    It measures when training ends (``on_train_end``), before the strategy's teardown, which
    moves a single device's model back to the CPU. ``measure`` reads one device's (allocated,
    reserved) peak, None where there is nothing to read (the default reads CUDA's counters)."""

    def __init__(
        self,
        output_dir: Path,
        plan_bytes: int | None,
        measure: Callable[[torch.device], tuple[int, int] | None] = cuda_peaks,
    ):
        self.path = Path(output_dir) / PEAK_FILE
        self.plan_bytes = plan_bytes
        self.measure = measure

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        device = trainer.strategy.root_device
        peaks = self.measure(device)
        if peaks is None:
            return
        mine = torch.tensor(peaks, dtype=torch.int64, device=device)
        every = trainer.strategy.all_gather(mine).reshape(-1, 2).tolist()
        if not trainer.is_global_zero:
            return
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
        record = peak_record([a for a, _ in every], [r for _, r in every], self.plan_bytes, name)
        write_json_atomic(self.path, record)
        log.info(
            "measured peak: %.2f GiB reserved on the busiest of %d device(s); the plan said %s",
            record["peak_reserved_gib"],
            record["devices"],
            f"{self.plan_bytes / GIB:.2f} GiB" if self.plan_bytes else "nothing",
        )
