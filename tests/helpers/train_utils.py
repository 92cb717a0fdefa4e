"""Helpers for the training tests: composing the real configs, shrunk for CPU."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from skipdecode.config import config_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

CONF = config_dir()
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
SHARED_E2E = (CONF.parent / ".." / "shared" / "data" / "e2e").resolve()

# A smaller tiny model and data for fast tests (same architecture family and layer count).
FAST = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "logger=csv",
    "model.arch.hidden_size=64",
    "model.arch.word_embed_proj_dim=64",
    "model.arch.ffn_dim=128",
    "model.tokenizer.vocab_size=512",
    "dataset.options.num_train=300",
    "dataset.options.num_validation=20",
    "dataset.options.num_test=10",
    "loader.batch_size=16",
]


def make_cfg(output_dir: Path, overrides: Sequence[str] = (), fast: bool = True) -> DictConfig:
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return compose(
            config_name="train",
            overrides=[f"paths.output_dir={output_dir}", *(FAST if fast else []), *overrides],
        )


def write_summaries(directory: Path, source_field: str, target_field: str, n: int = 12) -> Path:
    """Tiny local Reddit/CNN-style files (one JSONL per split)."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "train"), ("validation", "valid"), ("test", "test")):
        with (directory / f"{name}.jsonl").open("w") as f:
            for i in range(n):
                text = f"post {i} about the {split} split. " * 3
                f.write(
                    json.dumps({source_field: text, target_field: f"summary {i} of {split}"}) + "\n"
                )
    return directory


def write_e2e(directory: Path, n: int = 12, columns: tuple[str, str] = ("mr", "ref")) -> Path:
    """Tiny E2E-style CSVs (devset.csv, testset_w_refs.csv)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("devset.csv", "testset_w_refs.csv"):
        with (directory / name).open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            for i in range(n):
                for r in range(2):
                    w.writerow(
                        [f"name[Place {i}], area[riverside]", f"Place {i} is by the river {r}."]
                    )
    return directory


class CrashAfter(pl.Callback):
    """Simulates a killed run: raises after ``step`` optimizer steps."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            raise SimulatedCrash(f"simulated crash at step {trainer.global_step}")


class SimulatedCrash(RuntimeError):
    pass


class SlowDown(pl.Callback):
    """Sleeps after every training batch, so a test can kill the process mid-run."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        import time

        time.sleep(self.seconds)
