"""The step profile's arithmetic: what a decode step adds is the difference between a call
that decodes and one that only prefills, per step; a variant whose profile fails keeps its
error and the others are still profiled."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import left_padded_batch, tiny_llama

from skipdecode.core.engine import SkipDecoder
from skipdecode.experiments.benchmarks import bench_profile
from skipdecode.experiments.benchmarks.bench_profile import profile_lines, step_profiles
from skipdecode.experiments.recompute.findings import Findings
from skipdecode.experiments.recompute.profile import check_profiles
from skipdecode.schedules import FullSchedule


def test_per_step_is_the_difference_over_the_decode_steps():
    """Counts: the decoding call's less the one-token call's; time: the decoding call's less its
    own earliest runs of each name (the prefill's), never the other call's."""
    one = {"names": {"a": [3, 30.0], "c": [2, 9.0]}, "host": {"graph_launches": 1, "syncs": 2}}
    # the decoding call's own time of its first 3 "a" kernels (the prefill's) is 33 us, not 30
    many = {
        "names": {"a": [11, 73.0, 33.0], "b": [4, 8.0, 0.0], "c": [2, 11.0, 11.0]},
        "host": {"graph_launches": 5, "syncs": 2},
    }
    row = bench_profile._per_step(one, many, 4)
    assert row["events_per_step"] == pytest.approx(3.0)  # (11 - 3) / 4 + 4 / 4; no "c"
    assert row["device_us_per_step"] == pytest.approx(12.0)  # (73 - 33) / 4 + 8 / 4
    assert row["host_per_step"] == {"graph_launches": 1.0, "syncs": 0.0}
    assert [t["name"] for t in row["top"]] == ["a", "b"] and row["distinct"] == 2


def _full_decode():
    """A call decoding n tokens of a tiny model on the full schedule."""
    model = tiny_llama(num_layers=4)
    ids, mask = left_padded_batch([5, 3])
    decoder = SkipDecoder(model)
    return lambda n: decoder.generate(
        ids, FullSchedule(4), n, mask, eos_token_id=[], decode_texts=False
    )


def test_a_profile_counts_the_operators_of_each_step_and_keeps_a_failure():
    run = _full_decode()

    def broken(n):
        raise RuntimeError("replay refused")

    out = step_profiles({"full": run, "broken": broken}, 5, torch.device("cpu"), {"full": 2.0})
    full = out["full"]
    assert full["unit"] == "cpu operators" and full["events_per_step"] > 4  # at least a layer each
    assert all(t["us_per_step"] >= 0 for t in full["top"]) and full["busy_share"] > 0
    assert full["busy_share"] == pytest.approx(full["device_us_per_step"] / 2000)
    assert out["broken"] == {"error": "RuntimeError: replay refused"}
    lines = profile_lines([{"batch_size": 2, "step_profile": out}])
    assert lines[0].startswith("full at batch 2: ") and "cpu operators a step" in lines[0]
    assert lines[1] == "broken at batch 2: not profiled: RuntimeError: replay refused"
    with pytest.raises(ValueError, match="new_tokens=1"):
        step_profiles({"full": run}, 1, torch.device("cpu"), {})


def _audit(cell, page):
    found = Findings("profiles")
    check_profiles("cell", cell, found, page)
    return found


def _cell(shape, profiles):
    return {"shape": shape, "batch_size": 2, "variants": {"full": {"decode_ms_per_step": 1.5}},
            "step_profile": profiles}  # fmt: skip


def _section(*cells):
    """A record's section of the GPU page: each shape's heading, then its profile lines."""
    return "".join(
        f"\n### {c['shape']}\n\n" + "".join(f"- {line}\n" for line in profile_lines([c]))
        for c in cells
    )


def test_the_audit_recomputes_a_profile_and_its_page_line_and_finds_a_planted_change():
    run = _full_decode()
    profiles = step_profiles({"full": run}, 4, torch.device("cpu"), {"full": 1.5})
    cell = _cell("tiny", profiles)
    # a second shape with the same variant and batch: each is checked against its own heading
    other = _cell("other", step_profiles({"full": run}, 3, torch.device("cpu"), {"full": 1.5}))
    page = _section(other, cell)
    assert profile_lines([other])[0] != profile_lines([cell])[0]
    for checked in (cell, other):
        found = _audit(checked, page)
        assert found.differences == [] and found.checked >= 10
    planted = copy.deepcopy(cell)
    planted["step_profile"]["full"]["events_per_step"] += 1
    assert any("events_per_step" in d for d in _audit(planted, page).differences)
    planted = copy.deepcopy(cell)
    planted["variants"]["full"]["decode_ms_per_step"] = 3.0  # the busy share no longer follows
    assert any("busy_share" in d for d in _audit(planted, page).differences)
    events = f"{profiles['full']['events_per_step']:.1f} cpu operators"
    assert events in page
    assert any(
        "cpu operators a step" in d
        for d in _audit(
            cell, _section(other) + _section(cell).replace(events, "0.5 cpu operators")
        ).differences
    )
