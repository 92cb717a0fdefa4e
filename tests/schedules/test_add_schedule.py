"""The "Adding a schedule" example in docs/EXTENDING.md, run as written: it registers, builds
from config, decodes with the engine exactly like the teacher-forced pass, and trains one loss
step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from tiny_models import FAMILIES, left_padded_batch

from skipdecode.core.engine import SkipDecoder
from skipdecode.schedules import build_schedule, method_label, position_layer_mask, registry

EXTENDING_DOC = Path(__file__).resolve().parents[2] / "docs" / "EXTENDING.md"


def _example_code() -> str:
    text = EXTENDING_DOC.read_text(encoding="utf-8")
    block = re.search(
        r"<!-- example:add-schedule -->\s*```python\n(.*?)```\s*<!-- /example:add-schedule -->",
        text,
        re.S,
    )
    assert block, "docs/EXTENDING.md has no add-schedule example between its markers"
    return block.group(1)


@pytest.fixture
def stride_registered(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after the test
    # run as the module the doc says to save it as, so its relative imports resolve as they would
    namespace: dict = {
        "__name__": "skipdecode.schedules.stride",
        "__package__": "skipdecode.schedules",
    }
    exec(compile(_example_code(), str(EXTENDING_DOC), "exec"), namespace)
    return namespace


def test_readme_example_schedule_runs_everywhere(stride_registered):
    model = FAMILIES["opt"]()  # 6 layers
    schedule = build_schedule({"name": "stride", "stride": 2}, 6)
    assert schedule.active_layers(0) == (0, 2, 4, 5)
    assert method_label("stride") == "stride"
    assert schedule.describe() == {"name": "stride", "num_layers": 6, "stride": 2}

    dec = SkipDecoder(model)
    ids, mask = left_padded_batch([5, 8, 3])
    out = dec.generate(ids, schedule, 6, mask, eos_token_id=[], return_logits=True)
    assert out.active_layers == [(0, 2, 4, 5)] * 5
    assert out.stats.theoretical_speedup == pytest.approx(6 / 4)

    full_mask = torch.cat([mask, torch.ones_like(out.generated_ids)], dim=1)
    P = ids.shape[1]
    layer_mask = position_layer_mask(schedule, torch.full((3,), P), out.sequences.shape[1])
    logits = dec.forward(out.sequences, full_mask, layer_mask)
    assert torch.allclose(logits[:, P - 1 : -1], out.step_logits, atol=1e-5)

    batch = {
        "input_ids": out.sequences,
        "attention_mask": full_mask,
        "labels": torch.where(
            full_mask.bool(), out.sequences, torch.full_like(out.sequences, -100)
        ),
        "prompt_lengths": torch.full((3,), P),
    }
    loss, count = schedule.loss_sums(dec, batch)
    assert count > 0 and torch.isfinite(loss)
    assert schedule.validation_plan(16) is schedule


def test_readme_example_refuses_a_bad_stride_by_name(stride_registered):
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=rf"schedule\.stride={bad!r} is not allowed"):
            build_schedule({"name": "stride", "stride": bad}, 6)


def test_unknown_schedule_lists_the_registered_ones():
    with pytest.raises(ValueError, match="not known; choose one of .*'full'"):
        build_schedule({"name": "stride"}, 6)


def test_a_schedule_that_calibrates_must_say_so_where_it_registers(monkeypatch):
    """A sweep names a calibrated evaluation by its calibration settings from the config alone
    (``registry.calibrates``); a builder whose schedule needs calibration where its registration
    says not is refused at its first build, not cached under another calibration's results."""
    from skipdecode.schedules import FullSchedule

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    class Tuned(FullSchedule):
        needs_calibration = True

    registry.register("tuned", method="tuned")(lambda cfg, n, e: Tuned(n))
    with pytest.raises(ValueError, match=r"schedule\.name=tuned: the built schedule's needs_cal"):
        build_schedule({"name": "tuned"}, 6)
    registry._REGISTRY.pop("tuned")
    registry.register("tuned", method="tuned", calibrates=lambda cfg: cfg.get("t") is None)(
        lambda cfg, n, e: Tuned(n)
    )
    assert build_schedule({"name": "tuned"}, 6).needs_calibration
    assert registry.calibrates({"name": "tuned"}) and not registry.calibrates({"name": "full"})
    # the built-in rules, each against the schedule its builder makes
    for cfg, tuned in (
        ({"name": "calm", "target_speedup": 2}, True),
        ({"name": "calm", "threshold": 0.9}, False),
        ({"name": "adaptive", "target_speedup": 2}, True),
        ({"name": "adaptive", "target_speedup": 2, "sharpness": 3.0}, False),
        ({"name": "adaptive", "max_layers": 6, "min_layers": 2}, False),
    ):
        assert registry.calibrates(cfg) is tuned
        assert build_schedule(cfg, 6, 8).needs_calibration is tuned
