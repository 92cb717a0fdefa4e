"""What whole-step graphs cost to keep (``compile_graph="step"``): for a schedule at each of a
few output lengths, how many graphs one decode records (one per distinct plan), how long the
recording takes, and the device memory it adds; measured on a fresh decoder after a cell's timed
calls, never inside them."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from ...core.engine import SkipDecoder
from ...core.options import CUDA_GRAPH_MODE
from ...core.step_graphs import distinct_plans
from ...schedules import linear_for_speedup

__all__ = ["step_graph_costs"]


def _memory(device: torch.device) -> tuple[int, int]:
    if device.type != "cuda":
        return 0, 0
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)


def step_graph_costs(
    model: nn.Module,
    prompts: tuple[torch.Tensor, torch.Tensor],
    speedup: int = 2,
    lengths: tuple[int, ...] = (32, 256),
) -> list[dict[str, Any]]:
    """One row per output length: the ``speedup``x linear schedule for that length, the graphs
    a first decode recorded and the plans it has, seconds spent recording (compiling shapes not
    seen before included) and the device memory allocated and reserved since (0 off a GPU)."""
    ids, mask = prompts
    rows = []
    for n in lengths:
        decoder = SkipDecoder(model, compile=CUDA_GRAPH_MODE, compile_graph="step")
        schedule = linear_for_speedup(decoder.num_layers, speedup, n)
        plans = [tuple(schedule.static().active_layers(g)) for g in range(n - 1)]
        before = _memory(ids.device)
        start = time.perf_counter()
        out = decoder.generate(ids, schedule, n, mask, eos_token_id=[], decode_texts=False)
        wall = time.perf_counter() - start
        after = _memory(ids.device)
        graphs = decoder.compiled.steps
        rows.append(
            {
                "schedule": f"{speedup}x",
                "new_tokens": n,
                "plans": distinct_plans(plans),
                "graphs_recorded": graphs.recorded,
                "graph": out.stats.graph,
                "record_s": graphs.record_seconds,
                "first_call_s": wall,
                "allocated_mib": (after[0] - before[0]) / 2**20,
                "reserved_mib": (after[1] - before[1]) / 2**20,
                "limit": graphs.limit,
            }
        )
    return rows
