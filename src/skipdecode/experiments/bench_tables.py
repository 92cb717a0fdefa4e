"""Markdown tables of benchmark results (decode: per variant and the cost split; training), the
one way a benchmark writes them, and the command-line options every benchmark shares."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from ..io import write_json_atomic
from ..provenance import provenance

__all__ = ["add_run_options", "decode_table", "train_table", "write_bench"]


def add_run_options(p: argparse.ArgumentParser, name: str | None) -> None:
    """Options shared by the benchmarks: dtype, device, whether to time transformers'
    ``generate``, where the results go (``--out``, ``--name`` defaulting to ``name``), progress."""
    p.add_argument("--no-transformers", action="store_true", help="skip transformers' generate")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, default=Path("outputs/bench"))
    p.add_argument("--name", default=name, help="file stem for the JSON and Markdown outputs")
    p.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=None,
        help="no progress bar (default: shown on a terminal)",
    )


def write_bench(out: Path, stem: str, payload: dict[str, Any], table: str) -> None:
    """``<out>/<stem>.json`` (``payload`` with the arguments as strings and the provenance) and
    ``<out>/<stem>.md`` (``table``); prints the table and where they went."""
    out.mkdir(parents=True, exist_ok=True)
    payload = dict(payload)
    payload["args"] = {k: str(v) for k, v in (payload.get("args") or {}).items()}
    write_json_atomic(out / f"{stem}.json", {**payload, "provenance": provenance()})
    (out / f"{stem}.md").write_text(table)
    print(table)
    print(f"wrote {out / (stem + '.json')} and {out / (stem + '.md')}")


def decode_table(cells: list[dict[str, Any]]) -> str:
    head = (
        "| shape | batch | variant | prefill ms | decode ms/step | tok/s | theor. | measured | "
        "ideal | efficiency |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for c in cells:
        for name, r in c["variants"].items():

            def f(key, fmt="{:.2f}", r=r):
                return fmt.format(r[key]) if key in r else ""

            lines.append(
                f"| {c['shape']} | {c['batch_size']} | {name} | {f('prefill_ms', '{:.1f}')} | "
                f"{f('decode_ms_per_step')} | {f('tokens_per_s', '{:.1f}')} | "
                f"{f('theoretical_speedup')} | {f('measured_speedup')} | {f('ideal_speedup')} | "
                f"{f('efficiency')} |"
            )
    split = [
        "",
        "| shape | batch | full step ms | outside layers ms | LM head ms | outside layers % | "
        "overhead (excl. head) % |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        s = c["cost_split"]
        split.append(
            f"| {c['shape']} | {c['batch_size']} | {s['full_step_ms']:.2f} | "
            f"{s['non_layer_ms']:.2f} | {s['head_ms']:.2f} | "
            f"{100 * s['non_layer_fraction']:.1f} | {100 * s['overhead_fraction']:.1f} |"
        )
    return head + "\n".join(lines) + "\n" + "\n".join(split) + "\n"


def train_table(cells: list[dict[str, Any]]) -> str:
    out = [
        "| shape | batch | variant | step ms | tokens/s | speedup vs full |",
        "|---|---|---|---|---|---|",
    ]
    for c in cells:
        for name, r in c["variants"].items():
            out.append(
                f"| {c['shape']} | {c['batch_size']} | {name} | {r['step_ms']:.1f} | "
                f"{r['tokens_per_s']:.0f} | {r['speedup_vs_full']:.2f} |"
            )
    return "\n".join(out) + "\n"
