"""One trial of the schedule search: a schedule built from the trial's parameters, decoded on a
validation subset beside the full model, scored by speed and by quality against full.

``python -m skipdecode.search -m checkpoint=<export> quality_floor=-0.5`` (``conf/search.yaml``;
Hydra's Optuna sweeper proposes the parameters, two objectives: the measured decode speedup and
the quality difference from full, both maximised). A trial:

1. refuses a split named ``test`` (the search never sees the test split) and a floor or metric it
   cannot evaluate;
2. builds the schedule of ``search`` (``shape``: ``target``, SkipDecode's linear decay fitted to
   ``target_speedup`` with ``spread``; ``power_law``; ``linear``, explicit ``max_layers`` and
   ``min_layers`` over the model's expected length), with ``warmup_layers``;
3. evaluates it and the full schedule on ``eval.split`` (``eval.limit`` inputs; the speedup is
   measured against full on the same batches), each evaluation cached under ``cache_dir`` by its
   settings, so that a rerun of the same search (the sampler is seeded) replays finished trials;
4. writes ``trial.json`` into its job folder: the schedule, the measured decode speedup, the
   quality difference (``metric``, the page's scale: ROUGE x100, BLEU as is), whether it meets
   ``quality_floor``, and the two records. A schedule that cannot be built is a trial with the
   worst values and its error;
5. with ``wandb.enabled=true``, logs the trial as one W&B run of the search's group (offline by
   default).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ...config import is_number, resolve_config
from ...evaluation.evaluate import evaluate
from ...evaluation.speed import published_speedups
from ...io import read_json_or_none, write_json_atomic
from ...schedules import ScheduleError

log = logging.getLogger(__name__)

__all__ = ["SearchError", "METRICS", "TRIAL_FILE", "log_trial", "search_trial", "trial_schedule"]

TRIAL_FILE = "trial.json"
#: The quality a floor can be set on, and its page scale.
METRICS = {"rougeL_max": 100.0, "bleu": 1.0, "bertscore_f1": 1.0}
#: What a trial whose schedule cannot be built returns (worse than any real trial).
WORST = (0.0, -1000.0)


class SearchError(ValueError):
    """A search setting that cannot work; the message names it and what is allowed."""


def _number(search: Mapping[str, Any], key: str, kind: type, default: Any = None) -> Any:
    """``search.<key>`` as ``kind``; absent, null or of another kind is refused by name (the
    shape that needs it said), before anything is evaluated."""
    value = search.get(key, default)
    if not is_number(value, kind):
        what = "an integer (layers)" if kind is int else "a number"
        raise SearchError(
            f"search.{key}={value!r}; search.shape={search.get('shape')} needs {what}"
        )
    return kind(value)


def trial_schedule(search: Mapping[str, Any], expected_length: int | None) -> dict[str, Any]:
    """The schedule config of a trial's parameters (module doc)."""
    shape, warmup = search.get("shape"), _number(search, "warmup_layers", int, 1)
    if shape == "target":
        return {
            "name": "target",
            "target_speedup": _number(search, "target_speedup", float),
            "warmup_layers": warmup,
            "spread": _number(search, "spread", float, 0.5),
        }
    if shape == "power_law":
        return {
            "name": "power_law",
            "target_speedup": _number(search, "target_speedup", float),
            "warmup_layers": warmup,
        }
    if shape == "linear":
        decay = search.get("decay_tokens")
        return {
            "name": "linear",
            "warmup_layers": warmup,
            "max_layers": _number(search, "max_layers", int),
            "min_layers": _number(search, "min_layers", int),
            "decay_tokens": int(decay) if decay else int(expected_length or 1),
        }
    raise SearchError(f"search.shape={shape!r}; allowed: target, power_law, linear")


def _check(c: Mapping[str, Any]) -> tuple[str, float]:
    split = str((c.get("eval") or {}).get("split"))
    if "test" in split.lower():
        raise SearchError(
            f"eval.split={split!r}: the search never sees the test split; use validation (the "
            "best schedule is scored on test once, after the search)"
        )
    floor = c.get("quality_floor")
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or floor > 0:
        raise SearchError(
            f"quality_floor={floor!r}; allowed: a number <= 0, how far below full the metric "
            "may fall (ROUGE on its x100 scale, BLEU as is)"
        )
    metric = c.get("metric")
    if metric not in METRICS:
        raise SearchError(f"metric={metric!r}; allowed: {', '.join(METRICS)}")
    return str(metric), float(floor)


def _evaluated(
    c: Mapping[str, Any], schedule: Mapping[str, Any] | None
) -> tuple[dict[str, Any], Path]:
    """The evaluation of ``schedule`` (None: full) under the trial's eval settings, cached; the
    record and where it lies."""
    key = {"checkpoint": str(c["checkpoint"]), "eval": c["eval"], "schedule": schedule}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    out = Path(str(c["cache_dir"])) / digest[:16]
    cached = read_json_or_none(out / "record.json")
    if cached is not None:
        return cached, out / "record.json"
    cfg = {
        "checkpoint": str(c["checkpoint"]),
        "dataset": {},
        "schedule": dict(schedule) if schedule else {"name": "full"},
        "eval": c["eval"],
        "seed": c.get("seed", 0),
        "output_dir": str(out),
        "progress": False,
    }
    return evaluate(OmegaConf.create(cfg)), out / "record.json"


def search_trial(cfg: Any) -> tuple[float, float]:
    """The trial's (measured decode speedup, quality difference from full); see module doc."""
    c = resolve_config(cfg)
    metric, floor = _check(c)
    trial_schedule(c["search"], None)  # its settings refused by name before full is evaluated
    job = Path(str(c["output_dir"]))
    full, full_path = _evaluated(c, None)
    if metric not in (full.get("summary") or {}):
        raise SearchError(
            f"metric={metric!r} is not in the full model's record on {c['eval'].get('split')} "
            f"(it holds {sorted(k for k in full['summary'] if k in METRICS)}); choose one of those"
        )
    trial: dict[str, Any] = {"search": c["search"], "metric": metric, "quality_floor": floor}
    trial["full_record"] = str(full_path)
    try:
        schedule = trial_schedule(c["search"], (full.get("schedule") or {}).get("expected_length"))
        trial["schedule"] = schedule
        record, path = _evaluated(c, schedule)
    except ScheduleError as e:
        trial.update(status="invalid", error=str(e), speed=WORST[0], delta=WORST[1])
        write_json_atomic(job / TRIAL_FILE, trial)
        return WORST
    scale = METRICS[metric]
    measured = published_speedups(record["speed"])["measured_speedup_decode"]
    if measured is None:
        raise ValueError(
            f"trial evaluation {path}: its record gives no measured decode speedup (not timed "
            "against full, or written before its rounds were kept); delete it to evaluate again"
        )
    speed = float(measured)
    delta = scale * (float(record["summary"][metric]) - float(full["summary"][metric]))
    trial.update(
        status="ok",
        speed=speed,
        delta=delta,
        feasible=delta >= floor,
        theoretical_speedup=record["summary"].get("theoretical_speedup"),
        record=str(path),
    )
    write_json_atomic(job / TRIAL_FILE, trial)
    log_trial(c.get("wandb") or {}, trial, job)
    log.info("trial %s: speed %.3fx, Δ%s %+.3f", schedule, speed, metric, delta)
    return speed, delta


def log_trial(wcfg: Mapping[str, Any], trial: Mapping[str, Any], job: Path) -> None:
    """One W&B run per trial (if enabled, offline by default), grouped by the search: the trial's
    parameters and schedule as config, its speedup, quality difference and feasibility as
    summary, and ``trial.json`` as a file; the dashboard plots every trial's quality against its
    speed."""
    if not wcfg.get("enabled"):
        return
    import wandb

    config = {
        **{f"search.{k}": v for k, v in (trial.get("search") or {}).items()},
        "schedule": json.dumps(trial.get("schedule"), sort_keys=True),
        "metric": trial["metric"],
        "quality_floor": trial["quality_floor"],
    }
    run = wandb.init(
        project=wcfg.get("project") or "skipdecode",
        group=wcfg.get("group") or "schedule_search",
        name=wcfg.get("name") or job.name,
        job_type="search_trial",
        mode=wcfg.get("mode") or "offline",
        dir=str(wcfg.get("dir") or job),
        config=config,
        tags=list(wcfg.get("tags") or []),
        reinit="finish_previous",
    )
    try:
        summary = {f"search/{k}": trial[k] for k in ("speed", "delta", "feasible")}
        run.log(summary)
        for k, v in summary.items():
            run.summary[k] = v
        run.save(str(job / TRIAL_FILE), base_path=str(job), policy="now")
    finally:
        run.finish()


def main() -> None:
    """Console entry point (Hydra, ``conf/search.yaml``; ``-m`` runs the Optuna sweeper)."""
    import hydra

    from ...config import config_dir

    @hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="search")
    def _run(cfg: Any) -> tuple[float, float]:
        OmegaConf.resolve(cfg)
        return search_trial(cfg)

    _run()
