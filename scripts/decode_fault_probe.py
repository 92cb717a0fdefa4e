"""Which decode variant faults on a GPU: every variant (transformers' generate eager and compiled,
skipdecode eager full, compiled and CUDA-graph full and SkipDecode schedules) called in turn,
each call synchronised, the first fault named; then each graph variant's tokens against the
compiled path's. Random weights in a benchmark shape, bf16 on CUDA (DEV=cpu: fp32 on the CPU).

    python scripts/decode_fault_probe.py SHAPE NEW_TOKENS REPEATS SPEEDUPS [--no-hf]
    python scripts/decode_fault_probe.py opt-1.3b 32 5 2,3,4,5
    compute-sanitizer --tool memcheck python scripts/decode_fault_probe.py opt-125m 6 0 2,5 --no-hf

Its two runs on an H200 are in results/bench/gpu-logs/ (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch

from skipdecode.core.costs import transformers_generate_seconds
from skipdecode.core.engine import SkipDecoder
from skipdecode.models.shapes import build_random_model, random_prompts
from skipdecode.schedules import FullSchedule, linear_for_speedup

DEV = os.environ.get("DEV", "cuda")


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def variants_of(model, decoders, ids, mask, new, speedups, hf) -> dict[str, Callable[[], Any]]:
    L = decoders[""].num_layers
    schedules = {
        "full": FullSchedule(L),
        **{f"{s}x": linear_for_speedup(L, s, new) for s in speedups},
    }
    out: dict[str, Callable[[], Any]] = {}
    if hf:
        out["hf"] = lambda: transformers_generate_seconds(model, ids, mask, new, 0, False)
        out["hf-compiled"] = lambda: transformers_generate_seconds(model, ids, mask, new, 0, True)
    for suffix, dec in decoders.items():
        for name, schedule in schedules.items():
            if suffix == "" and name != "full":
                continue
            out[name + suffix] = lambda d=dec, s=schedule: (
                d.generate(ids, s, new, mask, eos_token_id=[], decode_texts=False).generated_ids
            )
    return out


def main() -> None:
    shape, new, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    speedups = [int(x) for x in sys.argv[4].split(",")]
    hf = "--no-hf" not in sys.argv
    model = build_random_model(shape, torch.bfloat16 if DEV == "cuda" else torch.float32, DEV)
    decoders = {
        "": SkipDecoder(model),
        "-compiled": SkipDecoder(model, compile=True),
        "-graphs": SkipDecoder(model, compile="reduce-overhead"),
    }
    for batch in (1, 8):
        ids, mask = random_prompts(batch, 32, model.config.vocab_size, torch.device(DEV))
        variants = variants_of(model, decoders, ids, mask, new, speedups, hf)
        tokens: dict[str, torch.Tensor] = {}
        for call in range(repeats + 2):
            for name, fn in variants.items():
                try:
                    out = fn()
                    sync()
                except Exception as e:  # noqa: BLE001 - the first fault is the finding
                    print(f"FAULT shape={shape} B={batch} round={call} variant={name}: "
                          f"{type(e).__name__}: {str(e)[:200]}", flush=True)  # fmt: skip
                    traceback.print_exc(limit=6)
                    sys.exit(1)
                if isinstance(out, torch.Tensor):
                    tokens.setdefault(name, out)
            print(f"ok B={batch} round {call}", flush=True)
        for name, ids_out in tokens.items():
            if name.endswith("-graphs"):
                same = torch.equal(ids_out, tokens[name.replace("-graphs", "-compiled")])
                print(name, "tokens equal compiled:", same)
    print("no fault")


if __name__ == "__main__":
    main()
