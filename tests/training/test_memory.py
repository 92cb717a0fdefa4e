"""The memory plan: bytes per device by precision, optimizer, strategy, batch and checkpointing;
the paper's 6.7B cell refused on one 80 GB card with the fixes named and planned under 80 GB
sharded; SmolLM2's plan within 25% of the peaks its GPU cells measured; a plan for the whole
grid offline, without weights; the measured peaks recorded beside the plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skipdecode.training.memory import (
    GIB,
    MemoryPlanError,
    ModelSizes,
    experiment_plan,
    main,
    plan_memory,
    require_fit,
    shape_sizes,
)
from skipdecode.training.peak import DevicePeak, peak_record, read_peak

RESULTS = Path(__file__).resolve().parents[2] / "results"
SIZES = ModelSizes(params=1000, layer_params=100, hidden=8, layers=4, vocab=50)


def _plan(**kw):
    args = dict(model="m", precision="bf16-mixed", optimizer="AdamW", strategy="single",
                devices=1, batch=2, seq_len=10, checkpointing=False)  # fmt: skip
    return plan_memory(SIZES, **{**args, **kw})


def test_plan_counts_by_hand():
    p = _plan()
    # mixed precision: float32 weights (4 B) and gradients (4 B), AdamW's two moments (8 B)
    assert (p.weights, p.gradients, p.optimizer_states) == (4000, 4000, 8000)
    # 34 s b h per layer in 16-bit, 4 layers; logits s b V x (2 + 4 + 4)
    assert p.activations == 4 * 34 * 10 * 2 * 8 + 10 * 2 * 50 * 10
    assert p.transient == 100 * 2  # one layer's bf16 copy under autocast
    assert p.total == sum((p.weights, p.gradients, p.optimizer_states, p.activations, 200))
    # checkpointing keeps each layer's input (2 s b h) and recomputes one layer
    assert _plan(checkpointing=True).activations == 4 * 2 * 160 + 34 * 160 + 10000
    # full sharding over 4 devices: states / 4, plus two layers gathered in bf16
    s = _plan(strategy="fsdp", devices=4)
    assert (s.weights, s.gradients, s.optimizer_states) == (1000 + 2 * 100 * 2, 1000, 2000)
    assert _plan(precision="32-true").activations == 4 * 34 * 160 * 2 + 10 * 2 * 50 * 12
    with pytest.raises(MemoryPlanError, match=r"trainer\.precision='fp8'"):
        _plan(precision="fp8")


def test_the_paper_6_7b_cell_is_refused_on_one_card_and_fits_sharded():
    _, one = experiment_plan("paper_opt6.7b_e2e", ["trainer=gpu", "trainer.devices=1"])
    assert one.strategy == "single" and one.total > 80 * GIB
    with pytest.raises(MemoryPlanError, match=r"over the 80\.0 GiB of an H100.*trainer=fsdp"):
        require_fit(one, 80 * GIB, "an H100")
    _, grid = experiment_plan("paper_opt6.7b_e2e", [])  # as the grid composes it
    assert grid.strategy == "fsdp" and grid.devices == 8 and grid.total < 80 * GIB
    require_fit(grid, 80 * GIB, "an H100")


def test_smollm2_plan_is_within_a_quarter_of_its_measured_gpu_peaks():
    """The GPU E2E cells recorded the peak their process reserved (batch 16, bf16-mixed); the
    plain SkipDecode and baseline cells (not the lossless mode's two passes, nor CALM's exits
    through the head at every layer) against the plan at E2E's longest training pair (142)."""
    peaks = []
    for cell_file in (RESULTS / "e2e_smollm2_gpu").glob("*/cell.json"):
        cell = json.loads(cell_file.read_text())
        if cell.get("gpu_peak_bytes", 0) > GIB and cell["method"] not in ("CALM", "speculative"):
            peaks.append(cell["gpu_peak_bytes"])
    assert len(peaks) >= 5
    plan = plan_memory(
        shape_sizes("smollm2-135m"), model="smollm2-135m", precision="bf16-mixed",
        optimizer="AdamW", strategy="single", devices=1, batch=16, seq_len=142,
        checkpointing=False,
    )  # fmt: skip
    for peak in peaks:
        assert abs(plan.total - peak) <= 0.25 * peak, (plan.total / GIB, peak / GIB)


def test_the_grid_plans_offline_without_weights(capsys):
    assert main(["--grid"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| paper")]
    assert len(rows) == 6 and all(line.endswith("| yes |") for line in rows)
    assert any("| paper_opt6.7b_e2e | fsdp | 8 |" in line for line in rows)


def test_grid_plans_gpu_hours_from_the_measured_rates():
    """Plan-only mode: a cell's GPU hours are its training FLOPs (6 x parameters x its steps'
    tokens at the longest sequence) over the measured peak (lower bound) and over the SmolLM2
    GPU cells' measured training rate (upper bound); both rates come from committed records."""
    from skipdecode.training.grid import grid_rows, measured_rates

    rates = measured_rates()
    assert rates["peak"]["tflops"] > 0 and rates["training"]["cells"] >= 1
    fake = {"peak": {"tflops": 100.0}, "training": {"flops": 1e12}}
    (row,) = grid_rows(["paper_opt6.7b_e2e"], fake)
    plan = row["plan"]
    assert plan.strategy == "fsdp" and plan.devices == 8
    accumulate = 4  # paper_opt6.7b_e2e: 8 a device x 8 devices x 4 accumulated = 256 a step
    tokens = row["steps"] * plan.batch * plan.devices * accumulate * plan.seq_len
    assert row["tokens"] == tokens
    assert row["hours_at_peak"] == pytest.approx(6 * plan.params * tokens / 100e12 / 3600)
    assert row["hours_at_measured"] == pytest.approx(6 * plan.params * tokens / 1e12 / 3600)


def test_measured_peaks_are_recorded_beside_the_plan():
    """Every device's peak in rank order, the busiest one's reserved bytes, and the plan's total
    over it; mismatched or missing peaks are refused."""
    record = peak_record([3 * GIB, 4 * GIB], [5 * GIB, 6 * GIB], 9 * GIB, "NVIDIA H100")
    assert record["devices"] == 2
    assert record["peak_reserved_bytes"] == 6 * GIB
    assert record["plan_over_peak"] == pytest.approx(1.5)
    assert peak_record([1], [2], None, "gpu")["plan_over_peak"] is None
    for allocated, reserved in (([1, 2], [3]), ([], [])):
        with pytest.raises(ValueError, match="one of each per device"):
            peak_record(allocated, reserved, 1, "gpu")


def _fit_with(callback: DevicePeak, root: Path) -> None:
    """Two steps of a one-weight model on the CPU, with ``callback``."""
    import pytorch_lightning as pl
    import torch

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(1, 1)

        def training_step(self, batch, _):
            return self.w(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 1)))
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=2, callbacks=[callback], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=root,
    )  # fmt: skip
    trainer.fit(Tiny(), data)


def test_a_fit_writes_its_measured_peaks_and_none_off_a_gpu(tmp_path):
    """Through a real fit: the peaks are read when training ends (while the model is still on
    its device) and written whole; on a CPU the CUDA reader finds nothing and no file is left."""
    seen = []

    def measure(device):
        seen.append(device.type)
        return 5 * GIB, 7 * GIB

    _fit_with(DevicePeak(tmp_path / "measured", 14 * GIB, measure=measure), tmp_path)
    record = read_peak(tmp_path / "measured")
    assert seen == ["cpu"]
    assert record["allocated_bytes"] == [5 * GIB] and record["reserved_bytes"] == [7 * GIB]
    assert record["plan_over_peak"] == pytest.approx(2.0)
    _fit_with(DevicePeak(tmp_path / "cpu", GIB), tmp_path)
    assert read_peak(tmp_path / "cpu") is None


def test_planning_a_named_shape_leaves_the_seeded_random_stream_alone():
    """A run's memory plan sizes a named shape before training: the run's seed must still decide
    its data order (building the shape once reset the global stream to seed 0 for every seed)."""
    import torch

    from skipdecode.models.shapes import build_random_model

    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    shape_sizes("smollm2-135m")
    assert torch.equal(torch.rand(4), expected)
    first, second = build_random_model("tiny"), build_random_model("tiny")
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))
