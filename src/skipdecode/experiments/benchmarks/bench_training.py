"""Training throughput (forward + backward of the masked forward) for full vs skip schedules on
random-weight models of real shapes: ``python -m skipdecode.bench --mode train``."""

from __future__ import annotations

import statistics
from typing import Any

import torch
from torch import nn

from ...core.costs import time_call
from ...core.engine import SkipDecoder
from ...evaluation.load import CpuLoad
from ...models.shapes import build_random_model, device_name, random_prompts
from ...schedules import FullSchedule, StaticSchedule, linear_for_speedup, position_layer_mask

__all__ = ["bench_train"]


def bench_train(
    shape: str,
    batch_size: int = 8,
    prompt_len: int = 48,
    target_len: int = 32,
    repeats: int = 3,
    speedups: tuple[int, ...] = (2, 4),
    device: str = "cpu",
) -> dict[str, Any]:
    """Training tokens/s (forward + backward of the masked forward) for full vs skip schedules."""
    dev = torch.device(device)
    model = build_random_model(shape, torch.float32, device).train()
    dec = SkipDecoder(model)
    L = dec.num_layers
    T = prompt_len + target_len
    ids, mask = random_prompts(batch_size, T, model.config.vocab_size, dev)
    prompt_lengths = torch.full((batch_size,), prompt_len)
    variants: dict[str, tuple[StaticSchedule, bool]] = {"full": (FullSchedule(L), True)}
    for s in speedups:
        sched = linear_for_speedup(L, s, target_len)
        variants[f"{s}x"] = (sched, True)
        variants[f"{s}x-masked"] = (sched, False)  # plain path: every layer on every position

    def step(schedule: StaticSchedule, slicing: bool) -> None:
        lm = position_layer_mask(schedule, prompt_lengths, T).to(dev)
        logits = dec.forward(ids, mask, lm, prefix_slicing=slicing)
        loss = nn.functional.cross_entropy(
            logits[:, prompt_len - 1 : -1].reshape(-1, logits.shape[-1]),
            ids[:, prompt_len:].reshape(-1),
        )
        loss.backward()
        model.zero_grad(set_to_none=True)

    for sched, slicing in variants.values():
        step(sched, slicing)
    times: dict[str, list[float]] = {k: [] for k in variants}
    with CpuLoad() as load:  # whether anything else shared the machine while timing
        for _ in range(repeats):
            for name, (sched, slicing) in variants.items():
                times[name].append(time_call(lambda s=sched, sl=slicing: step(s, sl), dev))
    rows = {}
    full = statistics.median(times["full"])
    for name, ts in times.items():
        t = statistics.median(ts)
        rows[name] = {
            "step_ms": 1000 * t,
            "tokens_per_s": batch_size * T / t,
            "speedup_vs_full": full / t,
            "step_s_per_repeat": ts,  # step_ms is their median
        }
    return {
        "shape": shape,
        "batch_size": batch_size,
        "prompt_len": prompt_len,
        "target_len": target_len,
        "repeats": repeats,
        "device": device_name(dev),
        "threads": torch.get_num_threads(),
        "load": load.result,
        "variants": rows,
    }
