"""How much fine-tuning a schedule needs: a cell evaluated as its model was after ``s`` optimizer
steps, not only at the end.

``sweep.keep_steps`` lists the steps whose weights training keeps (``train/step_checkpoints/
step-<s>.ckpt``, weights only, saved every ``gcd(keep_steps)`` steps); ``sweep.eval_step`` picks
the one a cell evaluates (null: the exported model, as every published cell). One training run
serves every budget: the multirun ``sweep.eval_step=90,180,270`` trains the cell once (the other
jobs wait for it, then reuse it), exports each step's checkpoint once
(``train/export-step<s>``) and evaluates each into its own folder and table row (the label
``train_steps``; the results table pairs each row with ``full`` at the same steps).

Neither setting is part of the cell's identity (what is trained does not change), and a cell
that was trained without the step asked for is refused with the fix, before anything runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "STEP_DIR",
    "check_eval_step",
    "eval_step",
    "step_checkpoint_callback",
    "step_export",
    "with_steps",
]

#: Where a cell's training keeps the checkpoints of ``sweep.keep_steps``.
STEP_DIR = "step_checkpoints"


def eval_step(c: Mapping[str, Any]) -> int | None:
    """The step whose checkpoint the cell evaluates (None: the exported model)."""
    step = (c.get("sweep") or {}).get("eval_step")
    return None if step is None else int(step)


def _keep_steps(c: Mapping[str, Any]) -> list[int]:
    return sorted({int(s) for s in (c.get("sweep") or {}).get("keep_steps") or []})


def check_eval_step(c: Mapping[str, Any]) -> None:
    """Refuse, before any work, a ``sweep.keep_steps`` or ``sweep.eval_step`` that cannot work."""
    keep, step = _keep_steps(c), eval_step(c)
    max_steps = (c.get("trainer") or {}).get("max_steps")
    bad = [s for s in keep if s < 1 or (max_steps and max_steps > 0 and s > max_steps)]
    if bad:
        raise ValueError(
            f"sweep.keep_steps={keep}: {bad} not between 1 and trainer.max_steps={max_steps}"
        )
    if step is not None and step not in keep:
        raise ValueError(
            f"sweep.eval_step={step} is not one of sweep.keep_steps={keep}: training keeps only "
            f"those steps' weights; add it (sweep.keep_steps=[...,{step}])"
        )


def step_checkpoint_callback(c: Mapping[str, Any], train_dir: Path) -> dict[str, Any] | None:
    """The Lightning checkpoint callback that keeps ``sweep.keep_steps``' weights (None: none)."""
    keep = _keep_steps(c)
    if not keep:
        return None
    return {
        "_target_": "skipdecode.training.checkpoints.StepCheckpoint",
        "dirpath": str(train_dir / STEP_DIR),
        "filename": "step-{step}",
        "auto_insert_metric_name": False,
        "every_n_train_steps": math.gcd(*keep),
        "save_top_k": -1,
        "save_weights_only": True,
        "save_last": False,
    }


def _step_files(train_dir: Path, step: int) -> tuple[Path, Path]:
    """The export directory and the kept checkpoint of the model after ``step`` steps."""
    return train_dir / f"export-step{step}", train_dir / STEP_DIR / f"step-{step}.ckpt"


def step_export(train_dir: Path, step: int) -> Path:
    """The export of the model after ``step`` steps (written from its checkpoint on first use)."""
    from ...training.export import export_checkpoint

    out, ckpt = _step_files(train_dir, step)
    if (out / "config.json").is_file():
        return out
    if not ckpt.is_file():
        raise FileNotFoundError(
            f"{ckpt} does not exist: the cell was trained without sweep.keep_steps holding "
            f"{step}; retrain it with sweep.keep_steps=[...,{step}] sweep.reuse=false"
        )
    return Path(export_checkpoint(ckpt, out))


def reused_step_export(train_dir: Path, step: int) -> Path | None:
    """The export after ``step`` steps for a cell whose evaluation is reused: None where its
    weights were not kept (a cell restored from published results has its record, not its
    checkpoints, and needs none)."""
    out, ckpt = _step_files(train_dir, step)
    kept = (out / "config.json").is_file() or ckpt.is_file()
    return step_export(train_dir, step) if kept else None


def with_steps(columns: Sequence[Any], rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """``columns`` with ``train_steps`` after the schedule where any row was evaluated at a
    training step (``sweep.eval_step``); other tables keep their columns."""
    columns = list(columns)
    if not any(r.get("train_steps") not in (None, "") for r in rows):
        return columns
    keys = [c[0] if isinstance(c, tuple) else c for c in columns]
    step = ("train_steps", "steps") if isinstance(columns[0], tuple) else "train_steps"
    columns.insert(keys.index("schedule") + 1, step)
    return columns
