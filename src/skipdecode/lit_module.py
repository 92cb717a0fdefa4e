"""LightningModule: fine-tuning through the skip-masked forward.

Loss is plain cross-entropy on target tokens (prompt and padding masked) of the logits from
``SkipDecoder.forward`` with ``position_layer_mask(schedule, prompt_lengths, T)``: prompt
positions run every layer, target token ``g`` runs the layers of generation step ``g``.
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
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torch.optim.lr_scheduler import LambdaLR

from .engine import SkipDecoder
from .models import (
    build_model,
    load_pretrained_tokenizer,
    model_from_hf_config,
    needs_trained_tokenizer,
)
from .policies import AdaptiveSkipPolicy, CALMPolicy, DecodePolicy, build_policy
from .schedules import FullSchedule, LinearSchedule, Schedule, ScheduleError, position_layer_mask

__all__ = ["SkipDecodeLitModule", "warmup_decay_schedule", "CKPT_KEY"]

CKPT_KEY = "skipdecode"
IGNORE_INDEX = -100


def warmup_decay_schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int = 0,
    decay: str = "cosine",
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Linear warm-up over ``warmup_steps``, then ``cosine``/``linear`` decay to
    ``min_lr_ratio * lr`` at ``total_steps`` (or ``constant``)."""
    if decay not in ("cosine", "linear", "constant"):
        raise ValueError(
            f"scheduler.decay={decay!r} is not allowed; choose cosine, linear or constant"
        )
    if warmup_steps < 0 or not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(
            f"scheduler.warmup_steps={warmup_steps} must be >= 0 and "
            f"scheduler.min_lr_ratio={min_lr_ratio} in [0, 1]"
        )
    total = max(1, int(total_steps))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if decay == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total - warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if decay == "cosine" else 1 - progress
        return min_lr_ratio + (1 - min_lr_ratio) * shape

    return LambdaLR(optimizer, factor)


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
        self.policy = self._build_policy(schedule, expected_length)
        # The deterministic plan validation reports under (a fixed linear proxy for the adaptive
        # policy; every layer for CALM, whose own loss weights the intermediate exits).
        self.schedule = self._validation_schedule(self.policy, expected_length)
        self.full_schedule = FullSchedule(self.decoder.num_layers)
        self.hparams["schedule_resolved"] = self.policy.describe()
        self._val_sums: dict[str, list[torch.Tensor]] = {}
        self.start_metrics: dict[str, float] = {}
        self.speed: dict[str, float] = {}
        self._t_last: float | None = None
        self._timed = {"steps": 0, "seconds": 0.0, "tokens": 0}

    # ------------------------------------------------------------------ setup
    def _build_policy(self, cfg: Mapping[str, Any], expected_length: int | None) -> DecodePolicy:
        L = self.decoder.num_layers
        try:
            return build_policy(cfg, L, expected_length)
        except ScheduleError as e:
            raise ScheduleError(
                f"schedule={cfg.get('name')!r} {dict(cfg)} cannot be used with "
                f"model={self.hparams.model.get('name')!r} ({L} layers): {e}"
            ) from e

    @staticmethod
    def _validation_schedule(policy: DecodePolicy, expected_length: int | None) -> Schedule:
        static = policy.static_schedule()
        if static is not None:
            return static
        if isinstance(policy, AdaptiveSkipPolicy):
            return LinearSchedule(policy.num_layers, policy.warmup_layers, policy.max_layers,
                                  policy.min_layers, int(expected_length or 32))
        return FullSchedule(policy.num_layers)

    def _training_schedule(self) -> Schedule:
        """This batch's plan: the schedule, or a fresh random monotone draw (adaptive), seeded by
        the step so a resumed run sees the same draws."""
        if isinstance(self.policy, AdaptiveSkipPolicy):
            gen = torch.Generator().manual_seed(int(self.global_step) * 7919 + int(self.current_epoch))
            return self.policy.training_schedule(gen)
        return self.schedule

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
        self, batch: Mapping[str, torch.Tensor], schedule: Schedule
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed target-token cross-entropy, number of target tokens) under ``schedule``."""
        input_ids, labels = batch["input_ids"], batch["labels"]
        T = input_ids.shape[1]
        mask = None
        if not isinstance(schedule, FullSchedule):
            mask = position_layer_mask(schedule, batch["prompt_lengths"], T).to(input_ids.device)
        logits = self(input_ids, batch["attention_mask"], mask)  # (B, T, V)
        # Position t predicts token t + 1: the last prompt position predicts target token 0.
        logits = logits[:, :-1].float()
        targets = labels[:, 1:]
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="sum",
        )
        return loss, (targets != IGNORE_INDEX).sum()

    def calm_loss_sums(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """CALM's recipe: cross-entropy at every exit through the shared head, weighted by depth."""
        assert isinstance(self.policy, CALMPolicy)
        weights = self.policy.intermediate_loss_weights()
        exits = self.decoder.forward_exits(batch["input_ids"], batch["attention_mask"], list(weights))
        targets = batch["labels"][:, 1:]
        total = 0.0
        for layer_idx, w in weights.items():
            logits = exits[layer_idx][:, :-1].float()
            total = total + w * F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                ignore_index=IGNORE_INDEX, reduction="sum")
        return total, (targets != IGNORE_INDEX).sum()

    # ------------------------------------------------------------------ training
    def on_train_start(self) -> None:
        self.model.train()  # transformers models come in eval mode; Lightning restores modes
        run_config = getattr(self, "run_config", None)
        for logger in self.loggers:  # log_* are rank-zero-only
            if run_config:
                logger.log_hyperparams(run_config)
            if self.start_metrics:
                logger.log_metrics(self.start_metrics, step=self.global_step)
        for key, value in self.start_metrics.items():  # travels back from spawned workers
            self.trainer.callback_metrics[key] = torch.tensor(value)

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if isinstance(self.policy, CALMPolicy):
            loss_sum, ntok = self.calm_loss_sums(batch)
        else:
            loss_sum, ntok = self.loss_sums(batch, self._training_schedule())
        loss = loss_sum / ntok.clamp(min=1)
        bs = batch["input_ids"].shape[0]
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=bs)
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
    def _val_schedules(self) -> dict[str, Schedule]:
        out = {"": self.schedule}
        if self.hparams.validate_full and not isinstance(self.schedule, FullSchedule):
            out["_full"] = self.full_schedule
        return out

    def on_validation_epoch_start(self) -> None:
        self._val_sums = {suffix: [] for suffix in self._val_schedules()}

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        for suffix, schedule in self._val_schedules().items():
            loss_sum, ntok = self.loss_sums(batch, schedule)
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
            "schedule": self.policy.describe(),
            "schedule_config": dict(self.hparams.schedule),
            "expected_length": self.hparams.expected_length,
            "dataset": self.hparams.dataset,
            "model": dict(self.hparams.model),
            "metrics": {**self.start_metrics, **metrics},
            "global_step": int(self.global_step) if self._trainer is not None else 0,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        files = (checkpoint.get(CKPT_KEY) or {}).get("tokenizer_files")
        if self.tokenizer is None and files:
            self.tokenizer = tokenizer_from_files(files)
