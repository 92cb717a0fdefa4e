"""DecodeOptions: each default written once, every rule between the settings checked where the
options are built, errors naming the setting as the caller spells it."""

from __future__ import annotations

import argparse

import pytest

from skipdecode.core.options import (
    CLI_NAMES,
    CONFIG_NAMES,
    DEFAULTS,
    DecodeOptions,
    DecodeOptionsError,
)
from skipdecode.experiments.sweeps.identity import eval_identity


def test_defaults_and_the_config_and_cli_builders_agree():
    assert DEFAULTS.as_dict() == {"cache": "static", "compile": False, "compile_graph": "layer"}
    assert DecodeOptions.from_config({"cache": None, "compile": None}) == DEFAULTS
    assert DecodeOptions.from_config({"compile": True, "compile_graph": "plan"}).compile_mode == (
        "default"
    )
    args = argparse.Namespace(compile=True, plan_graphs=True)
    assert DecodeOptions.from_args(args) == DecodeOptions(compile=True, compile_graph="plan")
    assert DecodeOptions(compile="reduce-overhead").compile_mode == "reduce-overhead"
    assert DEFAULTS.compile_mode is None


@pytest.mark.parametrize(
    ("given", "names", "message"),
    [
        ({"cache": "paged"}, CONFIG_NAMES, r"eval\.cache: 'paged' is not allowed; .*'static'"),
        ({"compile": "fast"}, CONFIG_NAMES, r"eval\.compile: 'fast' is not allowed; .*reduce-"),
        ({"compile_graph": "model"}, CONFIG_NAMES, r"eval\.compile_graph: 'model' .*'plan'"),
        (
            {"compile_graph": "plan"},
            CLI_NAMES,
            r"--plan-graphs: 'plan' is a kind of compiled graph, and --compile is False",
        ),
        (
            {"compile": True, "cache": "dynamic"},
            CONFIG_NAMES,
            r"eval\.compile: True needs eval\.cache='static'.*not 'dynamic'",
        ),
    ],
)
def test_contradictions_are_refused_by_name(given, names, message):
    with pytest.raises(DecodeOptionsError, match=message):
        DecodeOptions(**given, names=names)


def test_a_null_decode_option_keeps_a_published_evaluation_id():
    written = {"split": "test", "cache": "static", "compile": False, "compile_graph": "layer"}
    nulls = {"split": "test", "cache": None, "compile": None, "compile_graph": None}
    assert eval_identity(nulls) == eval_identity(written)
    assert eval_identity({**nulls, "compile": True}) != eval_identity(written)
