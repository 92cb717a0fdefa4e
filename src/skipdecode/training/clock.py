"""How long the training of a model took, across the attempts a resume joins.

A run killed and resumed from its ``last.ckpt`` trains the model an uninterrupted run trains
(:mod:`.resumable`), but a clock started by the resuming process counts only its own part.
:class:`TrainingClock` counts the seconds spent fitting and keeps them in every checkpoint (a
callback's state), so the run that resumes starts from the seconds its checkpoint had reached.
Work a killed attempt did after its last checkpoint is not counted (the resumed run does it
again, and that is counted). A checkpoint written before the clock existed says nothing of its
seconds: ``before_resume`` is then ``None`` (unknown), never 0.

When fitting ends, rank 0 writes the clock whole into the run's ``fit_clock.json`` (as
:class:`.peak.DevicePeak` writes its peaks): where workers are spawned, the process that called
``fit`` never sees the callback's state, only the files.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from ..io import read_json_or_none, write_json_atomic

__all__ = ["CLOCK_FILE", "TrainingClock", "read_clock"]

CLOCK_FILE = "fit_clock.json"


class TrainingClock(pl.Callback):
    """Fitting seconds, carried through checkpoints: ``before`` (what the checkpoint resumed
    from had reached; ``None`` where it does not say) plus this run's, up to the end of fit."""

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / CLOCK_FILE
        self.before: float | None = 0.0
        self._started: float | None = None
        self._ended: float | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started, self._ended = time.perf_counter(), None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._ended = time.perf_counter()
        if trainer.is_global_zero:
            write_json_atomic(self.path, {"seconds": self.seconds, "before_resume": self.before})

    @property
    def seconds(self) -> float | None:
        """Every attempt's fitting seconds so far (``None``: an earlier attempt's are unknown)."""
        if self.before is None:
            return None
        if self._started is None:
            return self.before
        return self.before + (self._ended or time.perf_counter()) - self._started

    def state_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds}

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.state_key not in (checkpoint.get("callbacks") or {}):
            self.before = None  # written before the clock: its seconds are not known

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        seconds = state_dict.get("seconds")
        self.before = None if seconds is None else float(seconds)


def read_clock(output_dir: str | Path) -> dict[str, Any]:
    """The run's ``fit_clock.json`` (``seconds``, ``before_resume``), or ``None`` for both
    where it was not written (fit did not end)."""
    found = read_json_or_none(Path(output_dir) / CLOCK_FILE) or {}
    return {"seconds": found.get("seconds"), "before_resume": found.get("before_resume")}
