"""LightningDataModule over the data layer: one config (``dataset/``) -> encoded train/val splits."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Sampler

from ..data import (
    DataConfigError,
    EncodedExample,
    Example,
    TrainCollator,
    TruncationReport,
    encode_examples,
    get_task,
    load_split,
    median_target_length,
    target_lengths,
)
from ..data.examples import check_limit
from .resumable import RankShare, ResumableSampler, order_state

__all__ = ["load_examples", "SkipDataModule", "dataset_settings"]

log = logging.getLogger(__name__)

_KEYS = (
    "name",
    "data_dir",
    "hub_name",
    "seed",
    "options",
    "limit_train",
    "limit_validation",
    "max_source_tokens",
    "max_target_tokens",
    "on_long_target",
    "on_long_context",
)


def dataset_settings(cfg: Mapping) -> dict[str, Any]:
    """Plain-data copy of the ``dataset`` config (recorded in checkpoints and exports)."""
    unknown = sorted(set(cfg) - set(_KEYS))
    if unknown:
        raise DataConfigError(
            f"dataset config has unknown key(s) {unknown}; allowed: {list(_KEYS)}"
        )
    out = {k: cfg.get(k) for k in _KEYS}
    out["options"] = dict(cfg.get("options") or {})
    return out


def load_examples(cfg: Mapping, split: str) -> list[Example]:
    """``load_split`` with the settings of the ``dataset`` config; errors name ``dataset.*``."""
    limit = check_limit(cfg.get(f"limit_{split}"), f"dataset.limit_{split}")
    try:
        return load_split(
            cfg["name"],
            split,
            data_dir=cfg.get("data_dir"),
            hub_name=cfg.get("hub_name"),
            seed=int(cfg.get("seed", 0)),
            limit=limit,
            **dict(cfg.get("options") or {}),
        )
    except DataConfigError as e:
        raise type(e)(f"dataset={cfg.get('name')} ({split} split): {e}") from e


class SkipDataModule(pl.LightningDataModule):
    """Encoded train/validation splits and right-padded batches (``TrainCollator``).

    ``prepare()`` loads and encodes eagerly so the caller knows the median target length and
    the truncation reports before the model is built; ``setup`` then has nothing left to do.
    """

    def __init__(
        self,
        dataset: Mapping,
        tokenizer: Any,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        train_examples: list[Example] | None = None,
    ):
        super().__init__()
        self.cfg = dataset_settings(dataset)
        self.task = get_task(self.cfg["name"])
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size or batch_size)
        self.num_workers = int(num_workers)
        self._train_examples = train_examples
        self.train_set: list[EncodedExample] | None = None
        self.val_set: list[EncodedExample] | None = None
        self.reports: dict[str, TruncationReport] = {}
        self.expected_length: int | None = None
        self.validation_lengths: list[int] | None = None
        self._sampler: ResumableSampler | None = None
        self._resume_order: dict[str, Any] | None = None

    def _encode(self, examples: list[Example], split: str) -> list[EncodedExample]:
        max_source = self.cfg.get("max_source_tokens") or self.task.max_source_tokens
        max_target = self.cfg.get("max_target_tokens") or self.task.max_target_tokens
        try:
            encoded, report = encode_examples(
                self.tokenizer,
                examples,
                self.task,
                int(max_source),
                int(max_target),
                on_long_target=self.cfg.get("on_long_target") or "truncate",
            )
        except DataConfigError as e:
            raise type(e)(f"dataset={self.cfg['name']} ({split} split): {e}") from e
        self.reports[split] = report
        log.info(
            "dataset %s/%s: %d examples; %s",
            self.cfg["name"],
            split,
            len(encoded),
            report.summary(),
        )
        if not encoded:
            raise DataConfigError(
                f"dataset={self.cfg['name']} ({split} split): no examples left after "
                f"on_long_target={report.policy!r} ({report.summary()})"
            )
        return encoded

    def prepare(self) -> SkipDataModule:
        if self.train_set is not None:
            return self
        train = self._train_examples or load_examples(self.cfg, "train")
        val = load_examples(self.cfg, "validation")
        # The expected generation length of `target` schedules: the training split's median
        # target length in tokens (EOS included), before truncation.
        self.expected_length = median_target_length(train, self.tokenizer, task=self.task)
        # ... and every validation target length, for `target` schedules fitted to them
        self.validation_lengths = target_lengths(val, self.tokenizer, task=self.task)
        self.train_set = self._encode(train, "train")
        self.val_set = self._encode(val, "validation")
        return self

    def setup(self, stage: str | None = None) -> None:
        self.prepare()

    def truncation_summary(self) -> dict[str, dict[str, Any]]:
        return {split: report.as_dict() for split, report in self.reports.items()}

    def _loader(
        self, data: list[EncodedExample], batch_size: int, sampler: Sampler | None = None
    ) -> DataLoader:
        return DataLoader(
            data,  # type: ignore[arg-type]  # a list is a map-style dataset
            batch_size=batch_size,
            sampler=sampler,
            collate_fn=TrainCollator(self.tokenizer),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            # worker seeds from the loader's own generator: iterating never consumes the global
            # random stream (see training.resumable)
            generator=torch.Generator().manual_seed(torch.initial_seed()),
        )

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None
        self._sampler = ResumableSampler(len(self.train_set))
        resume = self._resume_order
        world, rank = self._devices()
        if resume and resume.get("batch") not in (None, self.batch_size * world):
            raise ValueError(
                f"resuming a run that trained with a global batch of {resume['batch']} rows "
                f"with loader.batch_size={self.batch_size} x {world} device(s) = "
                f"{self.batch_size * world}: the checkpoint's place in the epoch is counted in "
                "its own batches; set loader.batch_size and trainer.devices to match, or start "
                "over (ckpt_path=null)"
            )
        if resume and resume.get("seed") is not None:
            if resume["size"] != len(self.train_set):
                log.warning(
                    "resuming with %d training examples where the checkpoint had %d: the "
                    "epoch's order cannot be continued, a new one starts",
                    len(self.train_set),
                    resume["size"],
                )
            elif resume["trained"] < len(self.train_set):  # else the epoch ended: a fresh one
                self._sampler.resume(resume["seed"], resume["trained"])
        self._resume_order = None
        if world == 1:
            return self._loader(self.train_set, self.batch_size, self._sampler)
        # each device its share of every global batch (trainer.use_distributed_sampler is off:
        # Lightning's own would reshuffle the order between devices)
        return self._loader(self.train_set, self.batch_size, RankShare(self._sampler, rank, world))

    def _devices(self) -> tuple[int, int]:
        """(data-parallel devices, this one's rank): (1, 0) outside a distributed run."""
        trainer = self.trainer
        if trainer is None or trainer.world_size <= 1:
            return 1, 0
        if trainer._accelerator_connector.use_distributed_sampler:
            raise ValueError(
                "trainer.use_distributed_sampler=true: Lightning would split each device's share "
                "again; leave it false (the datamodule shares the data between devices itself)"
            )
        return trainer.world_size, trainer.global_rank

    def val_dataloader(self) -> DataLoader:
        """The whole validation split on every device: the summed losses count it once per
        device and their ratio, the loss, is the single-process one (a share per device would
        need padding, which would count some examples twice)."""
        assert self.val_set is not None
        return self._loader(self.val_set, self.eval_batch_size)

    # Lightning keeps these in the checkpoint and hands them back on resume (before the loaders
    # are built): the epoch's order and how far training got in it.
    def state_dict(self) -> dict[str, Any]:
        if self._sampler is None or self.trainer is None:
            return {}
        loop = self.trainer.fit_loop.epoch_loop
        world, _ = self._devices()
        return {
            "order": order_state(
                self._sampler, loop.batch_progress.current.processed, self.batch_size * world
            )
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_order = dict(state_dict.get("order") or {}) or None
