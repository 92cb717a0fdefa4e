"""Schedules by name: ``build_schedule(cfg, num_layers, expected_length)`` builds any of them.

A schedule module registers a builder for each name it owns::

    @register("early_exit", method="early exit")
    def _build(cfg: Mapping, num_layers: int, expected_length: int | None) -> Schedule: ...

``cfg`` is the ``schedule`` config (a mapping with ``name``); ``expected_length`` is the
expected generation length in tokens (the dataset's median target length) for schedules that
are built from a target speedup. ``method`` is the label tables and plots use for the name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .base import Schedule, ScheduleError

__all__ = ["register", "build_schedule", "schedule_names", "method_label", "LENGTH_RULES"]

Builder = Callable[[Mapping, int, "int | None"], Schedule]


@dataclass(frozen=True)
class _Entry:
    build: Builder
    method: str


_REGISTRY: dict[str, _Entry] = {}


def register(name: str, method: str) -> Callable[[Builder], Builder]:
    """Register ``builder`` as ``schedule.name=<name>``, labelled ``method`` in tables."""

    def wrap(builder: Builder) -> Builder:
        if name in _REGISTRY and _REGISTRY[name].build is not builder:
            raise ValueError(f"schedule name {name!r} is registered twice")
        _REGISTRY[name] = _Entry(builder, method)
        return builder

    return wrap


def schedule_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def method_label(name: str | None) -> str:
    """The method a schedule name belongs to (the name itself when it is not registered)."""
    entry = _REGISTRY.get(str(name))
    return entry.method if entry else str(name)


#: How a ``target`` schedule is fitted to generation lengths (``schedule.lengths``): ``median``
#: fits the mean budget over one sequence of the expected length (the dataset's median target
#: length; the published tables' rule); ``validation`` fits it over every target length of the
#: validation split (the decay still spans the expected length).
LENGTH_RULES: tuple[str, ...] = ("median", "validation")


def build_schedule(
    cfg: Mapping,
    num_layers: int,
    expected_length: int | None = None,
    lengths: Sequence[int] | None = None,
) -> Schedule:
    """Any registered schedule from its config; see docs/SCHEDULES.md.

    Schedules built from a target speedup take ``target_speedup`` (and the expected generation
    length where the plan depends on the position); explicit parameters override it. A
    ``num_layers`` key, when present, must match the model's layer count. ``lengths`` are the
    validation split's target lengths, used by ``schedule.lengths: validation``.
    """
    cfg = dict(cfg)
    name = cfg.get("name")
    rule = cfg.get("lengths") or "median"  # null: the default
    if rule not in LENGTH_RULES:
        raise ScheduleError(
            f"schedule.lengths={rule!r}; allowed: {', '.join(LENGTH_RULES)} (null: median)"
        )
    if rule == "validation":
        if name != "target":
            raise ScheduleError(
                f"schedule.lengths=validation applies to schedule.name=target only, not {name!r}"
            )
        if not lengths:
            raise ScheduleError(
                "schedule.lengths=validation fits the schedule to the validation split's target "
                "lengths, and none were given here; use schedule.lengths=median or build it "
                "where the dataset is loaded (training, evaluation)"
            )
        cfg["lengths"] = [int(n) for n in lengths]
    declared = cfg.get("num_layers")
    if declared is not None and int(declared) != num_layers:
        raise ScheduleError(
            f"schedule.num_layers={declared} does not match the model's {num_layers} layers; "
            "use a preset built for this model or schedule=target_<s>x, which adapts to it"
        )
    entry = _REGISTRY.get(str(name))
    if entry is None:
        raise ScheduleError(
            f"schedule.name={name!r} is not known; choose one of {schedule_names()}"
        )
    return entry.build(cfg, num_layers, expected_length)
