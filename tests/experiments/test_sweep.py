"""Sweeps: a fast multirun (train + evaluate per cell, one failing cell, aggregate table and plot,
resume), aggregation of an interrupted sweep, and cell identity."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from exports import compose, make_fake_sweep

from skipdecode.evaluation.evaluate import evaluate
from skipdecode.experiments.aggregate import aggregate
from skipdecode.experiments.aggregate import main as aggregate_main
from skipdecode.experiments.sweep import cell_identity, planned_jobs
from skipdecode.experiments.table import collect

ROOT = Path(__file__).resolve().parents[2]

# The tiny model and data shrunk so that one cell trains and evaluates in seconds.
SHRINK = [
    "model=tiny",
    "dataset=synthetic",
    "trainer=cpu",
    "logger=csv",
    "eval=fast",
    "model.arch.hidden_size=32",
    "model.arch.word_embed_proj_dim=32",
    "model.arch.ffn_dim=64",
    "model.tokenizer.vocab_size=300",
    "dataset.options.num_train=40",
    "dataset.options.num_validation=4",
    "dataset.options.num_test=6",
    "data.batch_size=4",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "module.validate_full=false",
    "eval.limit=4",
    "eval.generation.batch_size=2",
    "eval.generation.max_new_tokens=8",
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        OMP_NUM_THREADS="1",  # no thread oversubscription when other jobs share the CPU
        PYTHONPATH=str(ROOT / "src"),
    )
    return env


def _sweep(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "skipdecode.sweep",
        "-m",
        *SHRINK,
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"sweep.cells_dir={tmp_path / 'cells'}",
        f"paths.log_dir={tmp_path / 'logs'}",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)


def test_multirun_trains_evaluates_aggregates_and_resumes(tmp_path):
    # Two real cells and one whose schedule does not fit the 8-layer model (it must fail alone).
    proc = _sweep(tmp_path, "schedule=full,target_2x,skipdecode_2x_24l", "wandb.enabled=true")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = tmp_path / "sweep"
    rows = list(csv.DictReader((sweep / "results.csv").open()))
    by_schedule = {r["schedule"]: r for r in rows}
    assert [r["job"] for r in rows] and len(rows) == 3
    assert by_schedule["full"]["status"] == "ok" and by_schedule["target_2x"]["status"] == "ok"
    assert by_schedule["skipdecode_2x_24l"]["status"] == "failed"
    assert "24" in by_schedule["skipdecode_2x_24l"]["error"]
    for name in ("full", "target_2x"):
        row = by_schedule[name]
        for col in (
            "theoretical_speedup",
            "measured_speedup_decode",
            "bleu",
            "rougeL",
            "tokens_per_second",
        ):
            assert row[col] != "", (name, col)
    assert float(by_schedule["target_2x"]["theoretical_speedup"]) > 1.0
    assert float(by_schedule["full"]["target_speedup"]) == 1.0
    assert (sweep / "results.md").read_text().count("\n| ") == 3
    assert (sweep / "quality_vs_speedup_synthetic.png").stat().st_size > 0
    assert "| ok |" in proc.stdout and "quality_vs_speedup_synthetic.png" in proc.stdout

    # Complete records from trained models, generations beside them.
    cell = json.loads((sweep / "1" / "cell.json").read_text())
    record = json.loads(Path(cell["record"]).read_text())
    assert record["model"]["source"] == "export" and record["schedule"]["origin"] == "checkpoint"
    assert record["train_meta"]["dataset"]["name"] == "synthetic"
    assert (Path(cell["record"]).parent / "generations.jsonl").is_file()
    assert record["provenance"]["packages"]["torch"]
    # W&B: one offline run per evaluated cell (group = sweep dir name) plus the aggregate run.
    assert list((Path(cell["record"]).parent / "wandb").glob("offline-run-*"))
    assert list((sweep / "wandb").glob("offline-run-*"))

    # evaluate() also takes the Lightning checkpoint itself (exported on the fly).
    ckpt = next(Path(cell["cell_dir"]).glob("train/checkpoints/best*.ckpt"))
    rec = evaluate(
        compose(
            "evaluate",
            [
                f"checkpoint={ckpt}",
                f"output_dir={tmp_path / 'from_ckpt'}",
                "eval=fast",
                "data.limit=2",
                "eval.generation.max_new_tokens=4",
                "eval.speed.baseline=null",
            ],
        )
    )
    assert rec["model"]["source"] == "checkpoint" and rec["schedule"]["origin"] == "checkpoint"

    # Resume: the same sweep again reuses the finished cells' training and evaluation.
    proc2 = _sweep(tmp_path, "schedule=full,target_2x")
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    cell = json.loads((sweep / "1" / "cell.json").read_text())
    assert cell["status"] == "ok" and cell["train_reused"] and cell["eval_reused"]


def test_aggregate_interrupted_sweep(tmp_path, capsys):
    sweep = make_fake_sweep(tmp_path / "sweep")
    rows = collect(sweep)
    status = {r["job"]: r["status"] for r in rows}
    assert status == {
        "0": "ok",
        "1": "ok",
        "2": "ok",
        "3": "failed",
        "4": "interrupted",
        "5": "pending",
    }
    assert "schedule=target_3x" in next(r for r in rows if r["job"] == "5")["error"]
    result = aggregate(sweep)
    assert result["counts"] == {"ok": 3, "failed": 1, "interrupted": 1, "pending": 1}
    assert [p.name for p in result["plots"]] == ["quality_vs_speedup_synthetic.png"]
    assert aggregate_main([str(sweep), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "| failed |" in out and "| pending |" in out and "cells: failed=1" in out


def test_aggregate_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        collect(tmp_path / "nope")


def test_cell_identity_tracks_training_config_only():
    base = {
        "model": {"name": "tiny"},
        "dataset": {"name": "synthetic"},
        "schedule": {"name": "full"},
        "trainer": {"max_steps": 10},
        "seed": 1,
        "eval": {"limit": 3},
        "paths": {"output_dir": "/a"},
    }
    same = {**base, "eval": {"limit": 9}, "paths": {"output_dir": "/b"}}
    other = {**base, "schedule": {"name": "target", "target_speedup": 2}}
    assert cell_identity(base)[0] == cell_identity(same)[0]
    assert cell_identity(base)[0] != cell_identity(other)[0]


def test_sweep_config_composes_and_plans_jobs():
    cfg = compose("sweep", ["schedule=target_2x"], return_hydra_config=True)
    assert cfg.eval.generation.do_sample is False
    assert (
        cfg.hydra.callbacks.aggregate._target_ == "skipdecode.experiments.sweep.AggregateCallback"
    )
    cfg.hydra.overrides.task = ["schedule=full,target_2x", "dataset=synthetic,e2e"]
    jobs = planned_jobs(cfg)
    assert [j["num"] for j in jobs] == [0, 1, 2, 3]
    assert jobs[0]["overrides"] == ["schedule=full", "dataset=synthetic"]


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=sweep_demo"],
        ["experiment=sweep_e2e_tiny", "schedule=target_3x"],
        ["experiment=sweep_e2e_smollm2", "schedule=target_2x"],
        ["experiment=paper_opt1.3b_e2e", "schedule=skipdecode_3x_24l", "eval=paper"],
        ["experiment=paper_opt6.7b_cnn_dm", "schedule=skipdecode_5x_32l", "eval=paper"],
    ],
)
def test_sweep_experiments_compose(overrides):
    """The documented sweep commands compose; command-line schedule/eval win over experiments."""
    cfg = compose("sweep", overrides)
    for o in overrides:
        group, _, option = o.partition("=")
        if group == "schedule":
            assert cfg.schedule.get("target_speedup") == int(option.split("_")[1][0])
        if group == "eval" and option == "paper":
            assert cfg.eval.metrics.bertscore.model_type == "roberta-large"
    if "experiment=sweep_demo" in overrides:
        assert cfg.eval.limit == 100 and cfg.model.name == "tiny"
