"""A copy of a model directory with freshly initialised weights: the same config, tokenizer and
every other file, only ``model.safetensors`` new (seeded). For runs where the shape alone matters
(a GPU run's memory peak or timing) and the real weights cannot travel to the machine; the copy
loads with ``model.source=local model.pretrained=OUT``.

    python scripts/random_weights.py SRC OUT [--seed 0] [--device cuda]

SRC needs ``config.json`` (its weights, if any, are not copied); OUT is written whole or not at
all (a temporary folder renamed into place) and must not exist.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def random_copy(src: Path, out: Path, seed: int = 0, device: str = "cpu") -> Path:
    if not (src / "config.json").is_file():
        raise SystemExit(f"SRC={src}: no config.json there (a transformers model directory)")
    if out.exists():
        raise SystemExit(f"OUT={out} exists; give a new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for f in src.iterdir():
            if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES):
                shutil.copy2(f, tmp / f.name)
        config = AutoConfig.from_pretrained(src)
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "config.json").write_text((src / "config.json").read_text())  # as it was
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="where to initialise (cuda is faster)")
    args = parser.parse_args(argv)
    out = random_copy(args.src, args.out, args.seed, args.device)
    print(f"wrote {out} (random weights, seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
