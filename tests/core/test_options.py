"""DecodeOptions: each default written once, every rule between the settings checked where the
options are built, errors naming the setting as the caller spells it."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from skipdecode.core.auto import auto_choice
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


def _cpu_record(path, eager_ms, compiled_ms, layers=30):
    cells = [
        {"shape": "s", "num_layers": layers, "variants": {
            "skipdecode-full": {"decode_ms_per_step": e},
            "skipdecode-full-compiled": {"decode_ms_per_step": c},
        }}
        for e, c in zip(eager_ms, compiled_ms)
    ]  # fmt: skip
    path.write_text(json.dumps({"cells": cells}))
    return path


def test_auto_picks_graphs_on_a_gpu_and_the_cpu_benchmarks_faster_path(tmp_path):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert auto_choice(cuda, 30, tmp_path / "none.json")[:2] == ("reduce-overhead", "step")
    assert auto_choice(cpu, 30, tmp_path / "none.json")[:2] == (False, "layer")
    faster = _cpu_record(tmp_path / "a.json", [40, 60, 90], [35, 62, 80])
    assert auto_choice(cpu, 28, faster) == (
        True, "layer", "a.json: compiled faster than eager at 2 of 3 batch sizes (s, 30 layers)"
    )  # fmt: skip
    slower = _cpu_record(tmp_path / "b.json", [40, 60, 90], [45, 62, 80])
    assert auto_choice(cpu, 28, slower)[0] is False
    with pytest.raises(DecodeOptionsError, match=r"eval\.compile_graph: 'plan' with eval\.compile"):
        DecodeOptions(compile="auto", compile_graph="plan", names=CONFIG_NAMES)


def test_auto_is_resolved_by_the_decoder_and_says_why():
    from tiny_models import tiny_llama

    from skipdecode.core.engine import SkipDecoder

    decoder = SkipDecoder(tiny_llama(6), compile="auto")
    expected = auto_choice(torch.device("cpu"), 6)
    assert decoder.options.compile == expected[0] and decoder.options.compile_graph == expected[1]
    assert decoder.options.as_dict()["chosen_because"] == f"auto: {expected[2]}"
    assert (decoder.compiled is not None) == bool(expected[0])
    assert DecodeOptions().resolved(torch.device("cpu"), 6) == DecodeOptions()
