"""``compile="auto"``: the fastest exact decode path for the device the model is on.

On a CUDA device: CUDA graphs with whole-step graphs and sync-free lossless rounds
(``compile="reduce-overhead"``, ``compile_graph="step"``). On a CPU: whichever path the
committed CPU benchmark (``results/bench/decode-cpu.json``, ``make bench``) timed faster for the
full schedule, eager or compiled, at most of its batch sizes, for its shape nearest the model in
layer count; the reference eager path where that record is not there. Every path is exact (the
tests hold each to the eager path's tokens), so the choice changes speed only; the decoder keeps
what was asked for and what ran (``SkipDecoder.options``, ``options.chosen_because``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

__all__ = ["CPU_RECORD", "auto_choice"]

#: The committed CPU benchmark the CPU choice reads (from the repository root).
CPU_RECORD = Path(__file__).resolve().parents[3] / "results" / "bench" / "decode-cpu.json"


def auto_choice(
    device: torch.device, num_layers: int, record: Path = CPU_RECORD
) -> tuple[bool | str, str, str]:
    """``(compile, compile_graph, why)`` for a model of ``num_layers`` layers on ``device``."""
    if device.type == "cuda":
        return "reduce-overhead", "step", "a CUDA device: whole-step CUDA graphs"
    if not record.is_file():
        return False, "layer", f"no committed CPU benchmark ({record.name}): the eager path"
    cells = json.loads(record.read_text()).get("cells") or []
    if not cells:
        return False, "layer", f"{record.name} holds no cells: the eager path"
    nearest = min({c["num_layers"] for c in cells}, key=lambda n: (abs(n - num_layers), n))
    faster, timed = 0, 0
    for cell in (c for c in cells if c["num_layers"] == nearest):
        rows = cell["variants"]
        eager, compiled = rows.get("skipdecode-full"), rows.get("skipdecode-full-compiled")
        if eager is None or compiled is None:
            continue
        timed += 1
        faster += compiled["decode_ms_per_step"] < eager["decode_ms_per_step"]
    shape = next(c["shape"] for c in cells if c["num_layers"] == nearest)
    if timed and 2 * faster > timed:
        return (
            True,
            "layer",
            (
                f"{record.name}: compiled faster than eager at {faster} of {timed} batch sizes "
                f"({shape}, {nearest} layers)"
            ),
        )
    return (
        False,
        "layer",
        (
            f"{record.name}: eager as fast or faster at {timed - faster} of {timed} batch sizes "
            f"({shape}, {nearest} layers)"
        ),
    )
