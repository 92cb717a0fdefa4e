"""Sweeps: a fast multirun (train + evaluate per cell, one failing cell, aggregate table and plot,
resume), aggregation of an interrupted sweep, and cell identity."""

from __future__ import annotations

import csv
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from exports import SHRINK, compose, make_fake_sweep
from offline_env import offline_env
from processes import kill_group_when
from wandb_offline import read_offline_run

from skipdecode.evaluation.evaluate import evaluate
from skipdecode.experiments.sweeps.aggregate import aggregate
from skipdecode.experiments.sweeps.aggregate import main as aggregate_main
from skipdecode.experiments.sweeps.identity import cell_identity
from skipdecode.experiments.sweeps.publish import publish, restore
from skipdecode.experiments.sweeps.sweep import planned_jobs
from skipdecode.experiments.sweeps.table import collect

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return offline_env(
        OMP_NUM_THREADS="1",  # no thread oversubscription when other jobs share the CPU
        PYTHONPATH=str(ROOT / "src"),
    )


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
    rows = list(csv.DictReader((sweep / "cells.csv").open()))  # one row per cell
    by_schedule = {r["schedule"]: r for r in rows}
    assert [r["job"] for r in rows] and len(rows) == 3
    assert len({r["seed"] for r in rows if r["status"] == "ok"}) == 1  # the config's seed
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
    assert (sweep / "cells.md").read_text().count("\n| ") == 3
    # results: one row per schedule over its seeds (one seed here: a mean, no seed interval),
    # and the paired bootstrap difference against full on the same inputs
    results = {r["schedule"]: r for r in csv.DictReader((sweep / "results.csv").open())}
    assert set(results) == {"full", "target_2x", "skipdecode_2x_24l"}
    two = results["target_2x"]
    assert two["n_seeds"] == "1" and two["bleu_mean"] == by_schedule["target_2x"]["bleu"]
    assert two["bleu_ci95_low"] == "" and two["bleu_ci95_high"] == ""
    for metric in ("bleu", "rougeL"):
        low, delta, high = (
            float(two[f"{metric}_delta{p}"]) for p in ("_ci95_low", "", "_ci95_high")
        )
        assert low <= delta <= high, metric
    observed = float(two["bleu_mean"]) - float(results["full"]["bleu_mean"])
    assert float(two["bleu_delta"]) == pytest.approx(observed, abs=1e-6)
    assert results["full"]["bleu_delta"] == ""  # no difference of full against itself
    assert results["skipdecode_2x_24l"]["status"] == "failed"
    assert (sweep / "results.md").read_text().count("\n| ") == 3
    assert (sweep / "quality_vs_speedup_synthetic.png").stat().st_size > 0
    assert "| ok |" in proc.stdout and "quality_vs_speedup_synthetic.png" in proc.stdout

    # Complete records from trained models, generations beside them.
    cell = json.loads((sweep / "1" / "cell.json").read_text())
    assert 0 <= cell["lock_wait_seconds"] < cell["seconds"]  # alone: no wait to speak of
    record = json.loads(Path(cell["record"]).read_text())
    assert record["model"]["source"] == "export" and record["schedule"]["origin"] == "checkpoint"
    assert record["train_meta"]["dataset"]["name"] == "synthetic"
    assert (Path(cell["record"]).parent / "generations.jsonl").is_file()
    assert record["provenance"]["packages"]["torch"]
    # W&B: one offline run per evaluated cell (group = sweep dir name) plus the aggregate run.
    (cell_run,) = (Path(cell["record"]).parent / "wandb").glob("offline-run-*")
    logged = read_offline_run(cell_run)
    assert logged["group"] == "sweep" and logged["job_type"] == "evaluate"
    labels = {k: logged["config"][k] for k in ("model", "dataset", "schedule", "method", "seed")}
    assert labels == {
        "model": "tiny",
        "dataset": "synthetic",
        "schedule": "target_2x",
        "method": "skipdecode",
        "seed": 12345,
    }
    assert logged["config"]["target_speedup"] == 2.0 and logged["config"]["sweep_name"] == "sweep"
    assert logged["config"]["config.eval.generation.batch_size"] == 2  # flattened, dotted
    for key in ("bleu", "rougeL", "theoretical_speedup", "batch_speedup", "tokens_per_second"):
        assert f"eval/{key}" in logged["summary"], key
    assert logged["summary"]["eval/bleu"] == pytest.approx(float(by_schedule["target_2x"]["bleu"]))
    (sweep_run,) = (sweep / "wandb").glob("offline-run-*")
    logged = read_offline_run(sweep_run)
    assert logged["job_type"] == "aggregate" and logged["config"]["sweep_name"] == "sweep"
    history = logged["history"]
    assert history["sweep/cells/nrows"] == 3 and history["sweep/results/nrows"] == 3
    assert history["sweep/quality_vs_speedup_synthetic/_type"] == "image-file"
    for metric in ("bleu_mean", "rougeL_mean", "bertscore_f1_mean"):
        chart = logged["config"].get(f"_wandb/visualize/sweep/{metric}_vs_speedup")
        if metric == "bertscore_f1_mean":  # eval=fast: no BERTScore, so no chart
            assert chart is None
            continue
        assert chart["panel_config"]["panelDefId"] == "wandb/lineseries/v0", metric
        assert "measured speedup decode" in chart["panel_config"]["stringSettings"]["title"]

    # evaluate() also takes the Lightning checkpoint itself (exported on the fly).
    ckpt = next(Path(cell["cell_dir"]).glob("train/checkpoints/best*.ckpt"))
    rec = evaluate(
        compose(
            "evaluate",
            [
                f"checkpoint={ckpt}",
                f"output_dir={tmp_path / 'from_ckpt'}",
                "eval=fast",
                "eval.limit=2",
                "eval.generation.max_new_tokens=4",
                "eval.speed.baseline=null",
            ],
        )
    )
    assert rec["model"]["source"] == "checkpoint" and rec["schedule"]["origin"] == "checkpoint"

    # Resume: the same sweep again finds the finished cells (training and evaluation reused),
    # and each job keeps its account of how its cell was made, with when it was found again.
    made = json.loads((sweep / "1" / "cell.json").read_text())
    proc2 = _sweep(tmp_path, "schedule=full,target_2x")
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    cell = json.loads((sweep / "1" / "cell.json").read_text())
    assert not made["train_reused"] and not made["eval_reused"]
    assert cell == {**made, "found_again": cell["found_again"]} and cell["found_again"]


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
def test_published_sweep_reruns_on_a_fresh_machine_and_repeats_exactly(tmp_path):
    proc = _sweep(tmp_path, "schedule=full,target_2x")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = tmp_path / "sweep"
    by_schedule = {r["schedule"]: r for r in csv.DictReader((sweep / "cells.csv").open())}
    # Published, restored into an empty cells directory (a fresh machine) and rerun: the
    # restored evaluations are the cells, nothing trains again, the table is the same.
    # this checkout may be dirty and the machine busy: each refusal has its own test
    published = publish(
        sweep, tmp_path / "results" / "run", aggregate, allow_dirty=True, allow_busy=True
    )
    assert len(restore(published, tmp_path / "fresh" / "cells")) == 2
    assert restore(published, tmp_path / "fresh" / "cells") == []  # already there
    fresh = _sweep(tmp_path / "fresh", "schedule=full,target_2x")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    for job in ("0", "1"):
        cell = json.loads((tmp_path / "fresh" / "sweep" / job / "cell.json").read_text())
        assert cell["status"] == "ok" and cell["eval_reused"] and cell["export"] is None
        assert not (Path(cell["cell_dir"]) / "train").exists()
    fresh_rows = {
        r["schedule"]: r
        for r in csv.DictReader((tmp_path / "fresh" / "sweep" / "cells.csv").open())
    }
    for name in ("full", "target_2x"):
        for key in ("cell_id", "bleu", "rougeL", "theoretical_speedup"):
            assert fresh_rows[name][key] == by_schedule[name][key], (name, key)

    # Same config, same seed, same machine, nothing reused: identical metrics.
    again = _sweep(tmp_path / "again", "schedule=target_2x")
    assert again.returncode == 0, again.stderr[-3000:]
    (rerun,) = list(csv.DictReader((tmp_path / "again" / "sweep" / "cells.csv").open()))
    first = by_schedule["target_2x"]
    assert rerun["cell_id"] == first["cell_id"]
    for key in ("bleu", "rougeL", "theoretical_speedup", "mean_generated_length"):
        assert rerun[key] == first[key], key


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


def test_tables_name_the_cells_whose_record_keeps_no_diff(tmp_path):
    sweep = make_fake_sweep(tmp_path / "sweep")
    aggregate(sweep, plots=False)
    assert "no diff" not in (sweep / "results.md").read_text()
    path = sweep / "cells" / "target_2x" / "eval" / "record.json"
    record = json.loads(path.read_text())
    record["provenance"] = {"git": {"commit": "abc123", "dirty": True}}
    path.write_text(json.dumps(record))
    aggregate(sweep, plots=False)
    for page in ("results.md", "cells.md"):
        text = (sweep / page).read_text()
        assert "\nJob 1 (1 of 6) was written from a checkout with uncommitted changes" in text
    record["provenance"]["git"]["diff"] = "+x = 2"
    path.write_text(json.dumps(record))
    aggregate(sweep, plots=False)
    assert "no diff" not in (sweep / "cells.md").read_text()


def test_aggregate_missing_dir(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        collect(tmp_path / "nope")
    from skipdecode.experiments.sweeps.aggregate import main as aggregate_main

    for given in (tmp_path / "nope", tmp_path):  # missing, and a folder of no sweep
        with pytest.raises(SystemExit):
            aggregate_main([str(given)])
        assert f"sweep_dir {str(given)!r} holds no <job>/cell.json" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no empty tables written into it


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
        cfg.hydra.callbacks.aggregate._target_
        == "skipdecode.experiments.sweeps.sweep.AggregateCallback"
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
        ["experiment=e2e_smollm2", "schedule=target_5x", "seed=2"],
        ["experiment=e2e_smollm2", "schedule=speculative_4x"],
        ["experiment=paper_opt1.3b_e2e", "schedule=skipdecode_3x_24l", "eval=paper"],
        ["experiment=paper_opt6.7b_cnn_dm", "schedule=skipdecode_5x_32l", "eval=paper"],
    ],
)
def test_sweep_experiments_compose(overrides):
    """The documented sweep commands compose; command-line schedule/eval win over experiments."""
    cfg = compose("sweep", overrides)
    for o in overrides:
        group, _, option = o.partition("=")
        if group == "schedule" and option.startswith("speculative"):
            assert cfg.schedule.draft.target_speedup == int(option.split("_")[1][0])
        elif group == "schedule":
            assert cfg.schedule.get("target_speedup") == int(option.split("_")[1][0])
        if group == "eval" and option == "paper":
            assert cfg.eval.metrics.bertscore.model_type == "roberta-large"
    if "experiment=sweep_demo" in overrides:
        assert cfg.eval.limit == 100 and cfg.model.name == "tiny"
    if "experiment=e2e_smollm2" in overrides:  # the headline: the whole test set, timed subset
        assert cfg.eval.limit is None and cfg.eval.split == "test"
        assert cfg.eval.speed.timed_batches == 2 and cfg.model.name == "smollm2-135m"


def _seed_cell(sweep: Path, job: int, schedule: str, seed: int, bleu: float, outputs, rouge):
    """A finished cell with a record and per-input scores, as a real sweep leaves it."""
    rec_dir = sweep / "cells" / f"{schedule}-{seed}"
    rec_dir.mkdir(parents=True)
    refs = [["the pub is cheap", "a cheap pub"], ["a french place"], ["it is near the river"]]
    rows = [
        {
            "index": i,
            "input": f"mr{i}",
            "references": refs[i],
            "output": outputs[i],
            "scores": {"rougeL": rouge[i]},
        }
        for i in range(3)
    ]
    (rec_dir / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = {
        "summary": {"bleu": bleu, "rougeL": sum(rouge) / 3, "theoretical_speedup": 1.0},
        "quality": {"bleu": {"settings": {"tokenize": "13a", "lowercase": False}}},
        "files": {"generations": "generations.jsonl"},
    }
    (rec_dir / "record.json").write_text(json.dumps(record))
    (sweep / str(job)).mkdir(parents=True)
    cell = {
        "status": "ok",
        "model": "tiny",
        "dataset": "synthetic",
        "schedule": schedule,
        "method": "full" if schedule == "full" else "skipdecode",
        "target_speedup": 1.0 if schedule == "full" else 2.0,
        "seed": seed,
        "record": str(rec_dir / "record.json"),
    }
    (sweep / str(job) / "cell.json").write_text(json.dumps(cell))


def test_results_over_seeds_with_intervals_and_paired_bootstrap(tmp_path):
    sweep = tmp_path / "sweep"
    outputs = ["the pub is cheap", "a french place", "near the river"]
    job = 0
    for seed, bleu in zip((1, 2, 3), (30.0, 31.0, 32.0), strict=True):
        _seed_cell(sweep, job, "full", seed, 40.0, outputs, [0.5, 0.6, 0.7])
        # same outputs as full (BLEU difference 0), ROUGE-L 0.1 lower on every input
        _seed_cell(sweep, job + 1, "target_2x", seed, bleu, outputs, [0.4, 0.5, 0.6])
        job += 2
    result = aggregate(sweep, plots=False)
    rows = {r["schedule"]: r for r in result["results"]}
    two = rows["target_2x"]
    assert two["n_seeds"] == 3 and two["seeds"] == "1 2 3"
    # mean 31, sd 1, t(0.975, df=2) = 4.302653: half width 4.302653 / sqrt(3) = 2.484138
    assert two["bleu_mean"] == pytest.approx(31.0)
    assert two["bleu_ci95_low"] == pytest.approx(31.0 - 2.484138, abs=1e-5)
    assert two["bleu_ci95_high"] == pytest.approx(31.0 + 2.484138, abs=1e-5)
    assert two["bleu_delta"] == 0.0 and two["bleu_delta_ci95_low"] == 0.0
    assert two["rougeL_delta"] == pytest.approx(-0.1)
    assert two["rougeL_delta_ci95_low"] == pytest.approx(-0.1)
    assert two["rougeL_delta_ci95_high"] == pytest.approx(-0.1)
    assert rows["full"]["n_seeds"] == 3 and "bleu_delta" not in rows["full"]
    md = Path(result["markdown"]).read_text()
    assert "31.00 [28.52, 33.48]" in md and "-0.1000 [-0.1000, -0.1000]" in md
    header = next(csv.reader((sweep / "results.csv").open()))
    for metric in ("bleu", "rougeL", "bertscore_f1"):
        assert {f"{metric}_mean", f"{metric}_ci95_low", f"{metric}_ci95_high"} <= set(header)
    assert "n_seeds" in header


def test_paired_bootstrap_sees_a_real_difference():
    from skipdecode.evaluation.metrics.bootstrap import SystemPair, paired_bootstrap

    refs = [[f"the place number {i} is cheap and french"] for i in range(40)]
    good = [r[0] for r in refs]
    bad = [f"number {i} cheap" for i in range(40)]
    out = paired_bootstrap(
        [SystemPair(bad, good, {}, {})], refs, metrics=("bleu",), resamples=200, seed=1
    )
    d = out["bleu"]
    assert d["delta"] < 0 and d["ci95_high"] < 0  # clearly worse: the interval excludes 0
    assert d["ci95_low"] <= d["delta"] <= d["ci95_high"]


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
def test_sweep_killed_mid_cell_resumes_on_rerun(tmp_path):
    """SIGKILL a sweep while its second cell trains, then run the same sweep again: the finished
    cell is reused, the interrupted one resumes from its last.ckpt, and the table is complete."""
    import torch

    helpers = Path(__file__).resolve().parents[1] / "helpers"
    longer = [
        *(o for o in SHRINK if not o.startswith("trainer.max_steps=")),
        "trainer.max_steps=16",
        "callbacks.last_checkpoint.every_n_train_steps=2",
        "+callbacks.slow._target_=train_utils.SlowDown",
        "+callbacks.slow.seconds=0.4",
    ]
    cmd = [
        sys.executable,
        "-m",
        "skipdecode.sweep",
        "-m",
        *longer,
        "schedule=full,target_2x",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"sweep.cells_dir={tmp_path / 'cells'}",
        f"paths.log_dir={tmp_path / 'logs'}",
    ]
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(helpers), env["PYTHONPATH"]])
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a scheduler's job
    )

    def second_cell_step() -> int:
        cell = tmp_path / "sweep" / "1" / "cell.json"
        if not cell.is_file():
            return -1
        last = Path(json.loads(cell.read_text())["cell_dir"]) / "train/checkpoints/last.ckpt"
        if not last.is_file():
            return -1
        try:
            return int(torch.load(last, weights_only=True)["global_step"])
        except (EOFError, RuntimeError):  # caught mid-write; the next poll sees it whole
            return -1

    kill_group_when(proc, lambda: second_cell_step() >= 4, timeout=300)
    killed_at = second_cell_step()
    assert 4 <= killed_at < 16
    interrupted = {r["job"]: r["status"] for r in collect(tmp_path / "sweep")}
    assert interrupted["0"] == "ok" and interrupted["1"] != "ok"

    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    first = json.loads((tmp_path / "sweep" / "0" / "cell.json").read_text())
    assert first["found_again"] and not first["train_reused"]  # its account from the first run
    second = json.loads((tmp_path / "sweep" / "1" / "cell.json").read_text())
    assert second["status"] == "ok" and second["train_resumed"] and not second["train_reused"]
    done = json.loads((Path(second["cell_dir"]) / "train" / "metrics.json").read_text())
    assert done["metrics"]["global_step"] == 16  # resumed to the end, not restarted short
    rows = list(csv.DictReader((tmp_path / "sweep" / "cells.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["bleu"] != "" for r in rows)


def _table(sweep: Path) -> list[dict[str, str]]:
    """results.csv without the clock's columns (they differ between any two runs)."""
    clock = ("measured", "tokens_per_second")
    return [
        {k: v for k, v in row.items() if not any(c in k for c in clock)}
        for row in csv.DictReader((sweep / "results.csv").open())
    ]


def _outputs(sweep: Path) -> dict[str, list[str]]:
    """Every cell's generated texts, by schedule."""
    out = {}
    for cell_file in sweep.glob("*/cell.json"):
        cell = json.loads(cell_file.read_text())
        rows = (Path(cell["record"]).parent / "generations.jsonl").read_text().splitlines()
        out[cell["schedule"]] = [json.loads(r)["output"] for r in rows]
    return out


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
def test_parallel_launchers_make_the_basic_launchers_table(tmp_path):
    cells = ["schedule=full,target_2x", "eval.speed.baseline=null"]
    basic = _sweep(tmp_path / "basic", *cells)
    assert basic.returncode == 0, basic.stderr[-3000:]
    # joblib: both cells at once in 2 worker processes, sharing one cells directory
    joblib = _sweep(tmp_path / "joblib", *cells, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert joblib.returncode == 0, joblib.stderr[-3000:]
    assert "Joblib" in joblib.stdout + joblib.stderr  # the launcher really ran the jobs
    expected = _table(tmp_path / "basic" / "sweep")
    assert len(expected) == 2 and all(r["status"] == "ok" for r in expected)
    assert _table(tmp_path / "joblib" / "sweep") == expected
    assert _outputs(tmp_path / "joblib" / "sweep") == _outputs(tmp_path / "basic" / "sweep")
    # submitit_local: SLURM's code path (pickled job, submitit folder) without a cluster
    local = _sweep(
        tmp_path / "submitit",
        "schedule=target_2x",
        "eval.speed.baseline=null",
        "hydra/launcher=submitit_local",
    )
    assert local.returncode == 0, local.stderr[-3000:]
    assert list((tmp_path / "submitit" / "sweep" / ".submitit").glob("*/*_result.pkl"))
    (row,) = _table(tmp_path / "submitit" / "sweep")
    assert row == {k: v for k, v in expected[1].items() if "delta" not in k} | {
        k: ""
        for k in row
        if "delta" in k  # alone in its sweep: no full row to pair with
    }
    assert _outputs(tmp_path / "submitit" / "sweep") == {
        "target_2x": _outputs(tmp_path / "basic" / "sweep")["target_2x"]
    }


@pytest.mark.slow  # an end-to-end run of its own: make test-slow
def test_cells_sharing_a_trained_model_in_parallel_train_it_once(tmp_path):
    # two cells, one training config, two evaluations (eval.limit differs), run at once
    proc = _sweep(
        tmp_path,
        "schedule=target_2x",
        "eval.limit=3,4",
        "eval.speed.baseline=null",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "sweep.keep_checkpoints=false",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/cell.json"))]
    # keep_checkpoints=false: the export serves the second evaluation; checkpoints are gone
    cell_dir = Path(cells[0]["cell_dir"])
    assert not (cell_dir / "train" / "checkpoints").exists()
    assert all(Path(c["export"]).is_dir() for c in cells)
    assert [c["status"] for c in cells] == ["ok", "ok"]
    assert len({c["cell_dir"] for c in cells}) == 1  # the same trained cell
    assert sorted(c["train_reused"] for c in cells) == [False, True]  # trained once
    trainer, reuser = sorted(cells, key=lambda c: c["train_reused"])
    # the second waited for the first's training: its seconds say so, apart
    assert trainer["lock_wait_seconds"] < reuser["lock_wait_seconds"] < reuser["seconds"]
    assert len({c["record"] for c in cells}) == 2  # two evaluations


def test_dashboard_report_is_built_offline(capsys):
    from skipdecode.experiments.sweeps.dashboard import build_report
    from skipdecode.experiments.sweeps.dashboard import main as dashboard_main

    report = build_report("lab", "skipdecode", "compare")
    assert (report.entity, report.project, report.title) == (
        "lab",
        "skipdecode",
        "skipdecode: compare",
    )
    grids = [b for b in report.blocks if type(b).__name__ == "PanelGrid"]
    panels = [p for g in grids for p in g.panels]
    scatter = [p for p in panels if type(p).__name__ == "ScatterPlot"]
    assert [(p.x.name, p.y.name) for p in scatter] == [
        ("eval/measured_speedup_decode", f"eval/{m}") for m in ("bleu", "rougeL", "bertscore_f1")
    ]
    (parallel,) = [p for p in panels if type(p).__name__ == "ParallelCoordinatesPlot"]
    assert [c.metric.name for c in parallel.columns][:2] == ["method", "target_speedup"]
    tables = [p.table_name for p in panels if type(p).__name__ == "WeavePanelSummaryTable"]
    assert "sweep/results" in tables and "sweep/bleu_mean_vs_speedup_table" in tables
    cells = grids[0].runsets[0]  # the sweep's runs, one colour per method
    assert cells.groupby == ["config.method"]
    assert cells.filters == """Metric("Group") == 'compare'"""  # the sweep's W&B group
    assert dashboard_main(["lab/skipdecode", "compare", "--dry-run"]) == 0
    assert "ScatterPlot BLEU vs measured decode speedup" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        dashboard_main(["no-slash", "compare", "--dry-run"])


@pytest.mark.parametrize(("nodes", "gpus"), [(1, 8), (2, 4)])
def test_a_sharded_cell_on_slurm_composes_as_documented(nodes, gpus):
    """docs/PIPELINE.md's SLURM command for the 6.7B cells: one job per cell, its tasks the FSDP
    processes (nodes x GPUs per node = trainer.num_nodes x trainer.devices)."""
    from hydra import compose, initialize_config_dir

    overrides = [
        "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu",
        f"hydra.launcher.nodes={nodes}", f"hydra.launcher.gpus_per_node={gpus}",
        f"hydra.launcher.tasks_per_node={gpus}", "experiment=paper_opt6.7b_e2e",
        f"trainer.num_nodes={nodes}", f"trainer.devices={gpus}", "schedule=skipdecode_2x_32l",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=overrides, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"
    assert launcher.nodes * launcher.tasks_per_node == cfg.trainer.num_nodes * cfg.trainer.devices
    assert launcher.gpus_per_node == launcher.tasks_per_node == cfg.trainer.devices
    assert cfg.trainer.strategy._target_.endswith("sharding.ShardedStrategy")
    assert cfg.trainer.precision == "bf16-mixed" and cfg.model.gradient_checkpointing


def test_a_budget_sweep_trains_each_schedule_once_and_pairs_each_step_with_full(tmp_path):
    """``sweep.keep_steps`` keeps those steps' weights, ``sweep.eval_step`` evaluates one of
    them: each schedule trains once, each step is exported once and evaluated into its own row,
    and the results table pairs every row with ``full`` at the same steps."""
    proc = _sweep(
        tmp_path, "schedule=full,target_2x", "sweep.keep_steps=[1,2]", "sweep.eval_step=1,2"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep, cells = tmp_path / "sweep", tmp_path / "cells"
    rows = list(csv.DictReader((sweep / "cells.csv").open()))
    assert sorted((r["schedule"], r["train_steps"]) for r in rows) == [
        ("full", "1"), ("full", "2"), ("target_2x", "1"), ("target_2x", "2")
    ]  # fmt: skip
    assert all(r["status"] == "ok" for r in rows)
    trained = sorted(p.parent.parent.name.split("__")[2] for p in cells.glob("*/train/export"))
    assert trained == ["full", "target_2x"]  # one training per schedule
    for cell in cells.glob("*/train"):
        assert sorted(p.name for p in (cell / "step_checkpoints").iterdir()) == [
            "step-1.ckpt", "step-2.ckpt"
        ]  # fmt: skip
        assert (cell / "export-step1" / "config.json").is_file()
    records = {(r["schedule"], r["train_steps"]): r for r in rows}
    assert records[("full", "1")]["bleu"] != "" and records[("full", "2")]["cell_id"] == records[
        ("full", "1")
    ]["cell_id"]  # fmt: skip
    results = {
        (r["schedule"], r["train_steps"]): r for r in csv.DictReader((sweep / "results.csv").open())
    }
    for steps in ("1", "2"):
        two_x, full = results[("target_2x", steps)], results[("full", steps)]
        expected = float(records[("target_2x", steps)]["bleu"]) - float(
            records[("full", steps)]["bleu"]
        )
        assert float(two_x["bleu_delta"]) == pytest.approx(expected, abs=1e-6)
        assert (
            float(two_x["bleu_delta_ci95_low"]) <= expected <= float(two_x["bleu_delta_ci95_high"])
        )
        assert two_x["delta_seeds"] == full["seeds"]
    assert "| schedule | steps | method |" in (sweep / "results.md").read_text()
    from skipdecode.experiments.sweeps.budget import write_budget

    page = write_budget(sweep)["md"].read_text()
    budget = list(csv.DictReader((sweep / "budget.csv").open()))
    assert [(r["schedule"], r["train_steps"]) for r in budget] == [
        ("target_2x", "1"), ("target_2x", "2")
    ]  # fmt: skip
    for r in budget:
        assert float(r["delta"]) == pytest.approx(
            float(results[("target_2x", r["train_steps"])]["bleu_delta"])
        )
    assert "target_2x: " in page and (sweep / "budget.png").is_file()


def test_kept_steps_saved_as_often_as_last_ckpt_stand_beside_it(tmp_path):
    """gcd(keep_steps) equal to last_checkpoint's interval (40 and 40: SciTLDR's budget study at
    the recipe's 160 steps): Lightning refuses two checkpoint callbacks with one state key, so
    the kept steps' callback keys its state by its directory too."""
    import pytorch_lightning as pl
    from hydra.utils import instantiate
    from pytorch_lightning.callbacks import ModelCheckpoint

    from skipdecode.experiments.sweeps.steps import step_checkpoint_callback

    keep = {"sweep": {"keep_steps": [40, 80, 120, 160]}}
    step = instantiate(step_checkpoint_callback(keep, tmp_path))
    last = ModelCheckpoint(
        dirpath=tmp_path / "checkpoints", every_n_train_steps=40, save_top_k=0, save_last=True
    )
    assert ModelCheckpoint(dirpath=tmp_path / "other", every_n_train_steps=40).state_key == (
        last.state_key
    )  # what Lightning would refuse
    trainer = pl.Trainer(callbacks=[last, step], logger=False, accelerator="cpu")
    assert trainer.checkpoint_callbacks == [last, step] and step.state_key != last.state_key


def test_an_eval_step_training_does_not_keep_is_refused_before_any_work():
    from skipdecode.experiments.sweeps.steps import check_eval_step

    with pytest.raises(ValueError, match=r"sweep\.eval_step=3 is not one of sweep\.keep_steps"):
        check_eval_step({"sweep": {"keep_steps": [1, 2], "eval_step": 3}})
    with pytest.raises(ValueError, match=r"not between 1 and trainer\.max_steps=2"):
        check_eval_step({"sweep": {"keep_steps": [2, 4]}, "trainer": {"max_steps": 2}})
    check_eval_step({"sweep": {"keep_steps": [], "eval_step": None}})


def test_an_evaluation_setting_out_of_range_fails_the_cell_before_training(tmp_path, monkeypatch):
    """The sweep runs the evaluation's settings check first (every setting it checks:
    tests/evaluation/test_evaluate.py)."""
    override = "eval.speed.repeats=0"
    refusal = "eval.speed.repeats=0 is not allowed; allowed: an integer >= 1"
    from skipdecode.experiments.sweeps import sweep as sweep_module

    def trained(*args, **kwargs):
        raise AssertionError("trained a cell whose evaluation cannot run")

    monkeypatch.setattr(sweep_module, "train", trained)
    cfg = compose(
        "sweep", ["schedule=target_2x", f"sweep.cells_dir={tmp_path / 'cells'}", override]
    )
    cell = sweep_module.run_cell(cfg, tmp_path / "sweep" / "0")
    assert cell["status"] == "failed" and refusal in cell["error"]
    assert not (tmp_path / "cells").exists()  # refused before the cell's folder was made


def test_a_restored_stepped_evaluation_is_reused_without_its_weights(tmp_path):
    """A cell restored from published results has its evaluation record and no checkpoints:
    reusing the evaluation of step 120 needs no weights (the sweep refused it before)."""
    from skipdecode.experiments.sweeps.steps import STEP_DIR, reused_step_export

    train = tmp_path / "train"
    assert reused_step_export(train, 120) is None
    (train / "export-step120").mkdir(parents=True)
    (train / "export-step120" / "config.json").write_text("{}")
    assert reused_step_export(train, 120) == train / "export-step120"
    assert reused_step_export(train, 240) is None
    (train / STEP_DIR).mkdir()
    (train / STEP_DIR / "step-240.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(pickle.UnpicklingError):  # kept weights are exported, never skipped
        reused_step_export(train, 240)


def test_the_budget_page_says_from_which_budget_a_schedule_is_not_separable(tmp_path):
    from skipdecode.experiments.sweeps.budget import write_budget
    from skipdecode.experiments.sweeps.table import RESULT_COLUMNS, csv_text

    def row(schedule, steps, delta, low, high, seed_low=None, seed_high=None):
        return {"status": "ok", "schedule": schedule, "train_steps": steps, "bleu_mean": 60.0,
                "bleu_delta": delta, "bleu_delta_ci95_low": low, "bleu_delta_ci95_high": high,
                "bleu_delta_seed_ci95_low": seed_low, "bleu_delta_seed_ci95_high": seed_high,
                "seeds": "1", "delta_seeds": "1"}  # fmt: skip

    rows = [row("full", s, None, None, None) for s in (90, 180, 270)]
    rows += [row("target_2x", 90, -5, -7, -3), row("target_2x", 180, -2, -3, -1)]
    rows += [row("target_2x", 270, -0.5, -1.5, 0.5)]
    rows += [row("target_3x", s, -6, -8, -4) for s in (90, 180, 270)]
    # decided at 90; at 180 and 270 only the per-seed interval includes 0
    rows += [row("target_4x", 90, -6, -8, -4, -9, -3)]
    rows += [row("target_4x", s, -2, -3, -1, -5, 1) for s in (180, 270)]
    # nothing decided, every seeds x inputs interval excludes 0
    rows += [row("target_5x", s, -2, -3, -1, -5, 1) for s in (90, 180, 270)]
    # undecided from 180, whose seeds x inputs interval includes 0 (270's does not): no clause
    rows += [row("target_6x", 90, -6, -8, -4, -9, -3), row("target_6x", 180, -1, -3, 0.5, -5, 1)]
    rows += [row("target_6x", 270, -2, -3, -1, -5, 1)]
    (tmp_path / "results.csv").write_text(csv_text(rows, [*RESULT_COLUMNS, "train_steps"]))
    page = write_budget(tmp_path)["md"].read_text()
    assert "target_2x: not separable from full from 270 steps on; target_3x" in page
    assert "target_3x: still separable from full at 270 steps" in page
    clause = " (there every seeds x inputs interval excludes 0; only the per-seed one includes it)"
    assert f"target_4x: not separable from full from 180 steps on{clause}; target_5x" in page
    assert f"target_5x: not separable from full at any budget measured{clause}; target_6x" in page
    assert "target_6x: not separable from full from 180 steps on.\n" in page
    assert "| target_2x | 180 | 1 | 60.00 | 1 | 60.00 | 1 | -2.00 [-3.00, -1.00] |  | yes |" in page


def test_without_reuse_a_cell_trains_from_the_start_and_its_earlier_evaluation_goes(
    tmp_path, monkeypatch
):
    """``sweep.reuse=false`` (the rerun studies): a finished or restored cell is neither resumed
    from its last checkpoint nor left with the restore's mark beside its new record, so
    publishing checks the new record (dirty checkout, busy machine) like any other."""
    from skipdecode.experiments.sweeps import sweep as sweep_module
    from skipdecode.experiments.sweeps.labels import eval_id

    cell_dir = tmp_path / "cell"
    last = cell_dir / "train" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_text("an earlier run's weights")
    (cell_dir / "train_done.json").write_text(json.dumps({"status": "ok"}))
    sibling = cell_dir / "eval-another-step" / "record.json"  # evaluated the same training
    sibling.parent.mkdir()
    sibling.write_text("{}")
    resumed = []

    def fake_train(tcfg):  # train.train's objects: what the fit resumed from and its clock
        resumed.append(tcfg.get("ckpt_path"))
        (Path(tcfg.paths.output_dir) / "export").mkdir(parents=True)
        (Path(tcfg.paths.output_dir) / "export" / "config.json").write_text("{}")
        before = 0.0 if tcfg.get("ckpt_path") is None else 600.0
        return {}, {"fit": {"resumed_from": tcfg.get("ckpt_path"), "before_resume": before}}

    monkeypatch.setattr(sweep_module, "train", fake_train)
    cfg = compose("sweep", ["schedule=target_2x", f"sweep.cells_dir={tmp_path}"])
    export, summary, reused = sweep_module._train(cfg, cell_dir, reuse=False)
    assert resumed == [None] and not reused and not last.exists() and export.is_dir()
    assert not sibling.exists()  # its training is gone: a later run may not reuse it
    assert summary["resumed"] is False  # its cell.json says trained from the start

    shutil.rmtree(export)  # interrupted: a checkpoint and no export; with reuse it resumes
    last.parent.mkdir(parents=True, exist_ok=True)
    last.write_text("this run's weights")
    clock = iter([100.0, 105.0])  # this attempt: 5 s
    with monkeypatch.context() as m:
        m.setattr(sweep_module.time, "perf_counter", lambda: next(clock))
        _, summary, reused = sweep_module._train(cfg, cell_dir, reuse=True)
    assert resumed[-1] == "last" and summary["resumed"] is True and not reused
    assert summary["seconds"] == 605.0  # with the 600 s the checkpoint had reached

    c = {"eval": {"limit": 2}, "dataset": {}, "wandb": {}}
    eval_dir = cell_dir / f"eval-{eval_id(c)}"
    eval_dir.mkdir()
    (eval_dir / "record.json").write_text("{}")
    (eval_dir / "restored.json").write_text("{}")
    written = []

    def fake_evaluate(ecfg):
        assert not (Path(ecfg.output_dir) / "restored.json").exists()
        written.append(ecfg.output_dir)

    monkeypatch.setattr(sweep_module, "evaluate", fake_evaluate)
    labels = {"model": "m", "dataset": "d", "schedule": "s", "seed": 1}
    record, reused = sweep_module._evaluate(cfg, c, export, cell_dir, None, labels, reuse=False)
    assert written == [str(eval_dir)] and not reused and record == eval_dir / "record.json"
