"""Sharded fine-tuning (``trainer=fsdp``: FSDP2, training.sharding), exercised on a CPU with two
processes over gloo: the sharded run trains on the single-process run's data with the same
global batch and ends at its loss; its export decodes the single-process export's greedy
tokens; and a sharded run that crashed resumes from its checkpoint to where an uninterrupted one
ends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_utils import make_cfg

from skipdecode.core.engine import SkipDecoder
from skipdecode.models.loading import load_pretrained_dir
from skipdecode.schedules import FullSchedule
from skipdecode.training.train import train

COMMON = [
    "model.arch.dropout=0.0",  # nothing random inside the forward pass
    "dataset.options.num_train=64",
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
    "callbacks.last_checkpoint.every_n_train_steps=2",
]
SHARDED = [
    "trainer=fsdp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.precision=32-true",
    "loader.batch_size=8",  # x 2 devices: the single-process run's 16
]
#: How far the sharded run's losses may end from the single-process run's: the same data and
#: weights, summed in another order (measured: 1.5e-6).
LOSS_TOLERANCE = 1e-4


def _losses(run: Path) -> dict[str, list[float]]:
    import csv

    rows = list(csv.DictReader((run / "csv" / "metrics.csv").open()))
    return {key: [float(r[key]) for r in rows if r.get(key)] for key in ("train/loss", "val/loss")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shard")
    out = {"single": root / "single", "sharded": root / "sharded", "resumed": root / "resumed"}
    train(make_cfg(out["single"], COMMON))
    train(make_cfg(out["sharded"], COMMON + SHARDED))
    crash = ["+callbacks.crash._target_=train_utils.CrashAfter", "+callbacks.crash.step=3"]
    with pytest.raises(Exception, match="simulated crash"):
        train(make_cfg(out["resumed"], COMMON + SHARDED + crash))
    train(make_cfg(out["resumed"], COMMON + SHARDED + ["ckpt_path=last"]))
    return out


def test_shard_run_ends_at_the_single_process_loss(runs):
    single, sharded = _losses(runs["single"]), _losses(runs["sharded"])
    for key in ("train/loss", "val/loss"):
        assert len(sharded[key]) == len(single[key]) > 0, key
        assert sharded[key] == pytest.approx(single[key], abs=LOSS_TOLERANCE), key
    info = json.loads((runs["sharded"] / "metrics.json").read_text())
    assert info["metrics"]["global_step"] == 4
    assert info["memory_plan"]["strategy"] == "fsdp" and info["memory_plan"]["devices"] == 2


def test_shard_export_decodes_the_single_process_tokens(runs):
    """The sharded run's checkpoint is a full state dict: it exports as an ordinary transformers
    directory whose greedy tokens are the single-process export's."""
    outputs = []
    for name in ("single", "sharded"):
        model, tokenizer, _ = load_pretrained_dir(runs[name] / "export")
        dec = SkipDecoder(model, tokenizer)
        prompts = ["a b c", "the first example of the set", "x y"]
        out = dec.generate(prompts, FullSchedule(dec.num_layers), 12, eos_token_id=[])
        outputs.append(out.generated_ids)
    assert torch.equal(outputs[0], outputs[1])


def test_shard_crashed_run_resumes_to_where_an_uninterrupted_one_ends(runs):
    resumed, sharded = _losses(runs["resumed"]), _losses(runs["sharded"])
    assert resumed["val/loss"] == pytest.approx(sharded["val/loss"], abs=1e-6)
    assert resumed["train/loss"][-1] == pytest.approx(sharded["train/loss"][-1], abs=1e-6)
    first = torch.load(runs["sharded"] / "checkpoints" / "last.ckpt", weights_only=False)
    again = torch.load(runs["resumed"] / "checkpoints" / "last.ckpt", weights_only=False)
    assert first["global_step"] == again["global_step"] == 4
    for key, value in first["state_dict"].items():
        assert torch.allclose(value, again["state_dict"][key], atol=1e-6), key
