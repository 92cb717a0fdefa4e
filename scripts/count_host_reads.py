"""Count the host reads of device values (``item``/``bool``/``int``/``tolist``/``nonzero``: each a
host sync on a GPU) that one decode call makes, on per-layer CUDA graphs and on whole-step graphs
(``compile_graph="step"``), for a 2x schedule and the lossless mode (k = 2, a constant 3-layer
draft), on a tiny random model; recordings made first, then one call each counted. On a CPU the
recordings are called, not replayed: the host reads are the same code's.

    python scripts/count_host_reads.py    # -> outputs/host_reads.json and a table
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from device_watch import Syncs  # noqa: E402
from tiny_models import left_padded_batch, tiny_llama  # noqa: E402

from skipdecode.core.engine import SkipDecoder  # noqa: E402
from skipdecode.io import write_json_atomic  # noqa: E402
from skipdecode.schedules import build_schedule, linear_for_speedup  # noqa: E402

NEW = 32


def main() -> None:
    model = tiny_llama(6)
    paths = {
        "per-layer graphs": SkipDecoder(model, compile="reduce-overhead"),
        "whole-step graphs": SkipDecoder(model, compile="reduce-overhead", compile_graph="step"),
    }
    ids, mask = left_padded_batch([5, 9, 4, 6], seed=6)
    draft = {"name": "budgets", "budgets": [3], "warmup_layers": 1}
    schedules = {
        "2x": linear_for_speedup(6, 2, NEW),
        "lossless k=2": build_schedule({"name": "speculative", "draft": draft, "k": 2}, 6, NEW),
    }
    for decoder in paths.values():  # record every graph first
        for schedule in schedules.values():
            decoder.generate(ids, schedule, NEW, mask, eos_token_id=[])
    monkeypatch = pytest.MonkeyPatch()
    syncs, rows = Syncs(monkeypatch), []
    for path, decoder in paths.items():
        for name, schedule in schedules.items():
            syncs.names.clear()
            with syncs.inside():
                out = decoder.generate(ids, schedule, NEW, mask, eos_token_id=[])
            spec = out.stats.speculation
            rows.append({
                "path": path, "schedule": name, "host_reads": len(syncs.names),
                "rounds": spec.rounds if spec else None,
                "steps": None if spec else out.stats.decode_steps, "graph": out.stats.graph,
            })  # fmt: skip
    monkeypatch.undo()
    for r in rows:
        unit = f"{r['rounds']} rounds" if r["rounds"] else f"{r['steps']} steps"
        print(f"{r['path']:18s} {r['schedule']:13s} {r['host_reads']:4d} host reads over {unit}")
    write_json_atomic(ROOT / "outputs" / "host_reads.json", {"new_tokens": NEW, "rows": rows})


if __name__ == "__main__":
    main()
