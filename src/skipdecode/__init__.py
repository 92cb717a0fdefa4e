"""skipdecode: SkipDecode-style layer skipping for batched, KV-cached autoregressive decoding.

The public API, importable from here::

    from skipdecode import SkipDecoder, build_schedule, LinearSchedule, linear_for_speedup

Rooms (one per stage of the data flow, see docs/ARCHITECTURE.md): ``core`` (the engine),
``schedules`` (every layer-skipping method), ``models``, ``data``, ``training``, ``evaluation``,
``experiments``; ``config``, ``io``, ``paths`` and ``provenance`` serve them all.
"""

__version__ = "0.1.0"

from .core.engine import SkipDecoder
from .core.stats import GenerationOutput, GenerationStats
from .schedules import (
    AdaptiveSchedule,
    BudgetSchedule,
    CALMSchedule,
    EarlyExitSchedule,
    FullSchedule,
    LinearSchedule,
    PowerLawSchedule,
    Schedule,
    ScheduleError,
    ScheduleRun,
    StaticSchedule,
    UnifiedSkipSchedule,
    build_schedule,
    linear_for_speedup,
    method_label,
    position_layer_mask,
    register,
    schedule_names,
)

__all__ = [
    "AdaptiveSchedule",
    "BudgetSchedule",
    "CALMSchedule",
    "EarlyExitSchedule",
    "FullSchedule",
    "GenerationOutput",
    "GenerationStats",
    "LinearSchedule",
    "PowerLawSchedule",
    "Schedule",
    "ScheduleError",
    "ScheduleRun",
    "SkipDecoder",
    "StaticSchedule",
    "UnifiedSkipSchedule",
    "build_schedule",
    "linear_for_speedup",
    "method_label",
    "position_layer_mask",
    "register",
    "schedule_names",
]
