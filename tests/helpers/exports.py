"""Shared helpers for the evaluate/sweep tests: a tiny exported model directory, config compose."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import OPTConfig, OPTForCausalLM

from skipdecode.data import get_task, load_split, train_bpe_tokenizer

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
SYNTH = {"num_train": 60, "num_validation": 5, "num_test": 12}

# The tiny model and data shrunk so that one cell trains and evaluates in seconds.
SHRINK = [
    "model=tiny",
    "dataset=synthetic",
    "trainer=cpu",
    "logger=csv",
    "eval=fast",
    "model.arch.hidden_size=32",
    "model.arch.word_embed_proj_dim=32",
    "model.arch.ffn_dim=64",
    "model.tokenizer.vocab_size=300",
    "dataset.options.num_train=40",
    "dataset.options.num_validation=4",
    "dataset.options.num_test=6",
    "loader.batch_size=4",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "module.validate_full=false",
    "eval.limit=4",
    "eval.generation.batch_size=2",
    "eval.generation.max_new_tokens=8",
]


def make_exported_dir(
    out: Path, num_layers: int = 4, schedule: dict | None = None, seed: int = 0, width: int = 32
) -> Path:
    """An untrained tiny OPT + BPE tokenizer saved like an export (with skipdecode.json)."""
    task = get_task("synthetic")
    train = load_split("synthetic", "train", seed=0, **SYNTH)
    tok = train_bpe_tokenizer([task.full_text(e.source, e.target) for e in train], vocab_size=300)
    torch.manual_seed(seed)
    cfg = OPTConfig(
        vocab_size=len(tok),
        hidden_size=width,
        word_embed_proj_dim=width,
        num_hidden_layers=num_layers,
        ffn_dim=4 * width,
        num_attention_heads=4,
        max_position_embeddings=256,
        dropout=0.0,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = OPTForCausalLM(cfg).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    meta = {
        "schedule": schedule or {"name": "full", "num_layers": num_layers},
        "dataset": {
            "name": "synthetic",
            "data_dir": None,
            "seed": 0,
            "options": SYNTH,
            "max_source_tokens": 96,
        },
        "expected_length": 16,
    }
    (out / "skipdecode.json").write_text(json.dumps(meta))
    return out


def compose(config_name: str, overrides: list[str], return_hydra_config: bool = False):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import skipdecode.config  # noqa: F401  (registers the config resolvers)

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(
            config_name=config_name, overrides=overrides, return_hydra_config=return_hydra_config
        )


def make_fake_sweep(sweep_dir: Path) -> Path:
    """A sweep directory as an interrupted multirun leaves it: 3 finished cells, one failed, one
    interrupted (status running) and one planned but never started."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    cells = [
        ("full", 1.0, 1.0, 1.0, 30.0),
        ("target_2x", 2.0, 1.9, 1.6, 27.5),
        ("target_4x", 4.0, 3.7, 2.4, 20.1),
    ]
    for num, (sched, target, theor, meas, bleu) in enumerate(cells):
        job = sweep_dir / str(num)
        rec_dir = sweep_dir / "cells" / sched / "eval"
        rec_dir.mkdir(parents=True, exist_ok=True)
        (rec_dir / "generations.jsonl").write_text(
            json.dumps(
                {
                    "index": 0,
                    "input": "name[Aromi]",
                    "references": ["Aromi is a pub."],
                    "output": "Aromi is a pub.",
                }
            )
            + "\n"
        )
        record = {
            "summary": {
                "bleu": bleu,
                "rougeL": bleu / 60,
                "bertscore_f1": 0.8 + bleu / 1000,
                "theoretical_speedup": theor,
                "measured_speedup_decode": meas,
                "measured_speedup_e2e": meas * 0.8,
                "tokens_per_second": 100 * meas,
                "mean_generated_length": 20.0,
            },
            "speed": {
                "layers_per_token": 8 / theor,
                "theoretical_speedup": theor,
                "measured_speedup_decode": meas,
                "measured_speedup_e2e": meas * 0.8,
                "tokens_per_second": 100 * meas,
            },
            "quality": {"bleu": {"score": bleu, "signature": "nrefs:var|case:mixed|tok:13a"}},
            "schedule": {"name": "linear" if target > 1 else "full"},
            "dataset": {"name": "synthetic"},
            "config": {"output_dir": str(rec_dir)},
            "files": {"generations": "generations.jsonl"},
            "provenance": {"git": {"commit": "abc123"}},
        }
        (rec_dir / "record.json").write_text(json.dumps(record))
        job.mkdir(parents=True, exist_ok=True)
        (job / "cell.json").write_text(
            json.dumps(
                {
                    "status": "ok",
                    "model": "tiny",
                    "dataset": "synthetic",
                    "schedule": sched,
                    "target_speedup": target,
                    "cell_id": f"id{num}",
                    "record": str(rec_dir / "record.json"),
                }
            )
        )
    (sweep_dir / "3").mkdir(exist_ok=True)
    (sweep_dir / "3" / "cell.json").write_text(
        json.dumps(
            {
                "status": "failed",
                "model": "tiny",
                "dataset": "synthetic",
                "schedule": "skipdecode_2x_24l",
                "error": "EvaluationError: schedule is built for 24 layers",
                "cell_id": "id3",
            }
        )
    )
    (sweep_dir / "4").mkdir(exist_ok=True)
    (sweep_dir / "4" / "cell.json").write_text(
        json.dumps(
            {
                "status": "running",
                "model": "tiny",
                "dataset": "synthetic",
                "schedule": "target_5x",
                "cell_id": "id4",
            }
        )
    )
    (sweep_dir / "plan.json").write_text(
        json.dumps(
            {
                "jobs": [
                    {"num": i, "overrides": [f"schedule={s}"]}
                    for i, s in enumerate(
                        [
                            "full",
                            "target_2x",
                            "target_4x",
                            "skipdecode_2x_24l",
                            "target_5x",
                            "target_3x",
                        ]
                    )
                ]
            }
        )
    )
    return sweep_dir


def write_published_cell(job_dir: Path, rows: list[dict], record: dict, cell: dict) -> None:
    """A finished cell as a published sweep holds it: ``generations.jsonl`` (``rows``),
    ``record.json`` naming that file, and ``cell.json`` (status ok) naming the record."""
    job_dir.mkdir(parents=True)
    (job_dir / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = {**record, "files": {"generations": "generations.jsonl"}}
    (job_dir / "record.json").write_text(json.dumps(record))
    cell = {"status": "ok", **cell, "record": "record.json"}
    (job_dir / "cell.json").write_text(json.dumps(cell))
