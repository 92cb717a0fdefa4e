"""The decode benchmark's records and the GPU page recomputed from their timings.

Own arithmetic on every decode benchmark cell (``results/bench/decode-*.json``, ``where-*.json``):
where a variant keeps the seconds of its timed calls (``raw``), its prefill ms, its ms per decode
step (median and quartiles, linear between order statistics) and its throughputs from them (a
lossless row: its ms per round and their quartiles, and its ms per token over the tokens a round
yielded); each variant's speedup over a peer (``speedup_vs_<peer>``) is the peer's ms per decode
step over the variant's; a SkipDecode variant's ``measured_speedup`` is its own path's full
variant's ms over its own (``skipdecode-2x-graphs`` over ``skipdecode-full-graphs``) (its floor
multiples: :mod:`.split`). Then the GPU page (``bench/decode-gpu.md``, the CUDA-graph records):
every variant's cell in its record's section reads ``<ms> ms, <multiple>x floor, **<speedup>x**``
at the printed digits, the speedup over the peer the page names (the compiled one-token loop, else
compiled ``generate``, else eager ``generate``). And every benchmark's own page (``decode-*.md``
beside its record, and ``where-*.md``): each row's figures, found by shape, batch and variant, are
its record's at the printed digits, an empty cell where the record has none. A cell's step
profiles: :mod:`.profile`. And no benchmark record in ``results/bench/`` has a cell timed while
other processes used more than the published share of the CPUs (``load.other_share`` above
:data:`~skipdecode.evaluation.load.BUSY_SHARE`) unless its run was told ``--allow-busy``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...evaluation.load import BUSY_SHARE, timed_busy
from .findings import Findings, check_rows, heading_block, tables_beside, tables_of
from .profile import check_profiles
from .split import path_of
from .tables import median, quantile

__all__ = ["check_bench"]

#: Peers in the order the GPU page prefers them, and the record's key of a speedup over each.
PEERS = (
    ("transformers-loop-compiled", "speedup_vs_transformers_loop_compiled"),
    ("transformers-generate-compiled", "speedup_vs_transformers_generate_compiled"),
    ("transformers-generate", "speedup_vs_transformers_generate"),
)


def _full_of(name: str) -> str | None:
    """``skipdecode-2x-graphs`` -> ``skipdecode-full-graphs`` (None: not a schedule variant)."""
    return "skipdecode-full" + path_of(name) if name.startswith("skipdecode-") else None


def _check_raw(
    where: str, cell: Mapping[str, Any], name: str, r: Mapping[str, Any], found: Findings
) -> None:
    """A variant's medians, quartiles and throughputs from the seconds of its timed calls (a
    lossless row: its ms per round and their quartiles, and its ms per token over the tokens a
    round yielded, measured in its own runs or, in older records, the CPU's)."""
    raw = r.get("raw")
    if not raw:
        found.skip("decode variants without raw timings (written before they were kept)")
        return
    steps, rows = raw["steps"], cell["batch_size"]
    per_step = sorted(1000 * d / max(steps, 1) for d in raw["decode_s"])
    prefill, decode = median(raw["prefill_s"]), median(raw["decode_s"])
    step = quantile(per_step, 0.5)
    expected: dict[str, Any] = {"prefill_ms": 1000 * prefill}
    if "ms_per_round" in r:
        tokens = r.get("tokens_per_round_cpu") or median(raw.get("tokens_per_round") or [0])
        expected |= {
            "ms_per_round": step,
            "ms_per_round_q1": quantile(per_step, 0.25),
            "ms_per_round_q3": quantile(per_step, 0.75),
            "decode_ms_per_step": step / tokens if tokens else None,
        }
        if "tokens_per_round_cpu" not in r:
            expected["tokens_per_round"] = tokens
    else:
        expected |= {
            "decode_ms_per_step": step,
            "decode_ms_q1": quantile(per_step, 0.25),
            "decode_ms_q3": quantile(per_step, 0.75),
            "tokens_per_s": rows * cell["new_tokens"] / (prefill + decode),
            "decode_tokens_per_s": rows * steps / decode if decode > 0 else float("nan"),
        }
    for key, value in expected.items():
        found.compare(where, f"{name} {key} (raw)", r.get(key), value)


def _check_cell(where: str, cell: Mapping[str, Any], found: Findings) -> None:
    variants = cell["variants"]
    for name, r in variants.items():
        ms = (r or {}).get("decode_ms_per_step")
        if not ms:
            continue
        _check_raw(where, cell, name, r, found)
        for peer, key in PEERS:
            peer_ms = (variants.get(peer) or {}).get("decode_ms_per_step")
            if key in r and peer_ms:
                found.compare(where, f"{name} {key}", r[key], peer_ms / ms)
        full = _full_of(name)
        full_ms = (variants.get(full) or {}).get("decode_ms_per_step") if full else None
        if "measured_speedup" in r and full_ms:
            found.compare(where, f"{name} measured_speedup", r["measured_speedup"], full_ms / ms)


def _printed(r: Mapping[str, Any], peer_ms: float | None) -> str:
    """A page cell: ms per step, its floor multiple, and the speedup over the page's peer (whose
    ms per step is ``peer_ms``; None where the page prints none)."""
    text = f"{r['decode_ms_per_step']:.2f} ms"
    if r.get("bandwidth_floor_ms"):
        text += f", {r['decode_ms_per_step'] / r['bandwidth_floor_ms']:.1f}x floor"
    if peer_ms is not None:
        text += f", **{peer_ms / r['decode_ms_per_step']:.2f}x**"
    return text


def _row_cells(section: str, shape: str, name: str) -> list[str] | None:
    for line in heading_block(section, 3, shape).splitlines():
        label = line.split("|")[1].strip() if line.startswith("|") else ""
        if label == name or label.startswith(f"{name} (composite"):
            return [c.strip() for c in line.strip().strip("|").split("|")[1:]]
    return None


def _check_page(page: str, path: Path, record: Mapping[str, Any], found: Findings) -> None:
    section = heading_block(page, 2, path.stem)
    if not section:
        found.differences.append(f"bench/decode-gpu.md: no section for {path.name}")
        return
    shapes: dict[str, list[dict[str, Any]]] = {}
    for cell in record["cells"]:
        shapes.setdefault(cell["shape"], []).append(cell)
    for shape, cells in shapes.items():
        cells = sorted(cells, key=lambda c: c["batch_size"])
        peer, key = next(((p, k) for p, k in PEERS if p in cells[0]["variants"]), (None, None))
        for column, cell in enumerate(cells):
            peer_ms = (cell["variants"].get(peer) or {}).get("decode_ms_per_step")
            for name, r in cell["variants"].items():
                if not (r or {}).get("decode_ms_per_step"):
                    continue
                row = _row_cells(section, shape, name)
                got = None if row is None or column >= len(row) else row[column]
                want = _printed(r, peer_ms if r.get(key) is not None else None)
                found.compare(
                    f"bench/decode-gpu.md {path.stem} {shape} batch {cell['batch_size']}",
                    name,
                    got,
                    want,
                )


#: The columns the decode benchmark's page writes today (older pages have fewer, other names).
_CURRENT = (
    "prefill ms", "decode ms/step [IQR]", "x bandwidth floor", "x compute floor", "tok/s",
    "theor.", "measured", "ideal", "efficiency", "vs compiled generate", "compile s",
    "tokens = reference", "flag",
)  # fmt: skip
#: A benchmark page's column and the record's fields it prints, in order.
PAGE_COLUMNS = {
    "prefill ms": ("prefill_ms",),
    "decode ms/step [IQR]": ("decode_ms_per_step", "decode_ms_q1", "decode_ms_q3"),
    "decode ms/step": ("decode_ms_per_step",),
    "x floor": ("floor_multiple",),
    "x bandwidth floor": ("bandwidth_floor_multiple",),
    "x compute floor": ("compute_floor_multiple",),
    "tok/s": ("tokens_per_s",),
    "theor.": ("theoretical_speedup",),
    "measured": ("measured_speedup",),
    "ideal": ("ideal_speedup",),
    "efficiency": ("efficiency",),
    "vs compiled generate": ("speedup_vs_transformers_generate_compiled",),
    "compile s": ("compile_s",),
}


def _text_cells(r: Mapping[str, Any]) -> dict[str, str]:
    """The page's text columns: whether the tokens equal a reference's, and the flag."""
    same = r.get("tokens_equal_reference")
    tokens = "" if same is None else "yes" if same else f"NO ({r.get('tokens_equal')})"
    return {"tokens = reference": tokens, "flag": str(r.get("flag") or "")}


def _shape_batch_variant(row: dict[str, str]) -> tuple[str, ...]:
    return (row.get("shape", ""), row.get("batch", ""), row.get("variant", ""))


def _check_own_page(path: Path, record: Mapping[str, Any], found: Findings) -> None:
    """The benchmark's page beside its record: its variant table has one row per variant of
    every cell of the record, each printing the record's figures."""
    page = path.with_suffix(".md")
    if not page.is_file():
        found.skip("bench records without their own page")
        return
    cells = {(c.get("shape"), str(c.get("batch_size"))): c for c in record["cells"]}
    tables = tables_of(page)
    table = next((t for t in tables if {"shape", "batch", "variant"} <= set(t[0])), None)
    if table is None:
        found.skip("bench pages without a variant table")
        return
    header = table[0]
    expected = {}
    for (shape, batch), c in cells.items():
        for name, r in (c.get("variants") or {}).items():
            printed = {col: [(r or {}).get(k) for k in keys] for col, keys in PAGE_COLUMNS.items()}
            printed |= _text_cells(r or {})
            current = "x compute floor" in header  # today's layout: every column it writes
            keep = set(header) | (set(_CURRENT) if current else set())
            expected[(shape, batch, name)] = {k: v for k, v in printed.items() if k in keep}
    check_rows(found, f"bench/{page.name}", table, expected, _shape_batch_variant)


_TRAIN_COLUMNS = {
    "step ms": "step_ms",
    "tokens/s": "tokens_per_s",
    "speedup vs full": "speedup_vs_full",
}


def _check_training_bench(path: Path, record: Mapping[str, Any], found: Findings) -> None:
    """A training-step benchmark (``train-*.json``): each variant's speedup over full from the
    step times, its tokens/s from its step time and the cell's shape, its step time the median
    of each repeat's where it keeps them; and every row of its page at the printed digits."""
    expected = {}
    for cell in record["cells"]:
        variants, tokens = (
            cell["variants"],
            cell["batch_size"] * (cell["prompt_len"] + cell["target_len"]),
        )
        for name, r in variants.items():
            where = f"bench/{path.name} {cell['shape']} batch {cell['batch_size']} {name}"
            found.compare(
                where,
                "speedup_vs_full",
                r["speedup_vs_full"],
                variants["full"]["step_ms"] / r["step_ms"],
            )
            found.compare(where, "tokens_per_s", r["tokens_per_s"], tokens / (r["step_ms"] / 1000))
            if "step_s_per_repeat" in r:
                found.compare(
                    where, "step_ms (median)", r["step_ms"], 1000 * median(r["step_s_per_repeat"])
                )
            else:
                found.skip(
                    "training-step variants without each repeat's seconds (written before they were kept)"
                )
            printed = {column: [r[field]] for column, field in _TRAIN_COLUMNS.items()}
            expected[(cell["shape"], str(cell["batch_size"]), name)] = printed
    page = path.with_suffix(".md")
    tables = tables_beside(path, found)
    if not tables:
        return
    check_rows(found, f"bench/{page.name}", tables[0], expected, _shape_batch_variant)


def check_bench(results: Path) -> Findings:
    """Every decode benchmark record's derived figures, its own page's rows, and the GPU
    page's cells."""
    found = Findings("benchmarks from their timings")
    page_path = results / "bench" / "decode-gpu.md"
    page = page_path.read_text(encoding="utf-8") if page_path.is_file() else ""
    decode = [*(results / "bench").glob("decode-*.json"), *(results / "bench").glob("where-*.json")]
    for path in sorted(decode):
        record = json.loads(path.read_text(encoding="utf-8"))
        cells = record.get("cells") if isinstance(record, dict) else None
        if not isinstance(cells, list) or not all("variants" in c for c in cells):
            found.skip("bench records without decode cells")
            continue
        args = record.get("args") or {}
        on_page = args.get("cuda_graphs") == "True" and args.get("device") == "cuda"
        section = heading_block(page, 2, path.stem) if on_page else None
        for cell in cells:
            where = f"bench/{path.name} {cell.get('shape')} batch {cell.get('batch_size')}"
            _check_cell(where, cell, found)
            check_profiles(where, cell, found, section)
        _check_own_page(path, record, found)
        if on_page:
            _check_page(page, path, record, found)
    for path in sorted((results / "bench").glob("train-*.json")):
        _check_training_bench(path, json.loads(path.read_text(encoding="utf-8")), found)
    for path in sorted((results / "bench").glob("*.json")):
        _check_quiet(path, json.loads(path.read_text(encoding="utf-8")), found)
    return found


def _check_quiet(path: Path, record: Any, found: Findings) -> None:
    """A published benchmark's cells were timed on a quiet machine, or its run said
    ``--allow-busy`` (then each cell's load says how busy)."""
    cells = record.get("cells") if isinstance(record, dict) else None
    if not isinstance(cells, list) or (record.get("args") or {}).get("allow_busy") == "True":
        return
    for cell in cells:
        load = cell.get("load") if isinstance(cell, dict) else None
        if timed_busy(load):
            found.differences.append(
                f"bench/{path.name} {cell.get('shape', 'model')} batch {cell.get('batch_size')}: "
                f"timed while other processes used {load['other_share']:.0%} of the CPUs, above "
                f"the {BUSY_SHARE:.0%} a published record allows, and not run with --allow-busy"
            )
