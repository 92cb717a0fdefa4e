"""How long the training of a model took, across the attempts a resume joins.

A run killed and resumed from its ``last.ckpt`` trains the model an uninterrupted run trains
(:mod:`.resumable`), but a clock started by the resuming process counts only its own part.
:class:`TrainingClock` counts the seconds spent fitting and keeps them in every checkpoint (a
callback's state), so the run that resumes starts from the seconds its checkpoint had reached:
:attr:`TrainingClock.seconds` is the fitting time of every step that made the model. Work a killed
attempt did after its last checkpoint is not counted (the resumed run does it again, and that is
counted). Where a run is not resumed, it is this run's fitting time.
"""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl

__all__ = ["TrainingClock", "clock_of"]


class TrainingClock(pl.Callback):
    """Fitting seconds, carried through checkpoints: ``before`` (what the checkpoint resumed
    from had reached) plus this run's."""

    def __init__(self) -> None:
        self.before = 0.0
        self._started: float | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = time.perf_counter()

    @property
    def seconds(self) -> float:
        since = 0.0 if self._started is None else time.perf_counter() - self._started
        return self.before + since

    def state_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.before = float(state_dict["seconds"])


def clock_of(trainer: pl.Trainer) -> TrainingClock | None:
    """The trainer's :class:`TrainingClock` (None where it has none)."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, TrainingClock)), None)
