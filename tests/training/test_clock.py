"""A training's time carried through checkpoints (``training.clock``), unknown where a
checkpoint does not say, and written whole for the process that called ``fit``."""

from __future__ import annotations

from types import SimpleNamespace

from skipdecode.training.clock import TrainingClock, read_clock

RANK0 = SimpleNamespace(is_global_zero=True)


def test_the_clock_carries_its_seconds_through_a_checkpoint_and_stops_when_fit_ends(tmp_path):
    first = TrainingClock(tmp_path)
    first.on_fit_start(RANK0, None)
    state = first.state_dict()  # a checkpoint while fitting
    resumed = TrainingClock(tmp_path)
    checkpoint = {"callbacks": {resumed.state_key: state}}
    resumed.on_load_checkpoint(RANK0, None, checkpoint)
    resumed.load_state_dict(state)
    resumed.on_fit_start(RANK0, None)
    resumed.on_fit_end(RANK0, None)
    assert resumed.before == state["seconds"] > 0
    assert resumed.seconds == resumed.seconds >= state["seconds"]  # stopped: the same twice
    assert read_clock(tmp_path) == {"seconds": resumed.seconds, "before_resume": state["seconds"]}


def test_a_checkpoint_from_before_the_clock_leaves_the_earlier_seconds_unknown(tmp_path):
    assert read_clock(tmp_path) == {"seconds": None, "before_resume": None}  # fit never ended
    clock = TrainingClock(tmp_path)
    clock.on_load_checkpoint(RANK0, None, {"callbacks": {"ModelCheckpoint": {}}})
    clock.on_fit_start(RANK0, None)
    clock.on_fit_end(SimpleNamespace(is_global_zero=False), None)  # not rank 0: no file
    assert read_clock(tmp_path)["seconds"] is None and clock.seconds is None
    assert clock.state_dict() == {"seconds": None}  # and the next checkpoint says so
    again = TrainingClock(tmp_path)
    again.load_state_dict(clock.state_dict())
    assert again.before is None
