"""The evaluation's settings checked before anything loads, trains or decodes.

``check_eval_settings(ev)`` refuses, by name with what is allowed, every value of the ``eval``
config that needs no model to judge: the split's limit, threads, the generation settings, the
calibration's limit and iterations, the speed settings, the decode options and the metrics'
sections. ``evaluate`` calls it first; a sweep calls it before it trains a cell, so a mistyped
evaluation setting costs no training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..config import ConfigError, count, flag
from ..core.options import DecodeOptions, DecodeOptionsError
from ..data.examples import check_limit
from .inputs import EvaluationError
from .metrics import check_metric_settings
from .references import REFERENCES

__all__ = ["check_eval_settings"]


def check_eval_settings(ev: Mapping[str, Any]) -> None:
    """Refuse (:class:`EvaluationError`) any model-free ``eval`` setting out of range."""
    try:
        check_limit(ev.get("limit"), "eval.limit")
        gen = ev.get("generation") or {}
        flag(gen.get("do_sample", False), "eval.generation.do_sample")
        flag(gen.get("sort_by_length", True), "eval.generation.sort_by_length")
        DecodeOptions.from_config(ev)
        count(ev.get("threads"), "eval.threads", 1, "leave torch's as is")
        count(gen.get("batch_size"), "eval.generation.batch_size", 1)
        count(gen.get("max_new_tokens"), "eval.generation.max_new_tokens", 1, "the task's")
        calibration = ev.get("calibration") or {}
        count(calibration.get("limit"), "eval.calibration.limit", 1, "every input of its split")
        count(calibration.get("iterations", 8), "eval.calibration.iterations", 1)
        speed = ev.get("speed") or {}
        count(speed.get("warmup_batches", 1), "eval.speed.warmup_batches", 0)
        count(speed.get("repeats", 1), "eval.speed.repeats", 1)
        count(speed.get("timed_batches"), "eval.speed.timed_batches", 1, "every batch")
        check_metric_settings(ev.get("metrics"), "eval.metrics")
    except (ConfigError, DecodeOptionsError, ValueError) as e:
        raise EvaluationError(str(e)) from e
    if gen.get("stop") not in ("eos", "none"):
        raise EvaluationError(f"eval.generation.stop={gen.get('stop')!r}; allowed: 'eos', 'none'")
    if speed.get("baseline") not in (None, "full"):
        raise EvaluationError(
            f"eval.speed.baseline={speed.get('baseline')!r}; allowed: 'full' or null (off)"
        )
    names = speed.get("references") or []
    listed = isinstance(names, Sequence) and not isinstance(names, str)
    if not listed or not all(isinstance(n, str) and n in REFERENCES for n in names):
        raise EvaluationError(
            f"eval.speed.references={names!r}; allowed: a list of {list(REFERENCES)} (or [])"
        )
