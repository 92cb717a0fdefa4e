"""Short real training runs: loss goes down (2x and full on synthetic data, 2x on real E2E), resume after a
crash, export + reload with transformers, DDP on 2 CPU processes, one Hydra multirun."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from offline_env import offline_env
from processes import kill_group_when
from train_utils import FAST, SHARED_E2E, SimulatedCrash, make_cfg
from transformers import AutoModelForCausalLM

from skipdecode.core.engine import SkipDecoder
from skipdecode.evaluation.inputs import load_model
from skipdecode.models.loading import load_pretrained_dir
from skipdecode.training.train import train

# 60 steps of a 64-wide tiny OPT on synthetic: val loss 6.26 -> 2.67 (target_2x; full 3.55).
SHORT = [
    "trainer.max_steps=60",
    "trainer.val_check_interval=60",
    "optimizer.lr=4.5e-3",
    "scheduler.warmup_steps=5",
    "callbacks.last_checkpoint.every_n_train_steps=30",
    "model.arch.hidden_size=64",
    "model.arch.word_embed_proj_dim=64",
    "model.arch.ffn_dim=256",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One 2x run (the full schedule's training is the resume test's, below)."""
    tmp = tmp_path_factory.mktemp("target_2x")
    metrics, objects = train(make_cfg(tmp, [*SHORT, "schedule=target_2x", "logger=many"]))
    return {"target_2x": (tmp, metrics, objects)}


def test_training_lowers_validation_loss(runs: dict) -> None:
    _, metrics, objects = runs["target_2x"]
    assert metrics["global_step"] == 60
    assert metrics["val/loss"] < 0.5 * metrics["val_start/loss"], metrics
    assert metrics["train/tokens_per_s_mean"] > 0
    desc = objects["schedule"]
    assert desc["name"] == "linear" and desc["num_layers"] == 8
    assert desc["decay_tokens"] == objects["run_info"]["expected_length"]
    assert "val/loss_full" in metrics  # the cost of skipping, measured with every layer


def test_a_checkpoint_given_to_the_evaluation_loads_the_weights_it_exported(
    runs: dict, tmp_path: Path
) -> None:
    """``checkpoint=<a .ckpt>``: the evaluation exports it first (Lightning is imported for that
    alone) and decodes the weights the run exported from that checkpoint."""
    _, _, objects = runs["target_2x"]
    loaded = load_model(objects["best_ckpt"], tmp_path, "cpu")
    assert loaded.source == "checkpoint" and loaded.path == tmp_path / "model"
    exported, _, meta = load_pretrained_dir(Path(objects["export_dir"]))
    assert loaded.meta["schedule"] == meta["schedule"]
    mine, theirs = loaded.model.state_dict(), exported.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)


def test_wandb_offline_run_is_written_into_output_dir(runs: dict) -> None:
    tmp, _, _ = runs["target_2x"]
    assert list((tmp / "wandb").glob("offline-run-*")), sorted(p.name for p in tmp.iterdir())
    assert (tmp / "csv" / "metrics.csv").is_file()


def test_export_reloads_with_transformers_and_identical_logits(runs: dict) -> None:
    tmp, metrics, objects = runs["target_2x"]
    export = Path(objects["export_dir"])
    assert export == tmp / "export"
    model, tokenizer, meta = load_pretrained_dir(export)
    assert meta["schedule"] == objects["schedule"]
    assert meta["expected_length"] == objects["run_info"]["expected_length"]
    assert meta["dataset"]["name"] == "synthetic"
    assert meta["metrics"]["val/loss"] == pytest.approx(metrics["val/loss"])
    hf = AutoModelForCausalLM.from_pretrained(str(export)).eval()

    module = objects["module"]
    from skipdecode.training.export import load_module

    best = load_module(objects["best_ckpt"])  # the checkpoint that was exported
    enc = tokenizer(["name[The Eagle], food[French]\nDescription: The Eagle"], return_tensors="pt")
    with torch.no_grad():
        ref = best.eval()(enc["input_ids"], enc["attention_mask"])  # full-schedule forward
        ours = SkipDecoder(model).forward(enc["input_ids"], enc["attention_mask"])
        theirs = hf(**enc).logits
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(theirs, ref, rtol=1e-5, atol=1e-4)
    assert type(module.model) is type(model)


def test_resumed_run_trains_the_model_an_uninterrupted_run_trains(tmp_path: Path) -> None:
    """Crash after step 13 (last checkpoint at 12, mid-epoch: 19 batches an epoch), resume to
    24 (across the epoch's end): the weights equal an uninterrupted run's, bit for bit. The
    tiny model has dropout, so the random stream must continue too, not only the data order."""
    over = [
        "trainer.max_steps=24",
        "trainer.val_check_interval=6",
        "callbacks.last_checkpoint.every_n_train_steps=6",
    ]
    crash = ["+callbacks.crash._target_=train_utils.CrashAfter", "+callbacks.crash.step=13"]
    straight, straight_objects = train(make_cfg(tmp_path / "straight", over))
    assert straight_objects["fit"]["resumed_from"] is None
    assert straight_objects["fit"]["before_resume"] == 0.0 < straight_objects["fit"]["seconds"]
    # the full schedule learns too (seeded: 6.26 -> 5.46 in these 24 steps at the default lr)
    assert straight["val/loss"] < 0.9 * straight["val_start/loss"], straight
    with pytest.raises(SimulatedCrash):
        train(make_cfg(tmp_path / "resumed", [*over, *crash]))
    last = tmp_path / "resumed" / "checkpoints" / "last.ckpt"
    at_12 = torch.load(last, weights_only=True)
    assert at_12["global_step"] == 12
    reached = at_12["callbacks"]["TrainingClock"]["seconds"]  # the crashed attempt's 12 steps
    resumed, objects = train(make_cfg(tmp_path / "resumed", [*over, "ckpt_path=last"]))
    fit = objects["fit"]  # its training time counts the crashed attempt's 12 steps too
    assert fit["resumed_from"] == str(last) and fit["before_resume"] == reached > 0
    assert fit["seconds"] > reached
    assert resumed["global_step"] == straight["global_step"] == 24
    assert objects["export_dir"]
    weights = [
        torch.load(d / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        for d in (tmp_path / "straight", tmp_path / "resumed")
    ]
    assert weights[0].keys() == weights[1].keys()
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name
    assert resumed["val/loss"] == straight["val/loss"]


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
@pytest.mark.skipif(
    not (SHARED_E2E / "devset.csv").is_file(),
    reason=f"real E2E files not found at {SHARED_E2E} (devset.csv)",
)
def test_short_run_on_real_e2e(tmp_path: Path) -> None:
    over = [
        *SHORT,
        "dataset=e2e",
        "dataset.limit_train=80",
        "dataset.limit_validation=10",
        "schedule=target_2x",
    ]
    cfg = make_cfg(tmp_path, [o for o in FAST if not o.startswith("dataset.")] + over, fast=False)
    assert Path(cfg.dataset.data_dir).resolve() == SHARED_E2E
    metrics, objects = train(cfg)
    assert metrics["val/loss"] < 0.6 * metrics["val_start/loss"], metrics
    assert objects["run_info"]["truncation"]["train"]["total"] > 0


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = offline_env()
    proc = subprocess.run(
        [sys.executable, "-m", "skipdecode.train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
def test_ddp_two_cpu_processes_one_output_dir(tmp_path: Path) -> None:
    _cli(
        [
            *FAST,
            f"paths.log_dir={tmp_path}",
            "trainer=ddp",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            "trainer.max_steps=4",
            "trainer.val_check_interval=2",
            "callbacks.last_checkpoint.every_n_train_steps=2",
        ],
        cwd=tmp_path,
    )
    runs = list((tmp_path / "train" / "runs").iterdir())
    assert len(runs) == 1, runs  # Hydra + DDP made exactly one output directory
    result = json.loads((runs[0] / "metrics.json").read_text())
    assert result["metrics"]["global_step"] == 4
    assert (runs[0] / "export" / "skipdecode.json").is_file()


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
def test_hydra_multirun_over_experiments(tmp_path: Path) -> None:
    _cli(
        [
            "-m",
            "experiment=demo_full,demo_4x",
            f"paths.log_dir={tmp_path}",
            "+trainer.fast_dev_run=1",
            *[o for o in FAST if o.startswith(("model.", "dataset.", "trainer."))],
        ],
        cwd=tmp_path,
    )
    jobs = sorted((p for p in tmp_path.glob("*/multiruns/*/*") if p.is_dir()), key=lambda p: p.name)
    assert [p.parent.parent.parent.name for p in jobs] == ["demo_full", "demo_4x"], jobs
    assert all((p / "metrics.json").is_file() for p in jobs)


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
def test_sigkilled_run_resumes_with_its_whole_metrics_history(tmp_path: Path) -> None:
    """A real SIGKILL after the first checkpoints, then ``ckpt_path=last`` in the same run dir:
    the run ends at the right step and metrics.csv still holds the history before the kill."""
    run_dir = tmp_path / "run"
    args = [
        *FAST,
        "logger=many",  # csv + wandb (offline): both must continue the same run
        f"hydra.run.dir={run_dir}",
        "trainer.max_steps=30",
        "trainer.val_check_interval=5",
        "callbacks.last_checkpoint.every_n_train_steps=5",
    ]
    env = offline_env(
        PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1] / "helpers"), *sys.path])
    )
    slow = ["+callbacks.slow._target_=train_utils.SlowDown", "+callbacks.slow.seconds=0.3"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "skipdecode.train", *args, *slow],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a scheduler's job
    )
    last = run_dir / "checkpoints" / "last.ckpt"

    def checkpointed_ten_steps() -> bool:
        try:
            return last.is_file() and torch.load(last, weights_only=True)["global_step"] >= 10
        except (EOFError, RuntimeError):  # caught mid-write; the next poll sees it whole
            return False

    kill_group_when(proc, checkpointed_ten_steps, timeout=240)
    killed_at = torch.load(last, weights_only=True)["global_step"]
    assert 10 <= killed_at < 30
    with (run_dir / "csv" / "metrics.csv").open() as f:
        before = list(csv.DictReader(f))
    assert any(r.get("val_start/loss") for r in before)  # logged before the kill

    _cli([*args, "ckpt_path=last"], cwd=tmp_path)
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert metrics["global_step"] == 30
    with (run_dir / "csv" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sum(bool(r.get("val_start/loss")) for r in rows) == 1  # kept, not logged twice
    val_steps = [int(float(r["step"])) for r in rows if r.get("val/loss")]
    assert min(val_steps) < killed_at <= max(val_steps)  # validation before and after the kill
    train_steps = [int(float(r["step"])) for r in rows if r.get("train/loss")]
    assert len(train_steps) == len(set(train_steps))  # no step logged twice
    assert min(train_steps) < killed_at and max(train_steps) >= 29  # logged every 10 steps
    # W&B: both attempts wrote to the same run id
    ids = {p.name.rsplit("-", 1)[-1] for p in (run_dir / "wandb").glob("offline-run-*")}
    assert len(ids) == 1, ids
