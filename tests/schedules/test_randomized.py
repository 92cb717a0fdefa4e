"""Budget-randomized fine-tuning: the stated distribution drawn (seeded, the same sequence on
resume), the drawn plan's exact loss with and without self-distillation, clear refusals, and one
trained model evaluated at several speeds by a sweep."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from exports import SHRINK, compose
from tiny_models import tiny_opt
from train_utils import SimulatedCrash, make_cfg

from skipdecode.core.engine import SkipDecoder
from skipdecode.core.loss import distill_loss_sums, token_loss_sums
from skipdecode.experiments.sweeps.sweep import run_cell
from skipdecode.schedules import (
    FullSchedule,
    RandomizedSchedule,
    ScheduleError,
    build_schedule,
)
from skipdecode.schedules.base import plan_logits
from skipdecode.training.train import train

L = 6
DRAWS = [
    {"name": "full"},
    {"name": "target", "target_speedup": 2},
    {"name": "early_exit", "exit_layers": 2},
]


def _schedule(**extra) -> RandomizedSchedule:
    return build_schedule({"name": "randomized", "draws": DRAWS, **extra}, L, 8)


def _step_generator(step: int) -> torch.Generator:  # the training step's (module.training_step)
    return torch.Generator().manual_seed(step * 7919)


def test_draws_follow_the_stated_distribution_and_repeat_per_step():
    schedule = _schedule(weights=[1, 1, 2])
    assert schedule.describe()["weights"] == [0.25, 0.25, 0.5]
    n = 4000
    draws = [schedule.draw(_step_generator(s)) for s in range(n)]
    assert draws == [schedule.draw(_step_generator(s)) for s in range(n)]  # a pure function
    for index, p in enumerate([0.25, 0.25, 0.5]):
        share = draws.count(index) / n
        assert abs(share - p) < 4 * (p * (1 - p) / n) ** 0.5, (index, share)
    # the description rebuilds the same schedule (records keep the distribution)
    again = build_schedule(schedule.describe(), L, 8)
    assert again.describe() == schedule.describe()


def _batch(dec: SkipDecoder) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(3, 90, (2, 12))
    labels = ids.clone()
    labels[:, :5] = -100
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": labels,
        "prompt_lengths": torch.tensor([5, 5]),
    }


@pytest.mark.parametrize("weight", [0.0, 0.7])
def test_the_loss_is_the_drawn_plans_with_the_distillation_term(weight):
    dec = SkipDecoder(tiny_opt(L))
    batch = _batch(dec)
    schedule = _schedule(distill_weight=weight, weights=[0, 0, 1])  # always early exit
    loss, count = schedule.loss_sums(dec, batch, _step_generator(3))
    assert schedule.last_draw == 2
    logits = plan_logits(dec, batch, schedule.draws[2])
    expected, n = token_loss_sums(logits, batch["labels"])
    teacher = plan_logits(dec, batch, FullSchedule(L))
    divergence, _ = distill_loss_sums(logits, teacher, batch["labels"])
    assert divergence > 0
    torch.testing.assert_close(loss, expected + weight * divergence, atol=0, rtol=0)
    assert int(count) == int(n) == 14
    # the full plan drawn: no teacher pass, the plain cross-entropy
    full = _schedule(distill_weight=weight, weights=[1, 0, 0])
    loss, _ = full.loss_sums(dec, batch, _step_generator(3))
    torch.testing.assert_close(loss, token_loss_sums(teacher, batch["labels"])[0], atol=0, rtol=0)


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"draws": []}, r"schedule\.draws=\[\]"),
        ({"draws": [{"name": "adaptive", "target_speedup": 2}]}, r"static \(position-only\)"),
        ({"weights": [1, 2]}, r"schedule\.weights=\[1, 2\].*3 numbers"),
        ({"weights": [0, 0, 0]}, r"not all 0"),
        ({"distill_weight": -1}, r"schedule\.distill_weight=-1"),
    ],
)
def test_bad_settings_are_refused_by_name(extra, match):
    with pytest.raises(ScheduleError, match=match):
        build_schedule({"name": "randomized", "draws": DRAWS, **extra}, L, 8)


def _draws(run: Path) -> list[float]:
    with (run / "csv" / "metrics.csv").open() as f:
        return [float(r["train/draw"]) for r in csv.DictReader(f) if r.get("train/draw")]


def test_a_resumed_run_draws_the_same_sequence(tmp_path):
    over = [
        "schedule=randomized_1to4x",
        "trainer.max_steps=8",
        "trainer.val_check_interval=4",
        "trainer.log_every_n_steps=1",
        "callbacks.last_checkpoint.every_n_train_steps=4",
    ]
    crash = ["+callbacks.crash._target_=train_utils.CrashAfter", "+callbacks.crash.step=5"]
    train(make_cfg(tmp_path / "straight", over))
    with pytest.raises(SimulatedCrash):
        train(make_cfg(tmp_path / "resumed", [*over, *crash]))
    train(make_cfg(tmp_path / "resumed", [*over, "ckpt_path=last"]))
    straight = _draws(tmp_path / "straight")
    assert len(straight) == 8 and len(set(straight)) > 1
    assert _draws(tmp_path / "resumed") == straight


def test_one_trained_model_is_evaluated_at_several_speeds(tmp_path):
    cells = []
    for i, evaluated in enumerate(["full", "target_4x"]):
        cfg = compose(
            "sweep",
            [
                *SHRINK,
                "schedule=randomized_1to4x",
                f"+schedule@sweep.eval_schedule={evaluated}",
                f"sweep.cells_dir={tmp_path / 'cells'}",
                f"paths.log_dir={tmp_path}",
            ],
        )
        cells.append(run_cell(cfg, tmp_path / "jobs" / str(i)))
    assert [c["status"] for c in cells] == ["ok", "ok"], [c.get("error") for c in cells]
    assert cells[0]["cell_dir"] == cells[1]["cell_dir"]  # one trained model
    assert cells[0]["train_reused"] is False and cells[1]["train_reused"] is True
    assert cells[0]["record"] != cells[1]["record"]
    # outside a Hydra run the labels come from the configs (in a multirun: the option names)
    assert [c["method"] for c in cells] == [
        "full (randomized-trained)",
        "skipdecode (randomized-trained)",
    ]
    assert [c["schedule"] for c in cells] == ["full", "target"]
    assert [c["target_speedup"] for c in cells] == [1.0, 4.0]
    records = [json.loads(Path(c["record"]).read_text()) for c in cells]
    assert [r["schedule"]["origin"] for r in records] == ["override", "override"]
    assert records[0]["schedule"]["name"] == "full" and records[1]["schedule"]["name"] == "linear"
    assert records[1]["summary"]["theoretical_speedup"] > 2
