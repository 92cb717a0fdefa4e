"""The GPU decode page, ``results/bench/decode-gpu.md``, and README's GPU table, written from
the CUDA-graph benchmark's records (``make bench-gpu``: ``results/bench/decode-gpu-*.json`` with
``--cuda-graphs`` on a CUDA device) by ``make docs``; never typed.

Per record: the card, the versions, the code it ran and the command; then per shape a table of
every variant (rows) by batch (columns): ms per decode step, its multiple of the bandwidth floor,
and the speedup over transformers' compiled ``generate`` (over eager ``generate`` where the
record has no compiled one); then the issue's targets, each met or missed by the numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...io import write_text_atomic

__all__ = ["GPU_PAGE", "gpu_page", "readme_table", "write_gpu_page"]

GPU_PAGE = "bench/decode-gpu.md"
#: (variant, batch, the least speedup over compiled generate) the GPU issue asked for.
TARGETS = (
    ("skipdecode-full-graphs", 1, 1.0),
    ("skipdecode-full-graphs", 8, 1.0),
    ("skipdecode-2x-graphs", 1, 1.7),
    ("skipdecode-2x-graphs", 8, 1.7),
    ("skipdecode-3x-graphs", 1, 2.4),
    ("skipdecode-3x-graphs", 8, 2.4),
    ("lossless-k2-b10-graphs", 1, 1.3),
)


def graph_records(bench: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The CUDA-graph benchmark's records on a CUDA device, by name."""
    out = []
    for path in sorted(bench.glob("decode-gpu-*.json")):
        record = json.loads(path.read_text())
        args = record.get("args") or {}
        if args.get("cuda_graphs") == "True" and args.get("device") == "cuda":
            out.append((path, record))
    return out


def _peer(cell: dict[str, Any]) -> tuple[str, str]:
    """What the cell's speedups are over: the gpt-fast-style compiled loop where timed (the
    decode loop a GPU engineer would write; :mod:`.fast_loop`), else compiled ``generate``, else
    eager ``generate``."""
    if "transformers-loop-compiled" in cell["variants"]:
        return (
            "speedup_vs_transformers_loop_compiled",
            "the compiled one-token loop (gpt-fast style)",
        )
    if "transformers-generate-compiled" in cell["variants"]:
        return "speedup_vs_transformers_generate_compiled", "compiled `generate`"
    return "speedup_vs_transformers_generate", "eager `generate` (compiled not timed)"


def composite(result: dict[str, Any] | None) -> bool:
    """Whether a variant's time per token is not a measurement on its own device: a lossless
    round timed here divided by tokens per round measured elsewhere (on a CPU)."""
    return bool(result) and result.get("tokens_per_round_cpu") is not None


#: What README's table says of the rows it leaves out.
COMPOSITE_NOTE = (
    "Lossless rows are left out here: their time per token divides a round timed on the GPU by "
    "tokens per round measured on a CPU, not a measurement on one device "
    "([decode-gpu.md](results/bench/decode-gpu.md) shows them, marked)."
)


def _shape_table(cells: list[dict[str, Any]], measured_only: bool = False) -> str:
    cells = sorted(cells, key=lambda c: c["batch_size"])
    key, peer = _peer(cells[0])
    names: list[str] = []
    for c in cells:
        names += [n for n in c["variants"] if n not in names]
    left_out = [n for n in names if any(composite(c["variants"].get(n)) for c in cells)]
    if measured_only:
        names = [n for n in names if n not in left_out]
    head = "| variant | " + " | ".join(f"batch {c['batch_size']}" for c in cells) + " |"
    lines = [head, "|---|" + "---|" * len(cells)]
    for name in names:
        row = []
        for c in cells:
            r = c["variants"].get(name)
            ms = None if r is None else r.get("decode_ms_per_step")
            if ms is None:
                row.append("")
                continue
            text = f"{ms:.2f} ms"
            if r.get("bandwidth_floor_multiple") is not None:
                text += f", {r['bandwidth_floor_multiple']:.1f}x floor"
            if r.get(key) is not None:
                text += f", **{r[key]:.2f}x**"
            row.append(text)
        label = (
            f"{name} (composite: GPU round / CPU tokens per round)" if name in left_out else name
        )
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    note = (
        f"ms per decode step, its multiple of the bandwidth floor, and **the speedup over {peer}** "
        "(same card, same process)."
    )
    tail = f"\n{COMPOSITE_NOTE}\n" if measured_only and left_out else ""
    return note + "\n\n" + "\n".join(lines) + "\n" + tail


def _targets(cells: list[dict[str, Any]]) -> list[str]:
    by_batch = {c["batch_size"]: c for c in cells}
    out = []
    for name, batch, least in TARGETS:
        r = (by_batch.get(batch) or {}).get("variants", {}).get(name)
        got = None if r is None else r.get("speedup_vs_transformers_generate_compiled")
        if got is None:
            continue
        if composite(r):
            out.append(f"- {name} at batch {batch}: not measured (a composite; target {least}x)")
            continue
        verdict = "met" if got >= least else "missed"
        out.append(f"- {name} at batch {batch}: {got:.2f}x (target {least}x): {verdict}")
    return out


def _record_section(path: Path, record: dict[str, Any]) -> str:
    prov = record.get("provenance") or {}
    git = prov.get("git") or {}
    packages = prov.get("packages") or {}
    device = (prov.get("device") or {}).get("device")
    args = record.get("args") or {}
    code = f"commit {str(git.get('commit'))[:12]}"
    if git.get("dirty"):
        code += " with uncommitted changes (diff kept)" if git.get("diff") else ", dirty"
    parts = [
        f"## {path.stem}",
        "",
        f"`{path.name}`: {device}, torch {packages.get('torch')}, transformers "
        f"{packages.get('transformers')}, {args.get('dtype')}, prompt {args.get('prompt_len')}, "
        f"{args.get('new_tokens')} new tokens, median of {args.get('repeats')} timed repeats "
        f"after two warm-ups; {code}.",
        "",
    ]
    cells = record["cells"]
    for shape in dict.fromkeys(c["shape"] for c in cells):
        mine = [c for c in cells if c["shape"] == shape]
        parts += [f"### {shape}", "", _shape_table(mine)]
        checks = [
            f"graphs compiled / recorded while timed, CUDA-graph skips at batch {c['batch_size']}"
            f": {c['graphs_compiled_while_timed']} / {c.get('graphs_recorded_while_timed')} / "
            f"{c['cudagraph_skips']}"
            for c in mine
        ]
        for c in mine:
            differ = [
                f"{n} (vs {r['tokens_equal']})"
                for n, r in c["variants"].items()
                if r.get("tokens_equal_reference") is False
            ]
            if differ:
                checks.append(
                    f"tokens differing from their reference at batch {c['batch_size']}: "
                    + ", ".join(differ)
                )
        parts += [*(f"- {line}" for line in checks), ""]
        targets = _targets(mine)
        if targets:
            parts += ["Targets (speedup over compiled `generate`):", "", *targets, ""]
    return "\n".join(parts)


def gpu_page(bench: Path) -> str:
    """The page: one section per CUDA-graph record."""
    records = graph_records(bench)
    intro = (
        "# Decode on a GPU: the CUDA-graph path beside transformers' `generate`\n\n"
        "Written by `make docs` from the `make bench-gpu` records listed below (random weights in "
        "each shape). The lossless rows are composites, not measurements on one device: their "
        "time per token divides the round timed here by the trained draft's tokens per round "
        "measured on a CPU (each row's flag says so), so README leaves them out and no target is "
        "judged on them. "
        "Every column of every variant is in the record's own table (`<record>.md`).\n"
    )
    if not records:
        return intro + "\nNo CUDA-graph record yet: `make bench-gpu` on a GPU writes one.\n"
    return intro + "\n" + "\n".join(_record_section(p, r) for p, r in records)


def readme_table(bench: Path) -> str | None:
    """README's GPU table: the SmolLM2 record's table (None without one)."""
    for path, record in graph_records(bench):
        if path.stem == "decode-gpu-smollm2":
            return _shape_table(record["cells"], measured_only=True)
    return None


def write_gpu_page(results: Path) -> str:
    """Write the page; what was done."""
    write_text_atomic(results / GPU_PAGE, gpu_page(results / "bench"))
    return GPU_PAGE
