"""What a sweep cell is called: its labels (model, dataset, schedule, method, seed) for folders,
tables and plots, and the schedule it is evaluated under.

A cell is evaluated under the schedule it was trained with, or under ``sweep.eval_schedule`` (a
schedule group option, ``+schedule@sweep.eval_schedule=target_2x``): one trained model at many
speeds, each evaluation in its own folder (:func:`eval_id`) and table row, labelled with the
evaluated schedule and, as its method, ``<method> (<trained schedule>-trained)``. The cell's
folder is named after the trained schedule, so every evaluation shares one trained model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...schedules import method_label
from .identity import eval_identity
from .steps import eval_step

__all__ = ["EVAL_SCHEDULE", "cell_labels", "eval_id", "eval_schedule"]


def _choices() -> dict[str, str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices)
    except Exception:  # not inside a Hydra run
        return {}


def cell_labels(c: Mapping[str, Any]) -> dict[str, Any]:
    sched = c.get("schedule") or {}
    choices = _choices()
    target = sched.get("target_speedup")
    if target is None and isinstance(sched.get("draft"), Mapping):  # speculative: its draft's
        target = sched["draft"].get("target_speedup")
    if target is None and sched.get("name") == "full":
        target = 1
    trained = choices.get("schedule") or sched.get("name")
    labels = {
        "model": (c.get("model") or {}).get("name") or choices.get("model"),
        "dataset": (c.get("dataset") or {}).get("name") or choices.get("dataset"),
        "schedule": trained,
        "trained_schedule": trained,
        "target_speedup": float(target) if target is not None else None,
        "method": _method_label((c.get("sweep") or {}).get("method", "auto"), sched),
        "seed": c.get("seed"),
    }
    if eval_step(c) is not None:
        labels["train_steps"] = eval_step(c)
    evaluated = eval_schedule(c)
    if evaluated is None:
        return labels
    target = evaluated.get("target_speedup", 1 if evaluated.get("name") == "full" else None)
    return {
        **labels,
        "schedule": choices.get(f"schedule@{EVAL_SCHEDULE}") or evaluated.get("name"),
        "target_speedup": float(target) if target is not None else None,
        "method": f"{_method_label('auto', evaluated)} ({trained}-trained)",
    }


#: The sweep setting that evaluates the trained model under another schedule (a schedule group
#: option: ``+schedule@sweep.eval_schedule=target_2x``); null: the schedule it was trained with.
EVAL_SCHEDULE = "sweep.eval_schedule"


def eval_schedule(c: Mapping[str, Any]) -> dict[str, Any] | None:
    evaluated = (c.get("sweep") or {}).get("eval_schedule")
    return dict(evaluated) if evaluated else None


def eval_id(c: Mapping[str, Any]) -> str:
    """The hash naming the cell's evaluation folder: the eval settings, the schedule evaluated
    where it is not the trained one, and the training step evaluated where it is not the end
    (``sweep.eval_step``); published evaluations keep their ids."""
    evaluated, step = eval_schedule(c), eval_step(c)
    ev = dict(c["eval"])
    if evaluated is not None:
        ev["schedule"] = evaluated
    if step is not None:
        ev["train_steps"] = step
    return eval_identity(ev, evaluated if evaluated is not None else c.get("schedule"))


def _method_label(configured: str | None, sched: Mapping[str, Any]) -> str:
    """The plot's line label: ``sweep.method``, or with ``auto`` the schedule's method (a
    speculative schedule trained by another recipe than ``joint`` says which)."""
    if configured and configured != "auto":
        return str(configured)
    schedule_name = sched.get("name")
    recipe = sched.get("recipe")
    if schedule_name == "speculative" and recipe not in (None, "joint"):
        return f"{method_label(schedule_name)} ({recipe}-trained)"
    return method_label(schedule_name)
