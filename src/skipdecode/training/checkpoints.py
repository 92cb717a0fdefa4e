"""Checkpoints written whole or not at all, and a clear error for one that cannot be read.

Lightning writes a checkpoint through an fsspec transaction whose temporary file may lie on
another filesystem (then the final move is a copy, and a kill during it leaves a truncated
file). :class:`AtomicCheckpointIO` writes beside the target and renames it over the target, so
``last.ckpt`` is always the previous checkpoint or the new one. :func:`resume_step` reads the
step of the checkpoint a run resumes from, and names the file and the ways forward when it
cannot be read (a checkpoint cut short before this writer, or damaged since).
:class:`StepCheckpoint` keeps the weights of chosen steps beside the rolling ``last.ckpt``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint

__all__ = ["AtomicCheckpointIO", "CheckpointError", "StepCheckpoint", "resume_step"]


class CheckpointError(RuntimeError):
    """A checkpoint to resume from that cannot be read."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temporary file in the target's directory, flushed to disk, then
    renamed over the target (atomic on one filesystem)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def resume_step(path: str | Path) -> int:
    """The global step stored in checkpoint ``path``; a :class:`CheckpointError` that names the
    file, the reason and the alternatives when it cannot be read."""
    path = Path(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return int(checkpoint["global_step"])
    except Exception as e:  # noqa: BLE001 - any failure to read means the same to the user
        others = sorted(
            (p for p in path.parent.glob("*.ckpt") if p != path),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        alternatives = (
            "resume from an earlier checkpoint (ckpt_path=<file>): " + ", ".join(map(str, others))
            if others
            else "no other checkpoint is in that directory"
        )
        raise CheckpointError(
            f"ckpt_path: {path} cannot be read ({type(e).__name__}: {str(e).splitlines()[0]}); "
            f"it may have been cut short by a kill during its write. Either {alternatives}; or "
            f"start again with ckpt_path=null after moving {path.name} away"
        ) from e


class StepCheckpoint(ModelCheckpoint):
    """A :class:`ModelCheckpoint` that keeps the weights of every N-th step (``sweep.keep_steps``).

    Lightning keys a checkpoint callback's state by its monitor, mode and intervals only, and
    refuses two callbacks with one key: saving every 40 steps beside a ``last.ckpt`` also saved
    every 40 would be refused before training. This key also names the directory it keeps."""

    @property
    def state_key(self) -> str:
        return self._generate_state_key(
            dirpath=str(self.dirpath),
            every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs,
        )
