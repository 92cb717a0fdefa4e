"""Schedules by name: ``build_schedule(cfg, num_layers, expected_length)`` builds any of them.

A schedule module registers a builder for each name it owns::

    @register("early_exit", method="early exit", settings=("exit_layers",))
    def _build(cfg: Mapping, num_layers: int, expected_length: int | None) -> Schedule: ...

``cfg`` is the ``schedule`` config (a mapping with ``name``); ``expected_length`` is the
expected generation length in tokens (the dataset's median target length) for schedules that
are built from a target speedup. ``method`` is the label tables and plots use for the name.
``settings`` are the keys the builder reads, and those its schedule's ``describe()`` writes (a
checkpoint's schedule is built again from them); with :data:`COMMON_SETTINGS` they are all a
config may hold, so a misspelt key (``warmpu_layers``) is refused by name, never ignored.
``calibrates`` says from the config alone whether the schedule is tuned on validation prompts
before decoding (its ``needs_calibration``): a sweep names such an evaluation by its
calibration settings before anything is built, and ``build_schedule`` refuses a schedule whose
``needs_calibration`` disagrees with its registration, so a new calibrating schedule cannot be
cached under another calibration's results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .base import Schedule, ScheduleError

__all__ = [
    "COMMON_SETTINGS",
    "LENGTH_RULES",
    "build_schedule",
    "calibrates",
    "method_label",
    "register",
    "schedule_names",
    "schedule_settings",
]

Builder = Callable[[Mapping, int, "int | None"], Schedule]


#: Keys every schedule config may hold: its name, the model's layer count it was made for, the
#: length rule, and the speedup it was built for (on an explicit plan, the label tables read).
COMMON_SETTINGS: tuple[str, ...] = ("name", "num_layers", "lengths", "target_speedup")


@dataclass(frozen=True)
class _Entry:
    build: Builder
    method: str
    settings: tuple[str, ...] | None  # None: not checked (a builder registered without them)
    calibrates: Callable[[Mapping], bool]


_REGISTRY: dict[str, _Entry] = {}


def _never(cfg: Mapping) -> bool:
    return False


def register(
    name: str,
    method: str,
    settings: Sequence[str] | None = None,
    calibrates: Callable[[Mapping], bool] = _never,
) -> Callable[[Builder], Builder]:
    """Register ``builder`` as ``schedule.name=<name>``, labelled ``method`` in tables, reading
    ``settings`` beside :data:`COMMON_SETTINGS` (module doc; None: any key passes); a config for
    which ``calibrates`` is true builds a schedule that is tuned before decoding."""

    def wrap(builder: Builder) -> Builder:
        if name in _REGISTRY and _REGISTRY[name].build is not builder:
            raise ValueError(f"schedule name {name!r} is registered twice")
        keys = None if settings is None else tuple(settings)
        _REGISTRY[name] = _Entry(builder, method, keys, calibrates)
        return builder

    return wrap


def _check_settings(cfg: Mapping, name: str, entry: _Entry) -> None:
    if entry.settings is None:
        return
    allowed = sorted({*COMMON_SETTINGS, *entry.settings})
    unknown = sorted(str(k) for k in cfg if k not in allowed)
    if unknown:
        raise ScheduleError(
            f"{', '.join(f'schedule.{k}' for k in unknown)} is not a setting of "
            f"schedule.name={name}; allowed: {', '.join(allowed)}"
        )


def schedule_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def schedule_settings(name: str | None) -> tuple[str, ...] | None:
    """Every key a ``name`` schedule's config may hold (None: unknown name, or not checked)."""
    entry = _REGISTRY.get(str(name))
    if entry is None or entry.settings is None:
        return None
    return tuple(sorted({*COMMON_SETTINGS, *entry.settings}))


def calibrates(cfg: Mapping | None) -> bool:
    """Whether the schedule ``cfg`` describes is tuned on validation prompts before decoding
    (its registration's rule; no config or an unknown name: no)."""
    if not isinstance(cfg, Mapping):
        return False
    entry = _REGISTRY.get(str(cfg.get("name")))
    return bool(entry and entry.calibrates(cfg))


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
    _check_settings(cfg, str(name), entry)
    schedule = entry.build(cfg, num_layers, expected_length)
    if schedule.needs_calibration != entry.calibrates(cfg):
        raise ScheduleError(
            f"schedule.name={name}: the built schedule's needs_calibration is "
            f"{schedule.needs_calibration} where its registration's calibrates rule says "
            f"{not schedule.needs_calibration} for {cfg}; register it with a calibrates rule "
            "that matches (a sweep names a calibrated evaluation by its calibration settings)"
        )
    return schedule
