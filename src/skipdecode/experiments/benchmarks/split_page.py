"""Where skipping pays: a CPU decode record's cost split as a page, written by ``make docs``.

Layer skipping only shortens the layers; what a step spends outside them (embedding, final norm,
LM head, token choice) stays. For each cell of a decode benchmark record (``make bench``,
``make study NAME=where_skipping_pays``) the page gives the full step, eager ``generate``, the
bandwidth floor, the share outside the layers (and the head's), the ceiling no skip schedule can
pass (full step / time outside the layers), and each schedule's measured decode speedup beside
its ideal one. ``<stem>-split.md`` beside ``<stem>.json``; never typed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...io import read_record, write_text_atomic
from ...provenance import diff_missing

__all__ = ["SPLIT_RECORDS", "split_page", "write_split_pages"]

#: The decode records under ``results/bench/`` whose cost split gets a page.
SPLIT_RECORDS = ("where-skipping-pays-cpu", "decode-cpu")


def _speedup(variant: dict[str, Any] | None) -> str:
    if not variant or variant.get("measured_speedup") is None:
        return ""
    return f"{variant['measured_speedup']:.2f}x ({variant['ideal_speedup']:.2f}x)"


def _row(cell: dict[str, Any], speedups: list[str]) -> str:
    split, variants = cell["cost_split"], cell["variants"]
    full = variants["skipdecode-full"]
    floor = full.get("bandwidth_floor_ms", full.get("floor_ms"))
    generate = (variants.get("transformers-generate") or {}).get("decode_ms_per_step")
    cells = [
        cell["shape"],
        str(cell["batch_size"]),
        f"{split['full_step_ms']:.2f}",
        "" if generate is None else f"{generate:.2f}",
        "" if floor is None else f"{floor:.2f}",
        f"{100 * split['non_layer_fraction']:.1f}% ({100 * split['head_fraction']:.1f}%)",
        f"{split['full_step_ms'] / split['non_layer_ms']:.1f}x",
        *(_speedup(variants.get(f"skipdecode-{s}x")) for s in speedups),
    ]
    return "| " + " | ".join(cells) + " |"


def split_page(record: dict[str, Any], name: str) -> str:
    """The page for one record (``name`` its file stem)."""
    speedups = [str(s) for s in json.loads(record["args"]["speedups"])]
    git = (record.get("provenance") or {}).get("git") or {}
    state = "a clean checkout"
    if git.get("dirty"):
        state = "uncommitted changes" + (
            " whose diff the record does not keep" if diff_missing(record["provenance"]) else ""
        )
    head = [
        f"# Where skipping pays: `{name}`",
        "",
        f"Written by `make docs` from `{name}.json` (commit {str(git.get('commit'))[:12]}, "
        f"{state}); the eager path, where the cost split is measured. `outside the layers` is "
        "the share of a full decode step spent outside the decoder layers (the LM head's share "
        "in brackets); `ceiling` = full step / that time, the decode speedup no skip schedule "
        "can pass; each schedule's column is its measured decode speedup (its ideal one, from "
        "the split).",
        "",
        "| shape | batch | full step ms | `generate` eager ms | bandwidth floor ms "
        "| outside the layers (LM head) | ceiling | "
        + " | ".join(f"{s}x: measured (ideal)" for s in speedups)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(speedups),
    ]
    rows = [_row(cell, speedups) for cell in record["cells"]]
    return "\n".join(head + rows) + "\n"


def write_split_pages(results: Path) -> list[Path]:
    """Write the page of every record in :data:`SPLIT_RECORDS` that exists under
    ``results/bench``; returns the pages written."""
    written = []
    for name in SPLIT_RECORDS:
        path = results / "bench" / f"{name}.json"
        if path.is_file():
            page = path.with_name(f"{name}-split.md")
            write_text_atomic(page, split_page(read_record(path), name))
            written.append(page)
    return written
