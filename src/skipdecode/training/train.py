"""Fine-tune a causal LM under a skip schedule: ``python -m skipdecode.train [overrides]``.

``train(cfg)`` is Hydra-agnostic (tests call it with a ``compose``d config); ``main`` is the
Hydra entry point. Examples::

    python -m skipdecode.train experiment=demo_2x
    python -m skipdecode.train model=tiny dataset=e2e schedule=target_2x trainer.max_steps=500
    python -m skipdecode.train trainer=ddp trainer.accelerator=cpu trainer.devices=2
    python -m skipdecode.train ckpt_path=last hydra.run.dir=outputs/train/runs/<that run>
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ..config import (
    config_dir,
    flag,
    instantiate_callbacks,
    instantiate_loggers,
    task_wrapper,
)
from ..core.context import (
    Demand,
    check_context,
    context_record,
    evaluation_demand,
    training_demand,
)
from ..data import get_or_train_tokenizer, get_task
from ..io import write_json_atomic, write_text_atomic
from ..locks import claim_dir
from ..models.loading import (
    config_context_limit,
    load_pretrained_tokenizer,
    needs_trained_tokenizer,
)
from ..provenance import provenance
from .checkpoints import AtomicCheckpointIO, resume_step
from .clock import CLOCK_FILE, TrainingClock, read_clock
from .datamodule import SkipDataModule, dataset_settings, load_examples
from .export import export_checkpoint
from .loggers import ResumableCSVLogger
from .memory import check_devices, plan_run
from .module import SkipDecodeLitModule
from .peak import PEAK_FILE, DevicePeak, read_peak

__all__ = ["train", "main", "build_tokenizer", "fit_to_context", "check_cell_context"]

log = logging.getLogger(__name__)


def _container(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def build_tokenizer(
    model_cfg: dict, dataset_cfg: dict, train_examples: list, cache_root: Path
) -> Any:
    """The trained BPE (scratch/random models, cached) or the pretrained model's tokenizer."""
    if not needs_trained_tokenizer(model_cfg):
        return load_pretrained_tokenizer(model_cfg)
    tok_cfg = model_cfg.get("tokenizer") or {}
    return get_or_train_tokenizer(
        train_examples,
        get_task(dataset_cfg["name"]),
        cache_root / "tokenizers",
        dataset_name=dataset_cfg["name"],
        split="train",
        seed=int(dataset_cfg.get("seed") or 0),
        vocab_size=int(tok_cfg.get("vocab_size", 4096)),
        min_frequency=int(tok_cfg.get("min_frequency", 2)),
    )


def _checkpoint_path(ckpt_path: str | None, output_dir: Path) -> str | None:
    if ckpt_path in (None, "", "none", "null"):
        return None
    if ckpt_path == "last":
        last = output_dir / "checkpoints" / "last.ckpt"
        if not last.is_file():
            log.warning("ckpt_path=last but %s does not exist: starting from scratch", last)
            return None
        return str(last)
    path = Path(ckpt_path)
    if not path.is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path!r} is not an existing checkpoint file")
    return str(path)


@task_wrapper
def train(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fine-tune per ``cfg``; returns ``(metrics, objects)``.

    ``objects`` holds ``best_ckpt`` (path or None), ``export_dir`` (or None), ``output_dir``,
    ``schedule`` (the resolved description), ``trainer``, ``module`` and ``datamodule``.
    """
    output_dir = Path(str(cfg.paths.output_dir))
    # one process per run dir: a second one (same dir, or the same sweep cell) is refused
    with claim_dir(output_dir, "training run"):
        return _train(cfg, output_dir)


def _memory_plan(cfg: DictConfig, datamodule: SkipDataModule, tokenizer: Any) -> dict[str, Any]:
    """The run's memory plan per device (:mod:`.memory`) at its longest training sequence:
    printed, checked against the visible GPUs (a plan that cannot fit is refused here, before
    any weight is loaded) and returned for the run's record."""
    longest = max((len(e) for e in datamodule.train_set or []), default=1)
    plan = plan_run(
        _container(cfg.model),
        _container(cfg.trainer),
        _container(cfg.optimizer),
        int(cfg.loader.batch_size),
        longest,
        vocab=len(tokenizer),
        hardware=_container(cfg.get("hardware")) if cfg.get("hardware") is not None else None,
    )
    if plan is None:
        log.info("memory plan: the model's sizes are not known without its weights; none made")
        return {"checked": "no plan: the model's sizes are not known without its weights"}
    log.info(plan.describe())
    checked = check_devices(plan, str(cfg.trainer.get("accelerator", "auto")))
    log.info("memory plan: %s", checked)
    return {**plan.as_dict(), "checked": checked}


def fit_to_context(
    model_cfg: dict[str, Any], dataset_cfg: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dataset settings training encodes with, and what the context check found: training
    sequences (prompt bound + target bound) checked against the model's context before anything
    is loaded; refused (``dataset.on_long_context: error``) or the prompt bound lowered to fit
    (``truncate``). See :mod:`skipdecode.core.context`."""
    limit = config_context_limit(model_cfg)
    demand = _training_demand(dataset_cfg)
    rule = dataset_cfg.get("on_long_context")
    fitted = check_context([demand], limit, str(model_cfg.get("name")), rule)[demand.use]
    context = context_record(demand, limit, rule, fitted)
    return {**dataset_cfg, "max_source_tokens": fitted}, context


def _training_demand(dataset_cfg: Mapping[str, Any]) -> Demand:
    """The longest training sequence the dataset settings allow (the task's bounds where unset)."""
    task = get_task(dataset_cfg["name"])
    max_source = int(dataset_cfg.get("max_source_tokens") or task.max_source_tokens)
    max_target = int(dataset_cfg.get("max_target_tokens") or task.max_target_tokens)
    return training_demand(max_source, max_target)


def check_cell_context(c: Mapping[str, Any]) -> None:
    """Both stages' longest sequences (training: prompt + target; evaluation: prompt + new
    tokens) against the model's context, read from its config: a cell that would exceed it is
    refused before it trains, with every setting named (:mod:`skipdecode.core.context`)."""
    data = dataset_settings(dict(c.get("dataset") or {}))
    training = _training_demand(data)
    generation = (c.get("eval") or {}).get("generation") or {}
    max_new = generation.get("max_new_tokens") or get_task(data["name"]).max_target_tokens
    model = dict(c.get("model") or {})
    check_context(
        [training, evaluation_demand(training.source[1], int(max_new))],
        config_context_limit(model),
        str(model.get("name")),
        data.get("on_long_context"),
    )


def _run_info(
    cfg: DictConfig,
    module: SkipDecodeLitModule,
    datamodule: SkipDataModule,
    tokenizer: Any,
    memory: dict[str, Any],
    context: dict[str, Any],
) -> dict[str, Any]:
    """What a run records of itself before it trains (``run_info.json``)."""
    static = module.schedule.static()
    return {
        "schedule": module.schedule.describe(),
        "schedule_config": _container(cfg.schedule),
        "expected_length": datamodule.expected_length,
        "theoretical_speedup": module.validation_plan.theoretical_speedup(
            [datamodule.expected_length]
        ),
        # what the schedule plans over the validation split's target lengths (a generation
        # that writes shorter or longer outputs reaches another speedup; see the reach table)
        "planned_speedup": static.theoretical_speedup(
            datamodule.validation_lengths or [datamodule.expected_length]
        )
        if static is not None
        else None,
        "truncation": datamodule.truncation_summary(),
        "context": context,
        "num_train_examples": len(datamodule.train_set or []),
        "num_val_examples": len(datamodule.val_set or []),
        "num_parameters": sum(p.numel() for p in module.model.parameters()),
        "vocab_size": len(tokenizer),
        "memory_plan": memory,
    }


def _best_checkpoint(trainer: pl.Trainer, output_dir: Path, fit_started: float) -> str | None:
    """The checkpoint to export: the best by validation, else this run's last one."""
    ckpt_cb = trainer.checkpoint_callback
    if ckpt_cb is not None and getattr(ckpt_cb, "best_model_path", ""):
        return ckpt_cb.best_model_path
    last = output_dir / "checkpoints" / "last.ckpt"
    if last.is_file() and last.stat().st_mtime >= fit_started:
        return str(last)  # no validation ran: export the last weights of this run
    return None


def _trainer(
    cfg: DictConfig, output_dir: Path, plan_bytes: int | None = None
) -> tuple[pl.Trainer, str | None]:
    """The Lightning trainer of the config, and the checkpoint it resumes from (if any)."""
    # every run measures its devices' peak memory beside its plan (a no-op off a GPU)
    callbacks = [
        *instantiate_callbacks(cfg.get("callbacks")),
        DevicePeak(output_dir, plan_bytes),
        TrainingClock(output_dir),  # fitting seconds, carried through a resume
    ]
    loggers = instantiate_loggers(cfg.get("logger"))
    ckpt = _checkpoint_path(cfg.get("ckpt_path"), output_dir)
    if ckpt is not None:  # keep the interrupted run's metrics history
        step = resume_step(ckpt)
        for lg in loggers:
            if isinstance(lg, ResumableCSVLogger):
                lg.keep_history(before_step=step)
    # checkpoints are written whole or not at all (training.checkpoints)
    plugins = [*(instantiate(cfg.trainer.get("plugins")) or []), AtomicCheckpointIO()]
    trainer: pl.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=plugins
    )
    return trainer, ckpt


def _finish(
    cfg: DictConfig,
    trainer: pl.Trainer,
    output_dir: Path,
    fit_started: float,
    run_info: dict,
    fit: dict[str, Any],
) -> tuple[dict[str, float], str | None, str | None]:
    """After ``fit``: the final metrics, the best checkpoint, and (rank 0) its export and the
    run's ``metrics.json`` (metrics, run info, the devices' measured peak)."""
    metrics = {
        k: float(v)
        for k, v in trainer.callback_metrics.items()
        if isinstance(v, torch.Tensor) and v.numel() == 1
    }
    metrics["global_step"] = max(
        int(trainer.global_step), int(metrics.pop("trainer/global_step", 0))
    )
    best = _best_checkpoint(trainer, output_dir, fit_started)
    export_dir = None
    if trainer.is_global_zero:
        if flag(cfg.get("export", True), "export") and best:
            export_dir = str(export_checkpoint(best, output_dir / "export", metrics=metrics))
            log.info("exported %s -> %s", best, export_dir)
        record = {"metrics": metrics, "best_ckpt": best, "export_dir": export_dir, **run_info}
        record["fit"] = fit
        record["provenance"] = provenance()  # what code trained it (results/PROVENANCE.md)
        write_json_atomic(
            output_dir / "metrics.json", {**record, "device_peak": read_peak(output_dir)}
        )
    return metrics, best, export_dir


def _fit(output_dir: Path, resumed_from: str | None) -> dict[str, Any]:
    """The checkpoint the fit resumed from (None: from the start), the fitting seconds of every
    step that made the model, and what of them that checkpoint had reached (:mod:`.clock`)."""
    return {"resumed_from": resumed_from, **read_clock(output_dir)}


def _train(cfg: DictConfig, output_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    pl.seed_everything(int(cfg.seed), workers=True)

    model_cfg = _container(cfg.model)
    dataset_cfg = dataset_settings(_container(cfg.dataset))
    encoded_cfg, context = fit_to_context(model_cfg, dataset_cfg)  # before anything is loaded
    train_examples = load_examples(dataset_cfg, "train")
    tokenizer = build_tokenizer(
        model_cfg, dataset_cfg, train_examples, Path(str(cfg.paths.cache_dir))
    )
    datamodule = SkipDataModule(
        encoded_cfg, tokenizer, train_examples=train_examples, **_container(cfg.loader)
    ).prepare()
    memory = _memory_plan(cfg, datamodule, tokenizer)  # before any weight is loaded

    module = SkipDecodeLitModule(
        model=model_cfg,
        schedule=_container(cfg.schedule),
        optimizer=_container(cfg.optimizer),
        scheduler=_container(cfg.get("scheduler")),
        expected_length=datamodule.expected_length,
        dataset=dataset_cfg,
        validate_full=flag(cfg.module.get("validate_full", True), "module.validate_full"),
        tokenizer=tokenizer,
        validation_lengths=datamodule.validation_lengths,
    )
    schedule_desc = module.schedule.describe()
    run_info = _run_info(cfg, module, datamodule, tokenizer, memory, context)
    log.info(
        "resolved schedule %s (expected length %s, theoretical speedup %.2fx)",
        schedule_desc,
        datamodule.expected_length,
        run_info["theoretical_speedup"],
    )
    module.run_config = {**_container(cfg), "run_info": run_info}

    trainer, ckpt = _trainer(cfg, output_dir, memory.get("total"))
    if trainer.is_global_zero:
        write_json_atomic(output_dir / "run_info.json", run_info)
        write_text_atomic(output_dir / "config_resolved.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        # an earlier fit's peaks are not this one's
        (output_dir / PEAK_FILE).unlink(missing_ok=True)
        (output_dir / CLOCK_FILE).unlink(missing_ok=True)

    fit_started = time.time()
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)

    fit = _fit(output_dir, ckpt)
    metrics, best, export_dir = _finish(cfg, trainer, output_dir, fit_started, run_info, fit)
    objects = {
        "best_ckpt": best,
        "export_dir": export_dir,
        "output_dir": str(output_dir),
        "schedule": schedule_desc,
        "run_info": run_info,
        "fit": fit,
        "trainer": trainer,
        "module": module,
        "datamodule": datamodule,
    }
    return metrics, objects


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    # Resolve ${hydra:...} now, inside the Hydra run: worker processes have no Hydra context.
    OmegaConf.resolve(cfg)
    metrics, _ = train(cfg)
    return metrics.get("val/loss")


def main() -> None:
    """Console entry point ``skipdecode-train``."""
    _hydra_main()


if __name__ == "__main__":
    main()
