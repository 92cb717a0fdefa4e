"""Train-and-evaluate sweeps: one Hydra multirun job per (model, dataset, schedule) cell.

``python -m skipdecode.sweep -m model=tiny dataset=synthetic schedule=full,target_2x,target_4x``
(or ``-m experiment=sweep_demo``). Each job:

1. computes the cell id, a hash of the training-relevant config (model, dataset, schedule,
   trainer, optimisation, data, seed; see :mod:`skipdecode.experiments.sweeps.identity`), and reuses
   ``<sweep.cells_dir>/<cell>/`` when a previous run (of this or any sweep) finished training it;
   otherwise trains there with ``train(cfg)``;
2. evaluates the exported model (``evaluate(cfg)``; reused when an identical evaluation exists);
3. writes ``cell.json`` into its job folder (``running`` -> ``ok`` / ``failed`` with the error)
   and rewrites the sweep's table. A failing cell never stops the others.

When the multirun ends, :class:`AggregateCallback` writes ``results.csv``, ``results.md`` and a
PNG per dataset into the sweep directory, prints the table and logs it to W&B (if enabled).
``python -m skipdecode.aggregate <sweep dir>`` does the same for an interrupted sweep; rerunning
the same command with the same ``sweep.name`` resumes it (finished cells are reused).
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ...config import close_wandb, config_dir, flag, resolve_config
from ...evaluation.evaluate import evaluate
from ...evaluation.record import RECORD_FILE
from ...evaluation.settings import check_eval_settings
from ...io import read_json_or_none, write_json_atomic
from ...locks import claim_dir
from ...models.loading import model_sizes
from ...training.export import export_checkpoint
from ...training.train import check_cell_context, train
from .account import final_account, now, running_account
from .aggregate import aggregate, log_wandb
from .gpu_memory import PEAK_KEY, begin_cell, end_cell
from .identity import CELL_FILE, IDENTITY_FILE, SIZES_KEY, cell_identity
from .labels import cell_labels, eval_id, eval_schedule
from .steps import (
    check_eval_step,
    eval_step,
    reused_step_export,
    step_checkpoint_callback,
    step_export,
)
from .table import PLAN_FILE, TRAIN_DONE

log = logging.getLogger(__name__)

__all__ = ["run_cell", "AggregateCallback", "main"]


def _train_cfg(cfg: DictConfig, train_dir: Path) -> DictConfig:
    """The cell's training config: the sweep config with its output dir pinned to the cell."""
    tcfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    tcfg.paths.output_dir = str(train_dir)
    logger = tcfg.get("logger") or {}
    if "wandb" in logger and logger.wandb is not None:  # training run joins the sweep's group
        logger.wandb.group = _group_name(cfg) or ""
    keep = step_checkpoint_callback(
        {"sweep": {"keep_steps": cfg.sweep.get("keep_steps")}}, train_dir
    )
    if keep is not None:  # sweep.keep_steps: the weights of those steps, for budget evaluations
        if tcfg.get("callbacks") is None:
            tcfg.callbacks = {}
        tcfg.callbacks.step_checkpoints = keep
    if tcfg.get("ckpt_path") is None and (train_dir / "checkpoints" / "last.ckpt").is_file():
        log.info("resuming the interrupted training of %s from last.ckpt", train_dir)
        tcfg.ckpt_path = "last"
    return tcfg


def _find_export(train_dir: Path) -> Path | None:
    export = train_dir / "export"
    return export if (export / "config.json").is_file() else None


def _train(cfg: DictConfig, cell_dir: Path, reuse: bool) -> tuple[Path, dict[str, Any], bool]:
    """Train the cell (or reuse it); returns (export dir, training summary, reused?)."""
    done = read_json_or_none(cell_dir / TRAIN_DONE)
    train_dir = cell_dir / "train"
    if reuse and done and done.get("status") == "ok" and _find_export(train_dir):
        log.info("cell %s: reusing the trained model in %s", cell_dir.name, train_dir)
        return train_dir / "export", done, True
    if not reuse:  # train again from the start: no checkpoint of an earlier run is resumed
        shutil.rmtree(train_dir, ignore_errors=True)
        (cell_dir / TRAIN_DONE).unlink(missing_ok=True)
        # every evaluation beside it evaluated the deleted training: none may be reused later
        for stale in cell_dir.glob("eval-*"):
            shutil.rmtree(stale, ignore_errors=True)
    t0 = time.perf_counter()
    metrics, objects = train(_train_cfg(cfg, train_dir))  # after any deletion above
    best_ckpt = (objects or {}).get("best_ckpt") if isinstance(objects, Mapping) else objects
    export = _find_export(train_dir)
    if export is None:
        if not best_ckpt:
            raise RuntimeError(f"training wrote no export in {train_dir} and no best checkpoint")
        export = Path(export_checkpoint(best_ckpt, train_dir / "export", metrics=metrics))
    fit = ((objects or {}).get("fit") if isinstance(objects, Mapping) else None) or {}
    summary = {
        "status": "ok",
        # with the fitting seconds a resumed checkpoint had reached in the attempts before
        "seconds": time.perf_counter() - t0 + float(fit.get("before_resume") or 0.0),
        "resumed": bool(fit.get("resumed_from")),  # an interrupted run's last.ckpt or a named one
        # resumed from a checkpoint that does not say its seconds: only this attempt's counted
        "seconds_partial": bool(fit.get("resumed_from")) and fit.get("before_resume") is None,
        "best_ckpt": str(best_ckpt or ""),
        "metrics": {k: _plain(v) for k, v in (metrics or {}).items()},
        "export": str(export),
    }
    write_json_atomic(cell_dir / TRAIN_DONE, summary)
    return export, summary, False


def _plain(v: Any) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def _evaluate(
    cfg: DictConfig,
    c: Mapping[str, Any],
    export: Path,
    cell_dir: Path,
    group: str | None,
    labels: Mapping[str, Any],
    reuse: bool,
) -> tuple[Path, bool]:
    """Evaluate the exported model (or reuse an identical evaluation); returns the record path."""
    ev = dict(c["eval"])
    eval_dir = cell_dir / f"eval-{eval_id(c)}"
    record = eval_dir / RECORD_FILE
    if reuse and read_json_or_none(record):
        log.info("cell %s: reusing evaluation %s", cell_dir.name, record)
        return record, True
    if not reuse:  # nothing of an earlier evaluation (nor a restore's mark) stays beside the new
        shutil.rmtree(eval_dir, ignore_errors=True)
    dataset = dict(c.get("dataset") or {})
    wandb_cfg = dict(c.get("wandb") or {})
    wandb_cfg.update(
        group=group,
        name=f"{labels['model']}-{labels['dataset']}-{labels['schedule']}-s{labels['seed']}",
        dir=str(eval_dir),
        labels={**labels, "sweep_name": group, "cell": cell_dir.name},
    )
    ecfg_node = {
        "checkpoint": str(export),
        "dataset": {
            "name": dataset.get("name"),
            "data_dir": dataset.get("data_dir"),
            "hub_name": dataset.get("hub_name"),
            "seed": dataset.get("seed"),
            "max_source_tokens": dataset.get("max_source_tokens"),
            "on_long_context": dataset.get("on_long_context"),
            "options": dict(dataset.get("options") or {}),
        },
        # null: the schedule the cell was trained with (from skipdecode.json)
        "schedule": eval_schedule(c),
        "eval": ev,
        "seed": c.get("seed", 0),
        "output_dir": str(eval_dir),
        "wandb": wandb_cfg,
    }
    evaluate(OmegaConf.create(ecfg_node))
    return record, False


def _train_and_evaluate(
    cfg: DictConfig, c: Mapping[str, Any], cell_dir: Path, labels: Mapping[str, Any], reuse: bool
) -> dict[str, Any]:
    """The cell's work under its lock; returns what ``cell.json`` says of it."""
    record = cell_dir / f"eval-{eval_id(c)}" / RECORD_FILE
    if reuse and read_json_or_none(record):
        # evaluated before, or restored from published results: the record is the cell
        log.info("cell %s: reusing evaluation %s", cell_dir.name, record)
        export = _find_export(cell_dir / "train")
        if eval_step(c) is not None:
            export = reused_step_export(cell_dir / "train", eval_step(c))
        train_summary = read_json_or_none(cell_dir / TRAIN_DONE) or {}
        train_reused = eval_reused = True
    else:
        export, train_summary, train_reused = _train(cfg, cell_dir, reuse)
        if eval_step(c) is not None:  # the model as it was after that many steps
            export = step_export(cell_dir / "train", eval_step(c))
        record, eval_reused = _evaluate(cfg, c, export, cell_dir, _group_name(cfg), labels, reuse)
    if not (c.get("sweep") or {}).get("keep_checkpoints", True):  # they only serve resuming
        shutil.rmtree(cell_dir / "train" / "checkpoints", ignore_errors=True)
    return {
        "record": str(record),
        "export": str(export) if export else None,
        "train_reused": train_reused,
        "train_resumed": bool(train_summary.get("resumed")) and not train_reused,
        "eval_reused": eval_reused,
        "train_seconds": train_summary.get("seconds"),
    }


def run_cell(cfg: DictConfig, job_dir: Path | None = None) -> dict[str, Any]:
    """Train + evaluate one cell; never raises for a cell failure (it is recorded instead)."""
    job_dir = Path(job_dir or _job_dir(cfg))
    job_dir.mkdir(parents=True, exist_ok=True)
    cell = running_account(job_dir, _task_overrides())
    t0 = time.perf_counter()
    begin_cell()
    try:
        c = _resolved_without_paths_output(cfg)
        check_cell_context(c)  # training's and evaluation's lengths, before anything is written
        check_eval_step(c)
        check_eval_settings(c["eval"])  # a mistyped evaluation setting costs no training
        cell_id, ident = cell_identity(c)
        labels = cell_labels(c)
        sw = c.get("sweep") or {}
        cells_dir = Path(sw["cells_dir"])
        cell_dir = (
            cells_dir
            / f"{labels['model']}__{labels['dataset']}__{labels['trained_schedule']}__{cell_id}"
        )
        cell.update(labels, cell_id=cell_id, cell_dir=str(cell_dir))
        write_json_atomic(job_dir / CELL_FILE, cell)
        cell_dir.mkdir(parents=True, exist_ok=True)
        reuse = flag(sw.get("reuse", True), "sweep.reuse")
        asked = time.perf_counter()
        # one process per cell at a time: a parallel cell with the same trained model (same
        # training config, another evaluation) waits, then reuses it
        with claim_dir(cell_dir, "sweep cell", wait_s=float(sw.get("cell_wait_s", 0) or 0)):
            cell["lock_wait_seconds"] = time.perf_counter() - asked  # part of `seconds`
            write_json_atomic(cell_dir / IDENTITY_FILE, {**ident, SIZES_KEY: _sizes(c)})
            cell.update(_train_and_evaluate(cfg, c, cell_dir, labels, reuse))
        cell["status"] = "ok"
    except Exception as e:  # a failed cell is recorded, never fatal to the multirun
        log.exception("cell failed")
        cell.update(
            status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()
        )
    finally:
        close_wandb()
        peak = end_cell()
        if peak is not None:
            cell[PEAK_KEY] = peak
    cell["seconds"] = time.perf_counter() - t0
    cell["finished"] = now()
    cell = final_account(cell)
    write_json_atomic(job_dir / CELL_FILE, cell)
    try:  # the table after every finished cell
        aggregate(job_dir.parent, plots=False)
    except Exception as e:
        log.warning("could not update the sweep table: %s", e)
    return cell


def _sizes(c: Mapping[str, Any]) -> dict[str, Any] | None:
    """The model's real sizes for identity.json (None where they cannot be read here)."""
    try:
        return model_sizes(c["model"])
    except Exception as e:  # noqa: BLE001 - a record, never a reason for the cell to fail
        log.warning("could not read the model's sizes: %s", e)
        return None


def _resolved_without_paths_output(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config; ``paths.output_dir`` (a ${hydra:} key) is dropped, not resolved."""
    tmp = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    if "paths" in tmp and "output_dir" in tmp.paths:
        tmp.paths.output_dir = None
    if "hydra" in tmp:
        del tmp["hydra"]
    return resolve_config(tmp)


def _job_dir(cfg: DictConfig) -> Path:
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except Exception:
        out = (cfg.get("sweep") or {}).get("job_dir")
        if not out:
            raise ValueError(
                "run_cell outside Hydra needs sweep.job_dir (or a job_dir argument)"
            ) from None
        return Path(out)


def _group_name(cfg: DictConfig) -> str | None:
    """W&B group: the multirun's directory name (its ``sweep.name``)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().sweep.dir).name
    except Exception:
        return (cfg.get("sweep") or {}).get("name")


def _task_overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except Exception:
        return []


# --------------------------------------------------------------------------------------------
# Hydra callback
# --------------------------------------------------------------------------------------------

try:
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object  # type: ignore[misc,assignment]


class AggregateCallback(_HydraCallback):  # type: ignore[misc]
    """Writes the multirun's plan at start and the table, plots and W&B table at the end."""

    def __init__(self, print_table: bool = True) -> None:
        self.print_table = print_table

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            sweep_dir = Path(config.hydra.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            jobs = planned_jobs(config)
            if jobs:
                write_json_atomic(sweep_dir / PLAN_FILE, {"jobs": jobs})
        except Exception as e:  # a plan is a convenience; never block the sweep
            log.warning("could not write the sweep plan: %s", e)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        result = aggregate(sweep_dir)
        if self.print_table:
            print(Path(result["markdown"]).read_text(), flush=True)
            print(Path(result["cells_markdown"]).read_text(), flush=True)
            print(f"tables: {result['csv']}  {result['markdown']}  {result['cells_csv']}")
            for png in result["plots"]:
                print(f"plot: {png}")
            print(
                "cells: " + ", ".join(f"{k}={v}" for k, v in sorted(result["counts"].items())),
                flush=True,
            )
        wandb_cfg = config.get("wandb") or {}
        if wandb_cfg.get("enabled"):
            try:
                log_wandb(result, OmegaConf.to_container(wandb_cfg, resolve=True), sweep_dir.name)
            except Exception as e:
                log.warning("W&B aggregate logging failed: %s", e)


def planned_jobs(config: DictConfig) -> list[dict[str, Any]]:
    """Every job of the multirun in launch order, like Hydra's basic sweeper expands them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = list(config.hydra.overrides.task)
    params = config.hydra.get("sweeper", {}).get("params") or {}
    args = [f"{k}={v}" for k, v in params.items()] + args
    parsed = OverridesParser.create().parse_overrides(args)
    try:
        batches = BasicSweeper.split_arguments(parsed, None)
    except Exception:  # e.g. glob(), which needs the config repository: no plan
        return []
    jobs = [list(job) for batch in batches for job in batch]
    return [{"num": i, "overrides": job} for i, job in enumerate(jobs)]


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def main() -> None:
    import hydra

    @hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="sweep")
    def _run(cfg: DictConfig) -> None:
        cell = run_cell(cfg)
        log.info("cell %s: %s", cell.get("cell_id"), cell["status"])

    _run()


if __name__ == "__main__":
    main()
