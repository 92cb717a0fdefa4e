"""Every supported decoder family trains one step through the Lightning module under a skip
schedule, and its export reloads with identical logits."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from tiny_models import ARCHS
from torch.utils.data import DataLoader

from skipdecode.core.engine import SkipDecoder
from skipdecode.data import (
    TrainCollator,
    encode_examples,
    get_task,
    load_split,
    train_bpe_tokenizer,
)
from skipdecode.models.loading import ModelConfigError, build_model, load_pretrained_dir
from skipdecode.training.export import export_checkpoint
from skipdecode.training.module import SkipDecodeLitModule

SPECIAL = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id")


@pytest.fixture(scope="module")
def data():
    task = get_task("synthetic")
    examples = load_split("synthetic", "train", seed=0, num_train=16, num_validation=4, num_test=4)
    tok = train_bpe_tokenizer(
        [task.full_text(e.source, e.target) for e in examples], vocab_size=300
    )
    encoded, _ = encode_examples(tok, examples[:8], task, 48, 24)
    return tok, encoded


def _model_cfg(model_type: str) -> dict:
    arch = {k: v for k, v in ARCHS[model_type].items() if k not in SPECIAL}
    arch["n_layer" if model_type == "gpt2" else "num_hidden_layers"] = 4
    return {
        "name": f"tiny-{model_type}",
        "source": "scratch",
        "arch": {"model_type": model_type, **arch},
        "attn_implementation": "eager" if model_type == "gemma2" else "sdpa",
        "dtype": "float32",
    }


def _one_step_trainer(**settings) -> pl.Trainer:
    return pl.Trainer(
        max_steps=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **settings,
    )


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_one_training_step_and_export_round_trip(model_type, data, tmp_path):
    tok, encoded = data
    module = SkipDecodeLitModule(
        model=_model_cfg(model_type),
        schedule={"name": "target", "target_speedup": 2},
        optimizer={"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 1e-3},
        expected_length=12,
        dataset={"name": "synthetic"},
        validate_full=False,
        tokenizer=tok,
    )
    before = [p.detach().clone() for p in module.model.parameters()]
    trainer = _one_step_trainer(limit_val_batches=0)
    loader = DataLoader(encoded, batch_size=4, collate_fn=TrainCollator(tok))
    trainer.fit(module, train_dataloaders=loader)
    assert trainer.global_step == 1
    changed = [
        not torch.equal(a, b) for a, b in zip(before, module.model.parameters(), strict=True)
    ]
    assert any(changed)  # the step updated the weights
    ckpt = tmp_path / "one.ckpt"
    trainer.save_checkpoint(ckpt)
    export = export_checkpoint(ckpt, tmp_path / "export")
    reloaded, _, meta = load_pretrained_dir(export)
    assert meta["schedule"]["name"] == "linear"
    ids = torch.tensor([[5, 9, 17, 23, 42]])
    module.model.eval()
    with torch.no_grad():
        ours = SkipDecoder(module.model).forward(ids)
        theirs = SkipDecoder(reloaded).forward(ids)
    torch.testing.assert_close(theirs, ours, atol=0, rtol=0)


def test_gemma2_refuses_attention_that_drops_its_softcap(data):
    tok, _ = data
    cfg = _model_cfg("gemma2") | {"attn_implementation": "sdpa"}
    with pytest.raises(ModelConfigError, match="attn_implementation='sdpa' cannot run gemma2"):
        build_model(cfg, tok)


@pytest.mark.parametrize(
    "name",
    [
        "opt-125m",
        "qwen3-0.6b",
        "llama-3.2-1b",
        "gemma-3-1b",
        "phi-3-mini",
        "olmo-2-1b",
        "pythia-1b",
    ],
)
def test_hub_model_configs_build_their_family_and_layer_count(name, data):
    """Each hub config, built offline as a tiny random model of its family (model.source=random),
    has its real layer count and runs through the engine; the real weights need the hub."""
    from omegaconf import OmegaConf
    from train_utils import CONF

    cfg = OmegaConf.to_container(
        OmegaConf.merge(OmegaConf.load(CONF / "model" / f"{name}.yaml"), {"source": "random"}),
        resolve=False,
    )
    cfg["arch"]["num_hidden_layers"] = cfg["num_layers"]
    tok, _ = data
    model = build_model(cfg, tok).eval()
    assert model.config.model_type == cfg["arch"]["model_type"] == cfg["family"]
    dec = SkipDecoder(model)
    assert dec.num_layers == cfg["num_layers"]
    with torch.no_grad():
        logits = dec.forward(torch.tensor([[5, 9, 17]]))
    assert logits.shape == (1, 3, len(tok))


def test_a_lossless_schedule_settled_at_evaluation_trains_and_validates_its_draft(data):
    """threshold: calibrate and draft_vocab: N are chosen at evaluation; training and validation
    need only the draft plan (validation logs the draft plan's loss beside the full one's)."""
    tok, encoded = data
    schedule = {
        "name": "speculative",
        "draft": {"name": "budgets", "budgets": [2], "warmup_layers": 1},
        "threshold": "calibrate",
        "draft_vocab": 64,
    }
    module = SkipDecodeLitModule(
        model=_model_cfg("llama"),
        schedule=schedule,
        optimizer={"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 1e-3},
        expected_length=12,
        dataset={"name": "synthetic"},
        validate_full=False,
        tokenizer=tok,
    )
    assert module.schedule.draft_plan.describe()["budgets"] == [2]
    trainer = _one_step_trainer(num_sanity_val_steps=0)
    loader = DataLoader(encoded, batch_size=4, collate_fn=TrainCollator(tok))
    trainer.fit(module, train_dataloaders=loader)
    (metrics,) = trainer.validate(module, loader, verbose=False)
    assert trainer.global_step == 1 and {"val/loss", "val/loss_draft"} <= set(metrics)
    assert metrics["val/loss_draft"] != metrics["val/loss"]
