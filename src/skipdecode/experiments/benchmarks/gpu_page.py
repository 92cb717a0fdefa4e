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
from .bench_profile import profile_lines
from .bench_timing import variants_without_raw

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


def weights_are_random(record: dict[str, Any]) -> bool:
    """Whether a record's models had random weights: every record of the decode benchmark
    (``python -m skipdecode.bench``, whose arguments name ``shapes``) builds each shape so."""
    return "shapes" in (record.get("args") or {})


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
    decode loop a GPU engineer would write; :mod:`~skipdecode.core.fast_loop`), else compiled ``generate``, else
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


#: What README's table says of lossless rows measured on random weights.
UNTRAINED_NOTE = (
    "Lossless rows are left out here: with random weights no proposal is accepted, so a round "
    "yields one token and the row times a round, not the mode with a trained draft "
    "([decode-gpu.md](results/bench/decode-gpu.md) shows them)."
)
#: README's GPU table: the newest SmolLM2 records with whole-step rows (batch 1 and 8, and 32,
#: two calls of one run).
README_RECORDS = ("decode-gpu-smollm2-step", "decode-gpu-smollm2-step-b32")


def _shape_table(
    cells: list[dict[str, Any]], measured_only: bool = False, random_weights: bool = True
) -> str:
    cells = sorted(cells, key=lambda c: c["batch_size"])
    key, peer = _peer(cells[0])
    names: list[str] = []
    for c in cells:
        names += [n for n in c["variants"] if n not in names]
    left_out = [n for n in names if any(composite(c["variants"].get(n)) for c in cells)]
    untrained = [
        n for n in names if random_weights and n.startswith("lossless-") and n not in left_out
    ]
    if measured_only:  # README: measured rows, without the superseded compiled path
        names = [n for n in names if n not in left_out and n not in untrained]
        names = [n for n in names if not (n.startswith("skipdecode-") and n.endswith("-compiled"))]
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
    notes = [COMPOSITE_NOTE] * bool(left_out) + [UNTRAINED_NOTE] * bool(untrained)
    tail = "".join(f"\n{n}\n" for n in notes) if measured_only else ""
    return note + "\n\n" + "\n".join(lines) + "\n" + tail


def _targets(cells: list[dict[str, Any]], random_weights: bool) -> list[str]:
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
        if random_weights and name.startswith("lossless-"):
            out.append(
                f"- {name} at batch {batch}: {got:.2f}x with {r.get('tokens_per_round', 0):.2f} "
                f"tokens a round (target {least}x with a trained draft): not judged, random "
                "weights accept no proposal"
            )
            continue
        verdict = "met" if got >= least else "missed"
        out.append(f"- {name} at batch {batch}: {got:.2f}x (target {least}x): {verdict}")
    return out


#: The whole-step issue's targets on the fastest exact path (``-step``): SmolLM2's shape at
#: batch 1 (ms per step, and against the gpt-fast-style loop), the OPT shapes at batch 1 and 8
#: (multiples of the full model's bandwidth floor), the lossless mode against our own full path.
STEP_MS = (("skipdecode-full-step", 1.0), ("skipdecode-2x-step", 0.55))
STEP_LOOP = (("skipdecode-full-step", "at most", 1.05), ("skipdecode-2x-step", "faster", 1.8))
STEP_LOSSLESS = ((1, 1.2), (8, 1.0))


def _one_line(error: str, most: int = 400) -> str:
    """An error message on one line, cut at ``most`` characters."""
    text = " ".join(error.split())
    return text if len(text) <= most else text[: most - 3] + "..."


def _ms(cell: dict[str, Any], name: str) -> float | None:
    return (cell["variants"].get(name) or {}).get("decode_ms_per_step")


def _loop_targets(cell: dict[str, Any]) -> list[str]:
    """Full against the gpt-fast-style loop (at most 1.05x its time) and 2x (1.8x faster)."""
    loop = _ms(cell, "transformers-loop-compiled")
    out = []
    for name, how, bound in STEP_LOOP:
        ms = _ms(cell, name)
        if ms is None:
            continue
        if loop is None:
            why = (cell.get("failed") or {}).get("transformers-loop-compiled", "not timed")
            out.append(
                f"- {name} against the gpt-fast-style loop (target {how} {bound}x): not "
                f"measured, the loop did not run ({_one_line(why)})"
            )
            continue
        got = ms / loop if how == "at most" else loop / ms
        met = got <= bound if how == "at most" else got >= bound
        what = "of the loop's time" if how == "at most" else "faster than the loop"
        out.append(
            f"- {name}: {got:.2f}x {what} (target {how} {bound}x): {'met' if met else 'missed'}"
        )
    return out


def _lossless_targets(cell: dict[str, Any], least: float, random_weights: bool) -> list[str]:
    """The sync-free lossless rounds at k = 2 against our own full whole-step path; judged only
    where the record's weights are trained (a random model accepts no proposal)."""
    full = _ms(cell, "skipdecode-full-step")
    name = next(
        (n for n in cell["variants"] if n.startswith("lossless-k2-") and n.endswith("-step")), None
    )
    if full is None or name is None:
        return []
    r = cell["variants"][name]
    got = full / r["decode_ms_per_step"]
    head = f"- {name} at batch {cell['batch_size']}: {got:.2f}x our full path"
    if r.get("tokens_per_round") is None:
        return [f"{head} (target {least}x): not judged, no tokens per round in the record"]
    text = f"{head} with {r['tokens_per_round']:.2f} tokens a round measured in this run"
    if random_weights:
        return [
            f"{text} (target {least}x with a trained draft): not judged, random weights accept "
            "no proposal; a trained draft's weights did not travel to this run"
        ]
    return [f"{text} (target {least}x): {'met' if got >= least else 'missed'}"]


def step_targets(shape: str, cells: list[dict[str, Any]], random_weights: bool = True) -> list[str]:
    """The whole-step issue's targets for one shape's cells, each met or missed by the numbers
    (empty for a record without whole-step rows); ``random_weights``: the lossless rows are
    then not judged."""
    by_batch = {c["batch_size"]: c for c in cells}
    if not any(n.endswith("-step") for c in cells for n in c["variants"]):
        return []
    out: list[str] = []
    if shape.startswith("opt-"):
        for batch in (1, 8):
            cell = by_batch.get(batch)
            full = None if cell is None else cell["variants"].get("skipdecode-full-step")
            two = None if cell is None else _ms(cell, "skipdecode-2x-step")
            if full is None:
                continue
            floor = full["bandwidth_floor_ms"]
            got = full["decode_ms_per_step"] / floor
            out.append(
                f"- skipdecode-full-step at batch {batch}: {got:.2f}x the bandwidth floor "
                f"(target at most 1.3x): {'met' if got <= 1.3 else 'missed'}"
            )
            if two is not None:
                out.append(
                    f"- skipdecode-2x-step at batch {batch}: {two:.2f} ms against the full "
                    f"model's bandwidth floor {floor:.2f} ms (target below it): "
                    f"{'met' if two < floor else 'missed'}"
                )
        return out
    cell = by_batch.get(1)
    if cell is not None:
        for name, most in STEP_MS:
            ms = _ms(cell, name)
            if ms is not None:
                verdict = "met" if ms <= most else "missed"
                out.append(f"- {name} at batch 1: {ms:.2f} ms (target {most} ms): {verdict}")
        out += _loop_targets(cell)
    for batch, least in STEP_LOSSLESS:
        if batch in by_batch:
            out += _lossless_targets(by_batch[batch], least, random_weights)
    return out


def _step_graph_costs(cells: list[dict[str, Any]]) -> list[str]:
    """What a first decode records on whole-step graphs, where a cell measured it: plans,
    graphs, recording time and the device memory the decode adds (its cache and pool included:
    measured before and after the whole first decode), at each length."""
    out = []
    for c in cells:
        for g in c.get("step_graphs") or []:
            out.append(
                f"whole-step graphs a first {g['schedule']} decode records at batch "
                f"{c['batch_size']}, {g['new_tokens']} new tokens: {g['graphs_recorded']} for "
                f"{g['plans']} plans in {g['record_s']:.2f} s; the decode adds "
                f"{g['allocated_mib']:.1f} MiB, its cache included (at most {g['limit']} kept)"
            )
    return out


def _raw_text(record: dict[str, Any]) -> str:
    """What the record keeps of its timings where some variants lack their repeats' seconds."""
    missing = variants_without_raw(record)
    if not missing:
        return ""
    every = sum(len(c.get("variants") or {}) for c in record.get("cells") or [])
    return (
        f" It keeps no repeat's seconds for {missing} of its {every} variants (timed before"
        " records kept them): their speedups are ratios of the kept medians, which `make audit`"
        " checks, and are recomputed from each repeat's time only once its command runs again."
    )


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
        f"after two warm-ups; {code}.{_raw_text(record)}",
        "",
    ]
    cells = record["cells"]
    for shape in dict.fromkeys(c["shape"] for c in cells):
        mine = [c for c in cells if c["shape"] == shape]
        parts += [f"### {shape}", "", _shape_table(mine, random_weights=weights_are_random(record))]
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
        checks = [f"- {line}" for line in _step_graph_costs(mine) + profile_lines(mine)]
        parts += checks + ([""] if checks else [])
        failed = [
            f"- failed at batch {c['batch_size']}: {n}: {_one_line(why)}"
            for c in mine
            for n, why in (c.get("failed") or {}).items()
        ]
        parts += failed + ([""] if failed else [])
        targets = _targets(mine, weights_are_random(record))
        if targets:
            parts += ["Targets (speedup over compiled `generate`):", "", *targets, ""]
        targets = step_targets(shape, mine, weights_are_random(record))
        if targets:
            parts += ["Whole-step targets (the fastest exact path, `-step`):", "", *targets, ""]
    return "\n".join(parts)


def gpu_page(bench: Path) -> str:
    """The page: one section per CUDA-graph record."""
    records = graph_records(bench)
    intro = (
        "# Decode on a GPU: the CUDA-graph path beside transformers' `generate`\n\n"
        "Written by `make docs` from the `make bench-gpu` records listed below (random weights in "
        "each shape). In the records before whole-step graphs the lossless rows are composites, "
        "not measurements on one device: their time per token divides the round timed here by "
        "the trained draft's tokens per round measured on a CPU (each row's flag says so), so "
        "README leaves them out and no target is judged on them. In the later records a lossless "
        "row's time per token is its round over the tokens its own rounds yielded in that run, on "
        "that card; with random weights no proposal is accepted, so a round yields one token. "
        "Every column of every variant is in the record's own table (`<record>.md`).\n"
    )
    if not records:
        return intro + "\nNo CUDA-graph record yet: `make bench-gpu` on a GPU writes one.\n"
    return intro + "\n" + "\n".join(_record_section(p, r) for p, r in records)


def readme_table(bench: Path) -> str | None:
    """README's GPU table: the cells of :data:`README_RECORDS` (None without them)."""
    chosen = [record for path, record in graph_records(bench) if path.stem in README_RECORDS]
    if not chosen:
        return None
    cells = [c for record in chosen for c in record["cells"]]
    return _shape_table(cells, True, any(weights_are_random(r) for r in chosen))


def write_gpu_page(results: Path) -> str:
    """Write the page; what was done."""
    write_text_atomic(results / GPU_PAGE, gpu_page(results / "bench"))
    return GPU_PAGE
