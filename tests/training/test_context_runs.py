"""Inputs longer than the model's context: training, a sweep cell and an evaluation refuse them
before any work with every setting named, or cut the prompts to fit when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from exports import compose, make_exported_dir
from omegaconf import OmegaConf
from train_utils import FAST, make_cfg

from skipdecode.core.context import ContextError
from skipdecode.evaluation.evaluate import EvaluationError, evaluate
from skipdecode.experiments.sweeps.sweep import run_cell
from skipdecode.training.train import train

TINY = [o for o in FAST if o.startswith("model.")]


def _long_documents(directory: Path, n: int = 16, words: int = 700) -> Path:
    """SciTLDR-shaped files whose sources run past the tiny model's 512 positions."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("train", "dev", "test"):
        with (directory / f"{name}.jsonl").open("w") as f:
            for i in range(n):
                words_i = " ".join(f"w{(i * 7 + j) % 97}" for j in range(words))
                row = {"source": [f"Document {i}.", words_i], "target": [f"summary of {i}"]}
                f.write(json.dumps(row) + "\n")
    return directory


@pytest.fixture(scope="module")
def long_docs(tmp_path_factory) -> Path:
    return _long_documents(tmp_path_factory.mktemp("long") / "data")


def _train_overrides(data: Path, *extra: str) -> list[str]:
    return [
        "dataset=scitldr",  # the default max_source_tokens 512 + max_target_tokens 64
        f"dataset.data_dir={data}",
        "+trainer.fast_dev_run=1",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "loader.batch_size=4",
        *TINY,
        *extra,
    ]


def test_training_is_refused_before_anything_or_cuts_prompts_to_fit(tmp_path, long_docs):
    out = tmp_path / "refused"
    with pytest.raises(ContextError) as e:
        train(make_cfg(out, _train_overrides(long_docs), fast=False))
    text = str(e.value)
    assert "model=tiny runs 512 positions (max_position_embeddings)" in text
    assert "dataset.max_source_tokens=512 + dataset.max_target_tokens=64 = 576 tokens" in text
    assert "dataset.max_source_tokens=448 or less" in text
    assert not out.exists() or not any(out.rglob("*.json")) and not any(out.rglob("*.ckpt"))

    cfg = make_cfg(
        tmp_path / "cut", _train_overrides(long_docs, "dataset.on_long_context=truncate"), False
    )
    metrics, objects = train(cfg)
    assert metrics["global_step"] == 1
    info = objects["run_info"]
    assert info["context"] == {
        "positions": 512,
        "source": "max_position_embeddings",
        "rule": "truncate",
        "longest_sequence": 576,
        "max_source_tokens": 448,
    }
    assert info["truncation"]["train"]["truncated_sources"] == 16  # every long source, counted
    train_set = objects["datamodule"].train_set
    assert max(len(ex.prompt_ids) for ex in train_set) == 448
    assert max(len(ex.prompt_ids) + len(ex.target_ids) for ex in train_set) <= 512
    prompt = objects["datamodule"].tokenizer.decode(train_set[0].prompt_ids)
    assert prompt.rstrip().endswith("TL;DR:")  # the task's tail kept


def test_a_sweep_cell_is_refused_before_it_trains(tmp_path, long_docs):
    cells = tmp_path / "cells"
    cfg = compose(
        "sweep",
        [
            *_train_overrides(long_docs),
            "eval.generation.max_new_tokens=100",
            f"sweep.cells_dir={cells}",
            f"paths.log_dir={tmp_path}",
        ],
    )
    cell = run_cell(cfg, tmp_path / "job")
    assert cell["status"] == "failed" and cell["error"].startswith("ContextError")
    assert "dataset.max_source_tokens=512 + dataset.max_target_tokens=64 = 576" in cell["error"]
    assert (
        "dataset.max_source_tokens=512 + eval.generation.max_new_tokens=100 = 612" in cell["error"]
    )
    assert "dataset.max_source_tokens=412 or less" in cell["error"]
    assert not cells.exists()  # nothing trained, nothing half-written


def test_evaluation_is_refused_before_decoding_or_cuts_prompts_to_fit(tmp_path):
    model_dir = make_exported_dir(tmp_path / "model")  # 256 positions, prompts cut to 96
    base = [f"checkpoint={model_dir}", "eval=fast", "eval.limit=2", "eval.threads=1"]
    base += ["eval.generation.batch_size=2", "eval.generation.max_new_tokens=236"]
    with pytest.raises(EvaluationError) as e:
        evaluate(compose("evaluate", [*base, f"output_dir={tmp_path / 'refused'}"]))
    assert "dataset.max_source_tokens=96 + eval.generation.max_new_tokens=236 = 332" in str(e.value)
    assert not (tmp_path / "refused" / "record.json").exists()

    out = tmp_path / "cut"
    record = evaluate(
        compose("evaluate", [*base, f"output_dir={out}", "dataset.on_long_context=truncate"])
    )
    assert record["dataset"]["context"]["max_source_tokens"] == 20
    assert record["dataset"]["max_source_tokens"] == 20
    assert record["dataset"]["truncated_sources"] == 2
    saved = OmegaConf.to_container(OmegaConf.create(record["config"]))
    assert saved["dataset"]["on_long_context"] == "truncate"


def test_the_default_rule_keeps_published_cell_ids():
    from skipdecode.experiments.sweeps.identity import cell_identity

    c = {"dataset": {"name": "scitldr", "max_source_tokens": 512}, "seed": 1}
    published, _ = cell_identity(c)
    assert cell_identity({**c, "dataset": {**c["dataset"], "on_long_context": "error"}})[0] == (
        published
    )
    cut = {**c, "dataset": {**c["dataset"], "on_long_context": "truncate"}}
    assert cell_identity(cut)[0] != published
