"""Option types refuse a value out of range by the option's name, before anything runs."""

from __future__ import annotations

import argparse

import pytest

from skipdecode.arguments import at_least, fraction
from skipdecode.experiments.sweeps import gpu_memory


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tool")
    p.add_argument("--repeats", type=at_least(1), default=3)
    p.add_argument("--scale", type=at_least(0.5, float), default=1.0)
    p.add_argument("--share", type=fraction, default=0.9)
    return p


def test_values_in_range_pass_as_their_kind():
    args = _parser().parse_args(["--repeats", "1", "--scale", "0.5", "--share", "1"])
    assert (args.repeats, args.scale, args.share) == (1, 0.5, 1.0)
    assert isinstance(args.repeats, int) and isinstance(args.scale, float)


@pytest.mark.parametrize(
    "argv, refusal",
    [
        (["--repeats", "0"], "argument --repeats: 0 is not allowed (an integer >= 1)"),
        (["--repeats", "2.5"], "argument --repeats: '2.5' is not an integer"),
        (["--scale", "0.4"], "argument --scale: 0.4 is not allowed (a number >= 0.5)"),
        (["--share", "0"], "argument --share: 0 is not allowed (a number in (0, 1])"),
        (["--share", "1.5"], "argument --share: 1.5 is not allowed (a number in (0, 1])"),
    ],
)
def test_a_value_out_of_range_is_refused_by_option(capsys, argv, refusal):
    with pytest.raises(SystemExit):
        _parser().parse_args(argv)
    assert refusal in capsys.readouterr().err


def test_gpu_jobs_are_never_minus_one(capsys):
    """The Makefile hands the number to joblib, where -1 means every core."""
    with pytest.raises(SystemExit):
        gpu_memory.main(["--max-jobs", "-1"])
    assert "argument --max-jobs: -1 is not allowed (an integer >= 1)" in capsys.readouterr().err
