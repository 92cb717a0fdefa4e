"""Markdown tables of benchmark results (decode: per variant and the cost split; the lossless
mode: acceptance and the round's cost split; training), the one way a benchmark writes them,
and the command-line options every benchmark shares."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from ...core.options import DecodeOptions, DecodeOptionsError
from ...evaluation.load import BUSY_SHARE, timed_busy
from ...io import write_json_atomic, write_text_atomic
from ...provenance import ProvenanceError, provenance, require_recorded_diff

__all__ = [
    "add_run_options", "cell_text", "decode_table", "speculative_table", "train_table",
    "started_provenance",
    "decode_options_of", "failed_text", "rewrite_tables",
    "write_bench",
]  # fmt: skip


def add_run_options(p: argparse.ArgumentParser, name: str | None, load: bool = True) -> None:
    """Options shared by the benchmarks: dtype, device, whether to time transformers'
    ``generate``, where the results go (``--out``, ``--name`` defaulting to ``name``), progress;
    ``load``: the benchmark records each cell's load, so ``--allow-busy`` means something."""
    p.add_argument("--no-transformers", action="store_true", help="skip transformers' generate")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, default=Path("outputs/bench"))
    p.add_argument("--name", default=name, help="file stem for the JSON and Markdown outputs")
    if load:
        p.add_argument(
            "--allow-busy",
            action="store_true",
            help=f"publish the record even where other processes used more than {BUSY_SHARE:.0%}% "
            "of the CPUs while a cell was timed (each cell's load says how busy; without it make "
            "audit refuses such a record in results/)",
        )
    p.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=None,
        help="no progress bar (default: shown on a terminal)",
    )


def add_plan_graphs_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--plan-graphs``: with ``--compile``, one compiled graph for all of a pass's layers
    (:data:`~skipdecode.core.compiled.COMPILE_GRAPHS`' ``"plan"``); ``what``: which passes."""
    p.add_argument("--plan-graphs", action="store_true", help=f"with --compile: {what}")


def decode_options_of(p: argparse.ArgumentParser, args: argparse.Namespace) -> DecodeOptions:
    """The decode options ``--compile`` and ``--plan-graphs`` ask for; a contradiction (plan
    graphs without compiling) is refused as the options name it."""
    try:
        return DecodeOptions.from_args(args)
    except DecodeOptionsError as e:
        p.error(str(e))


def load_bench_model(model_dir: Path | None, dtype: str, device: str) -> tuple[Any, Any, Path]:
    """``(model, tokenizer, path)`` of a benchmark's model: ``model_dir``, else the converted
    SmolLM2 (``make smollm2``), in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ...models.assets import smollm2_dir

    path = model_dir or smollm2_dir()
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), attn_implementation="sdpa"
    ).to(device)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path), Path(path)


def cell_text(value: Any, fmt: str = "{:.2f}") -> str:
    """A table cell: ``value`` formatted, or empty where there is none."""
    return fmt.format(value) if value is not None else ""


def started_provenance(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The provenance of a benchmark as it starts (the code it imports, recorded as such);
    a checkout whose diff a record could not hold is refused before anything runs."""
    started = provenance()
    try:
        require_recorded_diff(started, parser.prog)
    except ProvenanceError as e:
        parser.error(str(e))
    return started


def write_bench(
    out: Path,
    stem: str,
    payload: dict[str, Any],
    table: str,
    started: dict[str, Any] | None = None,
    quiet: bool = False,
    allow_busy: bool = False,
) -> None:
    """``<out>/<stem>.json`` (``payload`` with the arguments as strings and the provenance) and
    ``<out>/<stem>.md`` (``table``); prints the table and where they went. ``started``: the
    provenance taken when the run began (a long run's code is the one it imported then, whatever
    was committed while it ran); without it, the provenance now. ``quiet``: print nothing.

    A cell timed while other processes used more than :data:`BUSY_SHARE` of the CPUs (its
    ``load``) is named in a warning unless ``allow_busy``: the record is written, and ``make
    audit`` refuses it in ``results/`` (its speeds are not the code's alone) unless the run was
    told ``--allow-busy``."""
    busy = [
        c for c in payload.get("cells") or [] if isinstance(c, dict) and timed_busy(c.get("load"))
    ]
    if busy and not allow_busy and not quiet:
        worst = max(c["load"]["other_share"] for c in busy)
        names = ", ".join(f"{c.get('shape', 'model')} batch {c.get('batch_size')}" for c in busy)
        print(
            f"warning: {len(busy)} cell(s) of {stem} ({names}) were timed while other processes "
            f"used up to {worst:.0%} of the CPUs (load.other_share; a published record allows at "
            f"most {BUSY_SHARE:.0%}): make audit refuses this record in results/; rerun on a "
            "quiet machine, or rerun with --allow-busy to publish it as measured",
            flush=True,
        )
    out.mkdir(parents=True, exist_ok=True)
    payload = dict(payload)
    payload["args"] = {k: str(v) for k, v in (payload.get("args") or {}).items()}
    write_json_atomic(out / f"{stem}.json", {**payload, "provenance": started or provenance()})
    write_text_atomic(out / f"{stem}.md", table)
    if quiet:
        return
    print(table)
    print(f"wrote {out / (stem + '.json')} and {out / (stem + '.md')}")


def decode_table(cells: list[dict[str, Any]]) -> str:
    """Per variant: ms per decode step (median [quartiles]), its multiple of the bandwidth floor
    and of the compute floor (blank where a record measured no floor),
    speedups (theoretical, measured and ideal over the full schedule of its own path; over
    transformers' compiled ``generate`` when timed), compile seconds and flags; then the cost
    split of a full step."""
    head = (
        "| shape | batch | variant | prefill ms | decode ms/step [IQR] | x bandwidth floor | "
        "x compute floor | tok/s | theor. | measured | ideal | efficiency | vs compiled generate "
        "| compile s | tokens = reference | flag |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for c in cells:
        for name, r in c["variants"].items():

            def f(key, fmt="{:.2f}", r=r):
                return fmt.format(r[key]) if r.get(key) is not None else ""

            iqr = (
                f"[{r['decode_ms_q1']:.2f}, {r['decode_ms_q3']:.2f}]" if "decode_ms_q1" in r else ""
            )
            lines.append(
                f"| {c['shape']} | {c['batch_size']} | {name} | {f('prefill_ms', '{:.1f}')} | "
                f"{f('decode_ms_per_step')} {iqr} | {f('bandwidth_floor_multiple', '{:.1f}')} | "
                f"{f('compute_floor_multiple', '{:.1f}')} | "
                f"{f('tokens_per_s', '{:.1f}')} | {f('theoretical_speedup')} | "
                f"{f('measured_speedup')} | {f('ideal_speedup')} | {f('efficiency')} | "
                f"{f('speedup_vs_transformers_generate_compiled')} | {f('compile_s', '{:.1f}')} | "
                f"{_tokens_equal(r)} | {r.get('flag', '')} |"
            )
    split = [
        "",
        "| shape | batch | full step ms | outside layers ms | LM head ms | outside layers % | "
        "overhead (excl. head) % | compiled: outside layers / head ms | bandwidth floor (full) ms "
        "| compute floor (full) ms | bandwidth GB/s | peak TFLOP/s | graphs compiled while timed "
        "| CUDA-graph skips | graphs recorded while timed | failed | other load % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        s = c["cost_split"]
        lim = c.get("limits") or {}
        full = c["variants"]["skipdecode-full"]
        comp = c.get("cost_split_compiled")
        split.append(
            f"| {c['shape']} | {c['batch_size']} | {s['full_step_ms']:.2f} | "
            f"{s['non_layer_ms']:.2f} | {s['head_ms']:.2f} | "
            f"{100 * s['non_layer_fraction']:.1f} | {100 * s['overhead_fraction']:.1f} | "
            + (f"{comp['non_layer_ms']:.2f} / {comp['head_ms']:.2f} | " if comp else " | ")
            + "".join(
                f"{full[f'{kind}_floor_ms']:.3f} | " if f"{kind}_floor_ms" in full else " | "
                for kind in ("bandwidth", "compute")
            )
            + (f"{lim['bandwidth_gb_s']:.1f} | {lim['peak_tflops']:.2f} |" if lim else " |  |")
            + f" {cell_text(c.get('graphs_compiled_while_timed'), '{}')} |"
            + f" {cell_text(c.get('cudagraph_skips'), '{}')} |"
            + f" {cell_text(c.get('graphs_recorded_while_timed'), '{}')} |"
            + f" {failed_text(c.get('failed'))} |"
            + f" {_load_text(c.get('load'))} |"
        )
    return head + "\n".join(lines) + "\n" + "\n".join(split) + "\n"


def failed_text(failed: dict[str, str] | None) -> str:
    """The variants that failed and their errors, on one line (a table row)."""

    def one_line(error: str) -> str:  # no newline and no column bar inside a table row
        return " ".join(str(error).split()).replace("|", "\\|")

    return "; ".join(f"{k}: {one_line(v)}" for k, v in (failed or {}).items())


def rewrite_tables(records: list[Path]) -> None:
    """Each benchmark record's own table (``<stem>.md`` beside ``<stem>.json``) written again
    from its cells by today's writer: a table an earlier writer broke (a multi-line error in a
    row) is mended without timing anything again."""
    import json

    tables = {"decode": decode_table, "train": train_table}
    chosen = []
    for path in records:
        record = json.loads(path.read_text())
        mode = (record.get("args") or {}).get("mode")
        if mode not in tables:
            raise SystemExit(
                f"{path}: args.mode is {mode!r}; only decode and train benchmark records "
                f"(python -m skipdecode.bench) can be rewritten here: {sorted(tables)}"
            )
        chosen.append((path, tables[mode](record["cells"])))
    for path, table in chosen:  # every record read before any table is written
        write_text_atomic(path.with_suffix(".md"), table)
        print(f"wrote {path.with_suffix('.md')}")


def _load_text(load: dict[str, Any] | None) -> str:
    """Other processes' share of the CPUs while the cell was timed, in %, where measured."""
    return f"{100 * load['other_share']:.1f}" if load and load.get("measured") else ""


def _tokens_equal(row: dict[str, Any]) -> str:
    """``yes``/``NO (reference)`` where a row was checked against a reference's tokens."""
    if "tokens_equal_reference" not in row:
        return ""
    return "yes" if row["tokens_equal_reference"] else f"NO ({row['tokens_equal']})"


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


def speculative_table(cells: list[dict[str, Any]]) -> str:
    """Per variant: acceptance (overall; per draft budget, highest first), tokens per verify,
    the round's cost split in full decode steps, the speedup it predicts and the measured one."""
    out = [
        "| model | path | batch | variant | acceptance | by draft budget | tokens/verify | "
        "drafts/round | draft pass (head share) | verify | accept + bookkeeping | "
        "predicted | measured vs full | ms/step of full | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        for name, r in c["variants"].items():
            cost = r.get("cost") or {}
            budgets = " ".join(
                f"{b}:{v:.2f}" for b, v in (r.get("acceptance_by_budget") or {}).items()
                if v is not None
            )  # fmt: skip
            draft = cell_text(cost.get("draft_pass"))
            if cost.get("head_share_of_draft") is not None:
                draft += f" ({cost['head_share_of_draft']:.0%})"
            other = None
            if cost:
                other = cost["accept_per_round"] + cost["bookkeeping_per_round"]
            label = name + (" (chosen)" if r.get("chosen") else "")
            if name.endswith("-auto"):
                off = r.get("turned_off", 0) + r.get("started_off", 0)
                label += f" (off in {off}/{c['batches']} batches)"
            path = "eager"
            if c.get("compiled"):
                path = "compiled, plan graphs" if c.get("compile_graph") == "plan" else "compiled"
            out.append(
                f"| {Path(c['model']).name} | {path} | "
                f"{c['batch_size']} | {label} | "
                f"{cell_text(r.get('acceptance_rate'))} | {budgets} | "
                f"{cell_text(r.get('tokens_per_verify'))} | "
                f"{cell_text(cost.get('drafts_per_round'))} | {draft} | "
                f"{cell_text(cost.get('verify_per_round'))} | {cell_text(other)} | "
                f"{cell_text(cost.get('predicted_speedup'), '{:.2f}x')} | "
                f"{cell_text(r.get('speedup_vs_full'), '{:.2f}x')} | "
                f"{cell_text(r.get('ms_per_step_of_full'))} | "
                f"{r.get('identical_to_full', '')} |"
            )
    return "\n".join(out) + "\n"


if (
    __name__ == "__main__"
):  # python -m skipdecode.experiments.benchmarks.bench_tables RECORD.json...
    import sys

    rewrite_tables([Path(a) for a in sys.argv[1:]])
