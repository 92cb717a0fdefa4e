"""Training configs: every experiment composes and runs one fast_dev_run step; clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from train_utils import CONF, EXPERIMENTS, FAST, make_cfg, write_e2e, write_summaries

from skipdecode.config import instantiate_loggers
from skipdecode.data import (
    DataNotFoundError,
    EmptySplitError,
    MissingColumnsError,
    TargetTooLongError,
)
from skipdecode.schedules import ScheduleError
from skipdecode.training.datamodule import SkipDataModule, dataset_settings, load_examples
from skipdecode.training.train import build_tokenizer, train

GROUPS = ("model", "dataset", "trainer", "logger", "schedule", "callbacks")


def _data_overrides(name: str, tmp: Path) -> list[str]:
    if name == "e2e":
        return [f"dataset.data_dir={write_e2e(tmp / 'e2e')}"]
    if name == "reddit_tldr":
        return [f"dataset.data_dir={write_summaries(tmp / 'tldr', 'prompt', 'label')}"]
    if name == "cnn_dm":
        return [f"dataset.data_dir={write_summaries(tmp / 'cnn', 'article', 'highlights')}"]
    if name == "scitldr":
        return [f"dataset.data_dir={write_summaries(tmp / 'scitldr', 'source', 'target')}"]
    if name == "chat":
        return [f"dataset.data_dir={write_summaries(tmp / 'chat', 'prompt', 'response')}"]
    return ["dataset.options.num_train=40", "dataset.options.num_validation=5"]


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(tmp_path: Path, group: str) -> None:
    for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
        cfg = make_cfg(tmp_path, [f"{group}={option}"], fast=False)
        resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
        own = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"))
        node = resolved[group]
        for key, value in own.items():  # the option's own settings are what composed
            if key == "defaults":
                continue
            assert key in node, (group, option, key)
            if not isinstance(value, (dict, list)) and not str(value).startswith("${"):
                assert node[key] == value, (group, option, key, node[key], value)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_fast_dev_run(tmp_path: Path, experiment: str) -> None:
    """Each experiment runs one step, on a tiny random model of its architecture family."""
    cfg0 = make_cfg(tmp_path, [f"experiment={experiment}"], fast=False)
    over = [
        f"experiment={experiment}",
        "trainer=cpu",
        "+trainer.fast_dev_run=1",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "loader.batch_size=4",
        *_data_overrides(cfg0.dataset.name, tmp_path),
    ]
    if cfg0.model.name == "tiny":
        over += [o for o in FAST if o.startswith("model.")]
    else:
        over += ["model.source=random", "model.gradient_checkpointing=true"]
    cfg = make_cfg(tmp_path / "run", over, fast=False)
    metrics, objects = train(cfg)
    assert metrics["global_step"] == 1
    assert objects["schedule"]["num_layers"] == cfg.model.num_layers
    for key in ("val/loss", "train/loss"):
        assert key in metrics and metrics[key] == metrics[key]  # present and not NaN


def test_schedule_layer_mismatch_names_setting(tmp_path: Path) -> None:
    cfg = make_cfg(
        tmp_path,
        ["schedule=skipdecode_2x_24l", "+trainer.fast_dev_run=1", "dataset.options.num_train=20"],
    )
    with pytest.raises(ScheduleError, match=r"schedule.num_layers=24 .*8 layers"):
        train(cfg)


def test_missing_data_dir_names_setting(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, ["dataset=e2e", f"dataset.data_dir={tmp_path / 'nope'}"], fast=False)
    with pytest.raises(DataNotFoundError, match="data_dir="):
        train(cfg)


def test_missing_columns_and_empty_split(tmp_path: Path) -> None:
    bad = write_e2e(tmp_path / "bad", columns=("meaning", "text"))
    cfg = make_cfg(tmp_path, ["dataset=e2e", f"dataset.data_dir={bad}"], fast=False)
    with pytest.raises(MissingColumnsError, match=r"lacks column\(s\) \['mr', 'ref'\]"):
        load_examples(dataset_settings(OmegaConf.to_container(cfg.dataset, resolve=True)), "train")
    cfg = make_cfg(tmp_path, ["dataset.limit_train=0"])
    with pytest.raises(EmptySplitError, match="split 'train' is empty"):
        train(cfg)
    ds = dataset_settings(OmegaConf.to_container(make_cfg(tmp_path).dataset, resolve=True))
    with pytest.raises(ValueError, match=r"dataset\.limit_validation=2\.5 is not allowed"):
        load_examples({**ds, "limit_validation": 2.5}, "validation")  # not "every input"


def test_long_targets_counted_reported_or_rejected(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, ["dataset.max_target_tokens=12"])
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    ds = dataset_settings(OmegaConf.to_container(cfg.dataset, resolve=True))
    examples = load_examples(ds, "train")
    tok = build_tokenizer(model_cfg, ds, examples, Path(cfg.paths.cache_dir))
    dm = SkipDataModule(ds, tok, train_examples=examples).prepare()
    report = dm.truncation_summary()["train"]
    assert report["long_targets"] > 0 and report["max_target_tokens"] == 12
    assert max(len(e.target_ids) for e in dm.train_set) == 12
    with pytest.raises(TargetTooLongError, match="max_target_tokens=12"):
        SkipDataModule({**ds, "on_long_target": "error"}, tok, train_examples=examples).prepare()


def test_shard_config_builds_the_sharded_strategy(tmp_path: Path) -> None:
    """``trainer=fsdp``: FSDP2 through Lightning's ModelParallelStrategy, data parallel only,
    full checkpoints, workers spawned; an unknown launcher is refused by name."""
    from hydra.utils import instantiate

    from skipdecode.training.sharding import ShardedStrategy

    cfg = make_cfg(tmp_path, ["trainer=fsdp", "model=opt-1.3b"], fast=False)
    strategy = instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, ShardedStrategy) and strategy.start_method == "spawn"
    assert not strategy._save_distributed_checkpoint and strategy._tensor_parallel_size == 1
    assert cfg.trainer.precision == "bf16-mixed" and not cfg.trainer.use_distributed_sampler
    with pytest.raises(ValueError, match="start_method='forkserver' is not allowed"):
        ShardedStrategy(start_method="forkserver")


def test_wandb_logger_is_offline_and_writes_into_output_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = make_cfg(tmp_path, ["logger=many"])
    loggers = instantiate_loggers(cfg.logger)
    wandb_logger = [lg for lg in loggers if type(lg).__name__ == "WandbLogger"][0]
    assert wandb_logger._offline is True
    assert Path(wandb_logger.save_dir) == tmp_path


def test_a_target_schedule_is_fitted_to_the_validation_lengths_when_asked(tmp_path: Path) -> None:
    """``schedule.lengths=validation``: the trained schedule is the target rule fitted over every
    validation target length; run_info records what it plans there."""
    import json

    from skipdecode.data import get_task, target_lengths
    from skipdecode.schedules import linear_for_speedup

    over = ["schedule=target_3x", "schedule.lengths=validation", "+trainer.fast_dev_run=1"]
    cfg = make_cfg(tmp_path, over)
    _, objects = train(cfg)
    data = objects["datamodule"]
    settings = dataset_settings(OmegaConf.to_container(cfg.dataset, resolve=True))
    val = load_examples(settings, "validation")
    lengths = target_lengths(val, data.tokenizer, task=get_task(settings["name"]))
    assert lengths == data.validation_lengths and len(set(lengths)) > 1
    fitted = linear_for_speedup(cfg.model.num_layers, 3, data.expected_length, lengths=lengths)
    assert objects["schedule"] == fitted.describe()
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["planned_speedup"] == pytest.approx(fitted.theoretical_speedup(lengths))
    # the memory plan made before the weights were built: the model's own parameter count
    plan = info["memory_plan"]
    assert plan["params"] == info["num_parameters"] and plan["strategy"] == "single"
    assert plan["total"] > plan["weights"] > 0 and plan["checked"].startswith("not checked")
