"""Export a training checkpoint as a plain transformers directory plus ``skipdecode.json``.

The directory loads with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer`` (or
:func:`skipdecode.models.loading.load_pretrained_dir`); ``skipdecode.json`` holds what evaluation needs:
the resolved schedule (``Schedule.describe()``, a valid ``build_schedule`` config), the schedule
config it came from, the dataset name and settings, the expected length, and training metrics.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..models.loading import EXPORT_META_FILE, described_model
from .module import CKPT_KEY, SkipDecodeLitModule

__all__ = ["load_module", "export_checkpoint", "EXPORT_FORMAT_VERSION"]

EXPORT_FORMAT_VERSION = 1


def load_module(ckpt_path: str | Path, map_location: str = "cpu") -> SkipDecodeLitModule:
    """The LightningModule of a checkpoint, rebuilt without the hub (eval mode)."""
    ckpt_path = Path(ckpt_path)
    if not ckpt_path.is_file():
        raise FileNotFoundError(f"checkpoint {str(ckpt_path)!r} does not exist")
    module = SkipDecodeLitModule.load_from_checkpoint(
        str(ckpt_path), map_location=map_location, weights_only=True
    )
    return module.eval()


def _plain(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.item() if x.numel() == 1 else x.tolist()
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def export_checkpoint(
    ckpt_path: str | Path, out_dir: str | Path, metrics: Mapping[str, Any] | None = None
) -> Path:
    """Write ``out_dir`` (model + tokenizer + ``skipdecode.json``) from ``ckpt_path``.

    ``metrics`` (e.g. final training metrics) are recorded beside those stored in the checkpoint.
    The directory is written to a temporary sibling and renamed into place.
    """
    ckpt_path, out_dir = Path(ckpt_path), Path(out_dir)
    checkpoint = torch.load(str(ckpt_path), map_location="cpu", weights_only=True)
    info = checkpoint.get(CKPT_KEY)
    if not info:
        raise ValueError(
            f"{ckpt_path} is not a skipdecode training checkpoint (no {CKPT_KEY!r} entry)"
        )
    module = load_module(ckpt_path)
    if module.tokenizer is None:
        raise ValueError(
            f"{ckpt_path} holds no tokenizer files; cannot export a complete directory"
        )

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        model = module.model
        model.generation_config.pad_token_id = module.tokenizer.pad_token_id
        model.save_pretrained(str(tmp), safe_serialization=True)
        module.tokenizer.save_pretrained(str(tmp))
        meta = {
            "format_version": EXPORT_FORMAT_VERSION,
            "schedule": info["schedule"],
            "schedule_config": info.get("schedule_config"),
            "expected_length": info.get("expected_length"),
            "dataset": info.get("dataset"),
            "model": described_model(info.get("model") or {}, model),
            "num_layers": module.decoder.num_layers,
            "global_step": checkpoint.get("global_step", info.get("global_step")),
            "checkpoint": str(ckpt_path.resolve()),
            "checkpoint_metrics": _plain(info.get("metrics") or {}),
            "metrics": _plain(dict(metrics or {})),
        }
        (tmp / EXPORT_META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.chmod(tmp, 0o755)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
