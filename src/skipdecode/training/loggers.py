"""Loggers that survive a resumed run: the CSV history before the kill is kept, not deleted.

Lightning's ``CSVLogger`` deletes an existing ``metrics.csv`` when its writer starts, so a run
resumed with ``ckpt_path=last`` in the same directory lost its history before the kill (the
validation curve, ``val_start/*``). :class:`ResumableCSVLogger` keeps every row logged before the
checkpoint's step and drops the rows after it (those steps run again and are logged again).
W&B resumes the same run through a run id derived from the output directory
(``conf/logger/wandb.yaml``: ``id: ${sd_run_id:${paths.output_dir}}``, ``resume: allow``).
"""

from __future__ import annotations

import csv
import os
from typing import Any

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment

__all__ = ["ResumableCSVLogger"]


class _ResumingWriter(ExperimentWriter):
    def __init__(self, log_dir: str, keep_before_step: int | None):
        self._keep_before_step = keep_before_step
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        if self._keep_before_step is None or not os.path.isfile(self.metrics_file_path):
            super()._check_log_dir_exists()  # a fresh run: Lightning's behaviour
            return
        with open(self.metrics_file_path, newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if _step(r) < self._keep_before_step]
        tmp = self.metrics_file_path + ".tmp"
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.metrics_file_path)
        self.metrics_keys = sorted(header)


def _step(row: dict[str, Any]) -> float:
    try:
        return float(row.get("step") or 0)
    except ValueError:
        return 0.0


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` that, after :meth:`keep_history`, appends to an interrupted run's
    ``metrics.csv`` instead of deleting it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._keep_before_step: int | None = None

    def keep_history(self, before_step: int) -> None:
        """Resume at ``before_step``: keep the rows logged before it. Call before logging."""
        if self._experiment is not None:
            raise RuntimeError("keep_history must be called before the logger writes anything")
        self._keep_before_step = int(before_step)

    @property
    @rank_zero_experiment  # rank 0 writes; the other devices get a stand-in (as CSVLogger)
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ResumingWriter(self.log_dir, self._keep_before_step)
        return self._experiment
