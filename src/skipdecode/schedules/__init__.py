"""Schedules: which decoder layers run for each generated token.

``base`` (the interfaces: any schedule, and position-only static ones), ``layout``
(SkipDecode's warm-up + top layout, its linear decay and the target-speedup rule),
``baselines`` (full, early exit, unified skipping, power law), ``adaptive`` (adaptive monotone
SkipDecode), ``calm`` (CALM), ``speculative`` (lossless: a skip plan drafts, all layers
verify), ``randomized`` (budget-randomized fine-tuning: a plan drawn per batch, one model for
every speedup) and ``registry`` (``build_schedule`` by name). Importing the package registers
every built-in schedule; a new one is a module here plus a line below (docs/EXTENDING.md).
"""

from . import (  # noqa: F401  (registers the builders)
    adaptive,
    baselines,
    calm,
    layout,
    randomized,
    speculative,
)
from .adaptive import AdaptiveSchedule
from .base import (
    Schedule,
    ScheduleError,
    ScheduleRun,
    StaticSchedule,
    position_layer_mask,
    require,
    setting,
)
from .baselines import EarlyExitSchedule, FullSchedule, PowerLawSchedule, UnifiedSkipSchedule
from .calm import CALMSchedule
from .layout import BudgetSchedule, LinearSchedule, linear_for_speedup
from .randomized import RandomizedSchedule
from .registry import (
    build_schedule,
    method_label,
    register,
    schedule_names,
    schedule_settings,
)
from .speculative import SpeculativeSchedule

__all__ = [
    "AdaptiveSchedule",
    "BudgetSchedule",
    "CALMSchedule",
    "EarlyExitSchedule",
    "FullSchedule",
    "LinearSchedule",
    "PowerLawSchedule",
    "RandomizedSchedule",
    "Schedule",
    "ScheduleError",
    "ScheduleRun",
    "SpeculativeSchedule",
    "StaticSchedule",
    "UnifiedSkipSchedule",
    "build_schedule",
    "linear_for_speedup",
    "method_label",
    "position_layer_mask",
    "register",
    "require",
    "schedule_names",
    "schedule_settings",
    "setting",
]
