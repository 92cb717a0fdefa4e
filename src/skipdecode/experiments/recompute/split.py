"""A decode record's cost split, what it predicts, and the where-skipping-pays pages, recomputed.

Own arithmetic on every decode benchmark cell (``results/bench/decode-*.json``, ``where-*.json``)
that keeps a cost split of a full step (``cost_split``: the eager path; ``cost_split_<path>``:
another path's): the eager path's shares (outside the layers, the head, the rest of what lies
outside) over its full step, and its time a layer (the full step less the time outside, over the
layers); the full step is the path's full variant's ms per step. Each SkipDecode variant's
theoretical speedup is the layers over its layers per token; its ideal speedup, from its path's
split, is full / (outside + m x (full - outside) / L) for ``m`` layers a token; its efficiency,
measured over ideal; its multiples of the floors, its ms over each floor's. Then each
``<stem>-split.md`` page ``make docs`` writes from such a record, and the cell table of the
record's own page (the split, the compiled path's, the floors, the device's limits, the graph
counts, the failures and the load beside the timing): every row, found by shape and batch, prints
those figures at the printed digits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..benchmarks.bench_tables import failed_text
from ..sweeps.excerpts import page_tables
from .findings import Findings, check_rows, tables_of

__all__ = ["check_splits", "path_of"]


def path_of(name: str) -> str:
    """``skipdecode-2x-compiled`` -> ``-compiled``; ``skipdecode-full`` -> ``""``."""
    parts = name.split("-")
    return "".join(f"-{p}" for p in parts[2:])


def _split_of(cell: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    return cell.get("cost_split" + path.replace("-", "_"))


def _step_and_outside(cell: Mapping[str, Any], path: str) -> tuple[float, float] | None:
    """The path's full step (its full variant's ms per step) and the time outside the layers
    (the split's, capped at the step), or None without both."""
    split = _split_of(cell, path)
    full = (cell["variants"].get(f"skipdecode-full{path}") or {}).get("decode_ms_per_step")
    if not split or full is None:
        return None
    return full, min(split["non_layer_ms"], full)


def _check_split(where: str, cell: Mapping[str, Any], path: str, found: Findings) -> None:
    got = _step_and_outside(cell, path)
    if got is None:
        return
    (step, outside), split = got, _split_of(cell, path)
    head = split["head_ms"]
    where = f"{where} cost_split{path.replace('-', '_')}"
    for key, value in (
        ("full_step_ms", step),
        ("non_layer_fraction", outside / step),
        ("head_fraction", min(head, step) / step),
        ("overhead_fraction", max(outside - head, 0.0) / step),
        ("per_layer_ms", (step - outside) / cell["num_layers"]),
    ):
        if key in split:
            found.compare(where, key, split[key], value)


def _check_variant(
    where: str, cell: Mapping[str, Any], name: str, r: Mapping[str, Any], found: Findings
) -> None:
    where, layers, ms = f"{where} {name}", cell["num_layers"], r["decode_ms_per_step"]
    if r.get("theoretical_speedup") is not None:
        found.compare(
            where, "theoretical_speedup", r["theoretical_speedup"], layers / r["layers_per_token"]
        )
    got = _step_and_outside(cell, path_of(name))
    if r.get("ideal_speedup") is not None and got is None:
        found.skip(
            "ideal speedups of a path whose cost split the record does not keep "
            "(CUDA-graph paths, written before every path's split was kept)"
        )
    elif r.get("ideal_speedup") is not None:
        step, outside = got
        ideal = step / (outside + r["layers_per_token"] * (step - outside) / layers)
        found.compare(where, "ideal_speedup", r["ideal_speedup"], ideal)
        found.compare(where, "efficiency", r.get("efficiency"), r["measured_speedup"] / ideal)
    elif got is not None and r.get("efficiency") is not None:
        found.differences.append(f"{where}: an efficiency without its ideal speedup")
    for floor in ("floor", "bandwidth_floor", "compute_floor"):
        if r.get(f"{floor}_ms"):
            found.compare(
                where, f"{floor}_multiple", r.get(f"{floor}_multiple"), ms / r[f"{floor}_ms"]
            )


def _page_row(cell: Mapping[str, Any], speedups: list[str]) -> dict[str, list[Any]]:
    split, variants = cell["cost_split"], cell["variants"]
    full = variants["skipdecode-full"]
    generate = variants.get("transformers-generate") or {}
    row = {
        "full step ms": [split["full_step_ms"]],
        "`generate` eager ms": [generate.get("decode_ms_per_step")],
        "bandwidth floor ms": [full.get("bandwidth_floor_ms", full.get("floor_ms"))],
        "outside the layers (LM head)": [
            100 * split["non_layer_ms"] / split["full_step_ms"],
            100 * split["head_ms"] / split["full_step_ms"],
        ],
        "ceiling": [split["full_step_ms"] / split["non_layer_ms"]],
    }
    for s in speedups:
        v = variants.get(f"skipdecode-{s}x") or {}
        row[f"{s}x: measured (ideal)"] = [v.get("measured_speedup"), v.get("ideal_speedup")]
    return row


def _shape_batch(row: dict[str, str]) -> tuple[str, ...]:
    return (row.get("shape", ""), row.get("batch", ""))


def _check_page(path: Path, record: Mapping[str, Any], found: Findings) -> None:
    page = path.with_name(f"{path.stem}-split.md")
    if not page.is_file():
        return
    tables = page_tables(page.read_text(encoding="utf-8"))
    speedups = [str(s) for s in json.loads(record["args"]["speedups"])]
    expected = {(c["shape"], str(c["batch_size"])): _page_row(c, speedups) for c in record["cells"]}
    table = tables[0] if tables else ([], [])
    check_rows(found, f"bench/{page.name}", table, expected, _shape_batch)


def _cell_row(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A decode page's cell-table row: the eager split (its shares recomputed), the compiled
    path's, the full variant's floors, the device's limits and the graph counts."""
    split, full = cell["cost_split"], cell["variants"]["skipdecode-full"]
    step, outside, head = split["full_step_ms"], split["non_layer_ms"], split["head_ms"]
    compiled, limits, load = (
        cell.get("cost_split_compiled"),
        cell.get("limits") or {},
        cell.get("load") or {},
    )
    return {
        "full step ms": [step],
        "outside layers ms": [outside],
        "LM head ms": [head],
        "outside layers %": [100 * outside / step],
        "overhead (excl. head) %": [100 * max(outside - head, 0.0) / step],
        "compiled: outside layers / head ms": [compiled["non_layer_ms"], compiled["head_ms"]]
        if compiled
        else [],
        "bandwidth floor (full) ms": [full.get("bandwidth_floor_ms")],
        "compute floor (full) ms": [full.get("compute_floor_ms")],
        "bandwidth GB/s": [limits.get("bandwidth_gb_s")],
        "peak TFLOP/s": [limits.get("peak_tflops")],
        "graphs compiled while timed": [cell.get("graphs_compiled_while_timed")],
        "CUDA-graph skips": [cell.get("cudagraph_skips")],
        "graphs recorded while timed": [cell.get("graphs_recorded_while_timed")],
        "failed": failed_text(cell.get("failed")),
        "other load %": [100 * load["other_share"]] if load.get("measured") else [],
    }


def _check_cell_table(path: Path, record: Mapping[str, Any], found: Findings) -> None:
    """The cell table of a decode benchmark's own page (``decode-*.md``), by the columns the
    page has."""
    page = path.with_suffix(".md")
    tables = tables_of(page)
    table = next((t for t in tables if t[0][2:3] == ["full step ms"]), None)
    if table is None:
        return
    expected = {}
    for cell in record["cells"]:
        row = _cell_row(cell)
        expected[(cell["shape"], str(cell["batch_size"]))] = {
            k: v for k, v in row.items() if k in table[0]
        }
    check_rows(found, f"bench/{page.name} cells", table, expected, _shape_batch)


def check_splits(results: Path) -> Findings:
    """Every decode record's cost splits and the speedups they predict, and its split page."""
    found = Findings("cost splits and what they predict")
    bench = results / "bench"
    for path in sorted([*bench.glob("decode-*.json"), *bench.glob("where-*.json")]):
        record = json.loads(path.read_text(encoding="utf-8"))
        cells = record.get("cells") if isinstance(record, dict) else None
        if not isinstance(cells, list) or not all("variants" in c for c in cells):
            continue
        for cell in cells:
            where = f"bench/{path.name} {cell.get('shape')} batch {cell.get('batch_size')}"
            for path_name in {path_of(n) for n in cell["variants"] if n.startswith("skipdecode-")}:
                _check_split(where, cell, path_name, found)
            for name, r in cell["variants"].items():
                if (r or {}).get("decode_ms_per_step"):
                    _check_variant(where, cell, name, r, found)
        if any("cost_split" in c for c in cells):
            _check_page(path, record, found)
            _check_cell_table(path, record, found)
    return found
