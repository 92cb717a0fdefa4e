"""LightningModule: fine-tuning a causal LM under a schedule.

The schedule owns its training loss (``Schedule.loss_sums``): for static schedules plain
cross-entropy on target tokens (prompt and padding masked) of the logits from
``SkipDecoder.forward`` with ``position_layer_mask(schedule, prompt_lengths, T)`` (prompt
positions run every layer, target token ``g`` runs the layers of generation step ``g``); random
monotone budgets for adaptive SkipDecode; CALM's weighted exit losses. Validation reports the
loss under the schedule's deterministic ``validation_plan`` (and with every layer).
``schedule=full`` is the ordinary fine-tuning baseline.

The module is built from plain config dicts, never from a built ``nn.Module``, so
``load_from_checkpoint`` works; ``hf_config`` (stored in the hyper-parameters after the first
build) rebuilds the architecture without the hub, and the tokenizer travels in the checkpoint.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate

from ..core.engine import SkipDecoder
from ..models.loading import (
    build_model,
    load_pretrained_tokenizer,
    model_from_hf_config,
    needs_trained_tokenizer,
)
from ..schedules import FullSchedule, Schedule, ScheduleError, StaticSchedule, build_schedule
from ..schedules.base import plan_loss_sums
from .resumable import capture_rng, draw_like_a_loader, restore_rng

__all__ = ["SkipDecodeLitModule", "CKPT_KEY"]

CKPT_KEY = "skipdecode"
RNG_KEY = "skipdecode_rng"  # the global generators' states when the checkpoint was written


def _tokenizer_files(tokenizer: Any) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        return {
            p.name: p.read_text(encoding="utf-8")
            for p in sorted(Path(tmp).iterdir())
            if p.is_file()
        }


def tokenizer_from_files(files: Mapping[str, str]) -> Any:
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        return AutoTokenizer.from_pretrained(tmp)


class SkipDecodeLitModule(pl.LightningModule):
    """Fine-tunes a causal LM under a skip schedule.

    Args:
        model: the ``model`` config (plain dict).
        schedule: the ``schedule`` config (plain dict), built for the model's layer count.
        optimizer / scheduler: ``_partial_: true`` configs, finished in ``configure_optimizers``.
        expected_length: generation length for ``target`` schedules (dataset median, tokens).
        validation_lengths: the validation split's target lengths (``schedule.lengths:
            validation`` fits a ``target`` schedule to them).
        dataset: dataset settings, recorded with checkpoints and exports.
        validate_full: also report validation loss/perplexity with every layer.
        hf_config: the transformers config dict; set after the first build so checkpoints
            rebuild the architecture without the hub.
        tokenizer: the tokenizer object (not a hyper-parameter; stored in checkpoints).
    """

    def __init__(
        self,
        model: Mapping[str, Any],
        schedule: Mapping[str, Any],
        optimizer: Mapping[str, Any],
        scheduler: Mapping[str, Any] | None = None,
        expected_length: int | None = None,
        dataset: Mapping[str, Any] | None = None,
        validate_full: bool = True,
        hf_config: Mapping[str, Any] | None = None,
        tokenizer: Any = None,
        validation_lengths: Sequence[int] | None = None,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["tokenizer"], logger=False)
        self.tokenizer = tokenizer
        if hf_config is not None:
            self.model = model_from_hf_config(hf_config, model)
        else:
            if self.tokenizer is None and not needs_trained_tokenizer(model):
                self.tokenizer = load_pretrained_tokenizer(model)
            self.model = build_model(model, self.tokenizer)
            self.hparams["hf_config"] = json.loads(self.model.config.to_json_string())
        self.decoder = SkipDecoder(self.model)
        self.schedule = self._build_schedule(schedule, expected_length, validation_lengths)
        # The deterministic plan validation reports under (a fixed linear proxy for adaptive
        # SkipDecode; every layer for CALM, whose own loss weights the intermediate exits).
        self.validation_plan = self.schedule.validation_plan(expected_length)
        self.full_schedule = FullSchedule(self.decoder.num_layers)
        self.hparams["schedule_resolved"] = self.schedule.describe()
        self._val_sums: dict[str, list[torch.Tensor]] = {}
        self.start_metrics: dict[str, float] = {}
        self.speed: dict[str, float] = {}
        self._t_last: float | None = None
        self._rng_to_restore: dict[str, Any] | None = None  # from a checkpoint, on resume
        self._timed = {"steps": 0, "seconds": 0.0, "tokens": 0}
        # the root shard unit under trainer=fsdp (training.sharding), set in configure_model; not
        # a registered submodule: the weights stay under ``model`` (one name each in checkpoints)
        object.__setattr__(self, "_shard_root", None)

    # ------------------------------------------------------------------ setup
    def _build_schedule(
        self,
        cfg: Mapping[str, Any],
        expected_length: int | None,
        lengths: Sequence[int] | None,
    ) -> Schedule:
        L = self.decoder.num_layers
        try:
            return build_schedule(cfg, L, expected_length, lengths)
        except ScheduleError as e:
            raise ScheduleError(
                f"schedule={cfg.get('name')!r} {dict(cfg)} cannot be used with "
                f"model={self.hparams.model.get('name')!r} ({L} layers): {e}"
            ) from e

    # ------------------------------------------------------------------ sharding
    def configure_model(self) -> None:
        """Under :class:`~skipdecode.training.sharding.ShardedStrategy` (``trainer=fsdp``): shard
        the model over the data-parallel devices, each decoder layer a unit."""
        from pytorch_lightning.strategies import ModelParallelStrategy

        from .sharding import ShardedStrategy, shard_model

        strategy = None if self._trainer is None else self.trainer.strategy  # None: loading
        if not isinstance(strategy, ModelParallelStrategy) or self._shard_root is not None:
            return
        if not isinstance(strategy, ShardedStrategy):  # it would train unsharded, unsynced
            raise TypeError(
                f"trainer.strategy: {type(strategy).__name__} applies no parallelism to this "
                "model; use trainer=fsdp (skipdecode.training.sharding.ShardedStrategy)"
            )
        root = shard_model(
            self.model,
            self.decoder.adapter.layers,
            self.device_mesh["data_parallel"],
            str(self.trainer.precision),
            activation_checkpointing=strategy.activation_checkpointing,
            reshard_after_forward=strategy.reshard_after_forward,
        )
        object.__setattr__(self, "_shard_root", root)

    def _run(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the model: through the root shard unit when sharded."""
        return fn(*args) if self._shard_root is None else self._shard_root(fn, *args)

    # ------------------------------------------------------------------ forward / loss
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        layer_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``(B, T, V)`` of the skip-masked forward (all layers when ``layer_mask`` is None)."""
        return self.decoder.forward(input_ids, attention_mask, layer_mask)

    def loss_sums(
        self, batch: Mapping[str, torch.Tensor], plan: StaticSchedule
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed target-token cross-entropy, number of target tokens) under a static ``plan``."""
        return plan_loss_sums(self.decoder, batch, plan)

    # ------------------------------------------------------------------ training
    def on_train_start(self) -> None:
        self.model.train()  # transformers models come in eval mode; Lightning restores modes
        if self._rng_to_restore is not None:  # resumed: the stream the killed run had
            restore_rng(self._rng_to_restore)
            self._rng_to_restore = None
        run_config = getattr(self, "run_config", None)
        for logger in self.loggers:  # log_* are rank-zero-only
            if run_config:
                logger.log_hyperparams(run_config)
            if self.start_metrics and self.global_step == 0:  # a resumed run has them already
                logger.log_metrics(self.start_metrics, step=self.global_step)
        for key, value in self.start_metrics.items():  # travels back from spawned workers
            self.trainer.callback_metrics[key] = torch.tensor(value)

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        # A fresh, step-seeded generator: a resumed run sees the same random plans (adaptive).
        generator = torch.Generator().manual_seed(
            int(self.global_step) * 7919 + int(self.current_epoch)
        )
        loss_sum, ntok = self._run(self.schedule.loss_sums, self.decoder, batch, generator)
        draw = getattr(self.schedule, "last_draw", None)  # budget-randomized: the plan drawn
        if draw is not None:
            self.log("train/draw", float(draw), on_step=True, on_epoch=False, batch_size=1)
        world = self.trainer.world_size if self._trainer is not None else 1
        if world > 1:  # the mean over the global batch's tokens: devices average gradients
            ntok = (
                self.trainer.strategy.reduce(ntok.detach().float().clone(), reduce_op="sum") / world
            )
        loss = loss_sum / ntok.clamp(min=1)
        bs = batch["input_ids"].shape[0]
        logged = loss.detach().clone()  # reduce works in place: never on the loss itself
        if world > 1:
            logged = self.trainer.strategy.reduce(logged, reduce_op="mean")
        self.log("train/loss", logged, on_step=True, on_epoch=False, prog_bar=True, batch_size=bs)
        return loss

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._t_last is None:
            self._t_last = time.perf_counter()

    def on_train_batch_end(
        self, outputs: Any, batch: Mapping[str, torch.Tensor], batch_idx: int
    ) -> None:
        now = time.perf_counter()
        dt = now - (self._t_last or now)
        self._t_last = now
        tokens = int(batch["attention_mask"].sum()) * self.trainer.world_size
        if dt > 0:
            self.log("train/tokens_per_s", tokens / dt, on_step=True, on_epoch=False, batch_size=1)
            self.log("train/batch_time_s", dt, on_step=True, on_epoch=False, batch_size=1)
        if batch_idx > 0:  # the first batch carries one-off start-up costs
            self._timed["steps"] += 1
            self._timed["seconds"] += dt
            self._timed["tokens"] += tokens
        opt = self.trainer.optimizers[0] if self.trainer.optimizers else None
        if opt is not None:
            self.log("lr", opt.param_groups[0]["lr"], on_step=True, on_epoch=False, batch_size=1)

    def on_train_end(self) -> None:
        # Spawned DDP workers hand back callback_metrics, not loop state: carry the step count.
        self.trainer.callback_metrics["trainer/global_step"] = torch.tensor(float(self.global_step))
        t = self._timed
        if t["steps"]:
            self.speed = {
                "train/sec_per_batch": t["seconds"] / t["steps"],
                "train/tokens_per_s_mean": t["tokens"] / t["seconds"],
                "train/timed_batches": float(t["steps"]),
            }
            for key, value in self.speed.items():  # travels back from spawned workers
                self.trainer.callback_metrics[key] = torch.tensor(value)

    # ------------------------------------------------------------------ validation
    def _val_schedules(self) -> dict[str, StaticSchedule]:
        out = {"": self.validation_plan}
        if self.hparams.validate_full and not isinstance(self.validation_plan, FullSchedule):
            out["_full"] = self.full_schedule
        draft = self.schedule.draft_plan
        if draft is not None:  # lossless mode: the draft plan's loss drives acceptance
            out["_draft"] = draft
        return out

    def on_validation_epoch_start(self) -> None:
        self._val_sums = {suffix: [] for suffix in self._val_schedules()}
        if self.trainer.sanity_checking and self._rng_to_restore is None:
            # The validation loader no longer draws its worker seed from the global stream;
            # the check before training still takes that one draw, so that a run's data order
            # is the one it had before validation stopped consuming random numbers.
            draw_like_a_loader()

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        for suffix, schedule in self._val_schedules().items():
            loss_sum, ntok = self._run(self.loss_sums, batch, schedule)
            self._val_sums[suffix].append(torch.stack([loss_sum.detach(), ntok.to(loss_sum)]))

    def on_validation_epoch_end(self) -> None:
        metrics: dict[str, float] = {}
        for suffix, parts in self._val_sums.items():
            if not parts:
                continue
            total = torch.stack(parts).sum(0)
            total = self.trainer.strategy.reduce(total, reduce_op="sum")
            loss = (total[0] / total[1].clamp(min=1)).item()
            metrics[f"val/loss{suffix}"] = loss
            metrics[f"val/ppl{suffix}"] = math.exp(min(loss, 50.0))
        if self.trainer.sanity_checking:
            self.start_metrics = {k.replace("val/", "val_start/"): v for k, v in metrics.items()}
            return
        for key, value in metrics.items():
            self.log(key, value, prog_bar=key == "val/loss", sync_dist=False, batch_size=1)

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> dict[str, Any]:
        decay, no_decay = [], []
        for _, p in self.model.named_parameters():
            if p.requires_grad:
                (decay if p.ndim >= 2 else no_decay).append(p)
        groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
        make_opt = instantiate(dict(self.hparams.optimizer), _convert_="all")
        optimizer = make_opt(params=groups) if isinstance(make_opt, partial) else make_opt
        if not self.hparams.scheduler:
            return {"optimizer": optimizer}
        make_sched = instantiate(dict(self.hparams.scheduler), _convert_="all")
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = make_sched(optimizer=optimizer, total_steps=total)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        metrics = {}
        if self._trainer is not None:
            metrics = {
                k: float(v)
                for k, v in self.trainer.callback_metrics.items()
                if isinstance(v, torch.Tensor) and v.numel() == 1
            }
        checkpoint[CKPT_KEY] = {
            "tokenizer_files": _tokenizer_files(self.tokenizer)
            if self.tokenizer is not None
            else None,
            "schedule": self.schedule.describe(),
            "schedule_config": dict(self.hparams.schedule),
            "expected_length": self.hparams.expected_length,
            "dataset": self.hparams.dataset,
            "model": dict(self.hparams.model),
            "metrics": {**self.start_metrics, **metrics},
            "global_step": int(self.global_step) if self._trainer is not None else 0,
        }
        checkpoint[RNG_KEY] = capture_rng()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rng_to_restore = checkpoint.get(RNG_KEY)
        files = (checkpoint.get(CKPT_KEY) or {}).get("tokenizer_files")
        if self.tokenizer is None and files:
            self.tokenizer = tokenizer_from_files(files)
