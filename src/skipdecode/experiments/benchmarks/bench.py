"""Decode and training-throughput benchmarks on random-weight models of real shapes.

No hub needed: each shape is built from a config. Variants run in one process, interleaved and
repeated (median of ``--repeats`` after a warm-up run), and every decode variant generates the
same number of tokens (EOS disabled).

Decode variants: transformers' ``generate`` (greedy, its own KV cache), skipdecode with the
``full`` schedule, and skipdecode with 2x-5x target-speedup schedules. For each schedule the
*ideal* decode speedup follows from the measured cost split of one full step: with ``t_other``
the time outside the decoder layers (embedding, final norm, LM head, token choice, bookkeeping;
measured by running the same step with no layers) and ``t_layer = (t_full - t_other) / L``, a
step that runs ``m`` layers ideally costs ``t_other + m * t_layer``. Efficiency = measured / ideal.

    python -m skipdecode.bench --shapes opt-1.3b smollm2-135m tiny --batch-sizes 1 8 32
    python -m skipdecode.bench --mode train --shapes tiny smollm2-135m
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...core.costs import step_cost_split, transformers_generate_seconds
from ...core.engine import SkipDecoder
from ...core.floor import DeviceLimits, measure_device, step_floor_seconds
from ...core.options import CUDA_GRAPH_MODE
from ...models.shapes import SHAPES, build_random_model, device_name, random_prompts
from ...progress import progress
from ...schedules import FullSchedule, StaticSchedule, linear_for_speedup
from .bench_lossless import acceptance_of, lossless_rows, lossless_variants
from .bench_speedups import derive_speedups, flag_batches, reference_of
from .bench_tables import (
    add_plan_graphs_option,
    add_run_options,
    decode_options_of,
    decode_table,
    started_provenance,
    train_table,
    write_bench,
)
from .bench_timing import cudagraph_skips, quartiles, timed, warm_up
from .bench_training import bench_train

__all__ = ["SHAPES", "build_random_model", "bench_decode", "bench_train", "main"]


COMPILED_SUFFIXES = ("-compiled", "-compiled-plan", "-graphs")
SPEEDUPS = (2, 3, 4, 5)


def bench_decode(
    shape: str,
    batch_size: int,
    prompt_len: int = 64,
    new_tokens: int = 32,
    repeats: int = 3,
    speedups: tuple[int, ...] = SPEEDUPS,
    with_transformers: bool = True,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    model: nn.Module | None = None,
    compile: bool = False,
    limits: DeviceLimits | None = None,
    plan_graphs: bool = False,
    cuda_graphs: bool = False,
    lossless_ks: tuple[int, ...] = (),
    draft_budget: int = 10,
    acceptance: dict[str, Any] | None = None,
    compiled_generate: bool = True,
) -> dict[str, Any]:
    """One (shape, batch) cell: every variant, interleaved, median (and quartiles) of
    ``repeats``. ``compile`` adds transformers' compiled ``generate`` (static cache) and the
    compiled skipdecode path for the full and every schedule; compile time is measured on the
    warm-up call and reported apart, never in the decode times. ``plan_graphs`` (with
    ``compile``) adds the full schedule on the compiled path with one graph for all its layers
    (``-compiled-plan``; skip schedules would compile a graph per layer set). ``limits``: the
    device's measured bandwidth and peak, for each variant's floor. ``cuda_graphs`` adds the
    CUDA-graph path (``-graphs``: ``compile="reduce-overhead"``, caches in a pool at fixed
    addresses) for the full and every schedule, warms every variant up twice (a CUDA graph
    records on its second call) and reports the CUDA-graph skips, the graphs compiled and the
    graphs recorded while timed (all must be 0), and whether each variant's tokens equal its
    reference's (the compiled path's for the same schedule); the eager path then times the full
    schedule only (its reference and cost split). ``lossless_ks`` (with ``cuda_graphs``): the
    lossless mode's rounds on the CUDA-graph path, a constant draft of ``draft_budget`` layers,
    their time per token from ``acceptance`` (:mod:`.bench_lossless`). A variant that raises
    while warming up is left out and its error recorded."""
    dev = torch.device(device)
    model = model if model is not None else build_random_model(shape, dtype, device)
    decoders = {"": SkipDecoder(model)}
    if compile:
        decoders["-compiled"] = SkipDecoder(model, compile=True)
    if compile and plan_graphs:
        decoders["-compiled-plan"] = SkipDecoder(model, compile=True, compile_graph="plan")
    if cuda_graphs:
        decoders["-graphs"] = SkipDecoder(model, compile=CUDA_GRAPH_MODE)
    dec = decoders[""]
    L = dec.num_layers
    ids, mask = random_prompts(batch_size, prompt_len, model.config.vocab_size, dev)
    schedules: dict[str, StaticSchedule] = {"skipdecode-full": FullSchedule(L)}
    for s in speedups:
        schedules[f"skipdecode-{s}x"] = linear_for_speedup(L, s, new_tokens)

    def run_skip(decoder: SkipDecoder, schedule: StaticSchedule) -> dict[str, float]:
        out = decoder.generate(ids, schedule, new_tokens, mask, eos_token_id=[], decode_texts=False)
        st = out.stats
        return {
            "prefill_s": st.prefill_seconds,
            "decode_s": st.decode_seconds,
            "compile_s": st.compile_seconds,
            "steps": st.decode_steps,
            "layers_per_token": st.layers_per_token,
            "generated": out.generated_ids,
        }

    def run_hf(compiled: bool) -> dict[str, float]:
        start = time.perf_counter()
        prefill, decode = transformers_generate_seconds(model, ids, mask, new_tokens, 0, compiled)
        # generate = one prefill + (new_tokens - 1) cached decode passes
        return {
            "prefill_s": prefill,
            "decode_s": decode,
            "wall_s": time.perf_counter() - start,
            "steps": new_tokens - 1,
            "layers_per_token": float(L),
        }

    variants: dict[str, Callable[[], dict[str, float]]] = {}
    if with_transformers:
        variants["transformers-generate"] = lambda: run_hf(False)
        if compile and compiled_generate:
            variants["transformers-generate-compiled"] = lambda: run_hf(True)
    for suffix, decoder in decoders.items():
        for name, sched in schedules.items():
            if suffix == "-compiled-plan" or (suffix == "" and cuda_graphs):
                if name != "skipdecode-full":
                    continue
            variants[name + suffix] = lambda d=decoder, s=sched: run_skip(d, s)
    if cuda_graphs and lossless_ks:
        variants.update(
            lossless_variants(
                decoders["-graphs"], ids, mask, new_tokens, lossless_ks, draft_budget,
                reference="skipdecode-full-graphs",
            )
        )  # fmt: skip

    skips = cudagraph_skips()
    warm, failed = warm_up(variants, twice=cuda_graphs)  # compiles (and records graphs)
    recorded = sum(d.compiled.captures for d in decoders.values() if d.compiled is not None)
    samples, compiled_while_timed = timed(variants, repeats)
    recorded = (
        sum(d.compiled.captures for d in decoders.values() if d.compiled is not None) - recorded
    )

    rows: dict[str, dict[str, Any]] = {}
    for name, runs in samples.items():
        steps = runs[0]["steps"]
        per_step = [1000 * r["decode_s"] / max(steps, 1) for r in runs]
        decode = statistics.median(r["decode_s"] for r in runs)
        prefill = statistics.median(r["prefill_s"] for r in runs)
        med, q1, q3 = quartiles(per_step)
        rows[name] = {
            "prefill_ms": 1000 * prefill,
            "decode_ms_per_step": med,
            "decode_ms_q1": q1,
            "decode_ms_q3": q3,
            "tokens_per_s": batch_size * new_tokens / (prefill + decode),
            "decode_tokens_per_s": batch_size * steps / decode if decode > 0 else float("nan"),
            "layers_per_token": runs[0]["layers_per_token"],
            "compiled": name.endswith(COMPILED_SUFFIXES),
        }
        reference = warm[name].get("reference") or reference_of(name)
        if reference in warm and "generated" in warm[name]:
            rows[name]["tokens_equal"] = reference
            rows[name]["tokens_equal_reference"] = torch.equal(
                warm[name]["generated"], warm[reference]["generated"]
            )
        if name.endswith(COMPILED_SUFFIXES):  # the warm-up call's compiling, apart from decoding
            w = warm[name]
            steady = statistics.median(r.get("wall_s", 0.0) for r in runs)
            rows[name]["compile_s"] = (
                w["compile_s"] if "compile_s" in w else max(0.0, w["wall_s"] - steady)
            )

    splits = {
        suffix: step_cost_split(d, ids, mask, steps=max(5, 2 * repeats))
        for suffix, d in decoders.items()
        if suffix != "-compiled-plan"  # its layers are one graph: no split between them
    }
    split = splits[""]
    lossless_rows(rows, acceptance)
    derive_speedups(rows, schedules, splits, L, with_transformers)
    if limits is not None:
        for r in rows.values():
            if r["decode_ms_per_step"] is None:
                continue
            floor = step_floor_seconds(
                dec.adapter, r["layers_per_token"], batch_size, prompt_len + new_tokens, limits
            )
            r["floor_ms"] = 1000 * floor["seconds"]
            r["floor_multiple"] = r["decode_ms_per_step"] / r["floor_ms"]
            for kind in ("bandwidth", "compute"):
                r[f"{kind}_floor_ms"] = 1000 * floor[f"{kind}_seconds"]
                r[f"{kind}_floor_multiple"] = r["decode_ms_per_step"] / r[f"{kind}_floor_ms"]
    full = rows["skipdecode-full"]["decode_ms_per_step"] / 1000
    other = min(split["non_layer_s"], full)
    return {
        "shape": shape,
        "cudagraph_skips": cudagraph_skips() - skips,
        "graphs_compiled_while_timed": compiled_while_timed,
        "graphs_recorded_while_timed": recorded if cuda_graphs else None,
        "failed": failed,
        "acceptance": acceptance if lossless_ks else None,
        "num_layers": L,
        "batch_size": batch_size,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "dtype": str(dtype).replace("torch.", ""),
        "device": device_name(dev),
        "threads": torch.get_num_threads(),
        "limits": None if limits is None else limits.as_dict(),
        "cost_split": {
            "full_step_ms": 1000 * full,
            "non_layer_ms": 1000 * other,
            "head_ms": 1000 * split["head_s"],
            "per_layer_ms": 1000 * (full - other) / L,
            "non_layer_fraction": other / full,
            "head_fraction": min(split["head_s"], full) / full,
            "overhead_fraction": max(other - split["head_s"], 0.0) / full,
        },
        "variants": rows,
        "cost_split_compiled": None
        if "-compiled" not in splits
        else {
            "non_layer_ms": 1000 * splits["-compiled"]["non_layer_s"],
            "head_ms": 1000 * splits["-compiled"]["head_s"],
        },
        # the GEMM form of each small-row product the compiled graphs were written with
        "matmul_forms": None if not compile else decoders["-compiled"].compiled.forms.table(),
        "plan_graphs": compile and plan_graphs,
    }


# --------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--mode", choices=["decode", "train"], default="decode")
    p.add_argument("--shapes", nargs="+", default=["opt-1.3b", "smollm2-135m", "tiny"])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32])
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--speedups", nargs="+", type=int, default=list(SPEEDUPS))
    p.add_argument(
        "--compile",
        action="store_true",
        help="add transformers' compiled generate (static cache) and the compiled skipdecode "
        "path for every schedule (compile time reported apart)",
    )
    add_plan_graphs_option(
        p,
        "also the full schedule compiled as one graph for all its layers "
        "(skipdecode-full-compiled-plan)",
    )
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="add the CUDA-graph path (compile mode reduce-overhead, caches pooled at fixed "
        "addresses) for the full and every schedule; off a GPU it compiles without graphs and "
        "says so",
    )
    p.add_argument(
        "--lossless-ks",
        nargs="+",
        type=int,
        default=[],
        help="with --cuda-graphs: the lossless mode's rounds on the CUDA-graph path at these k "
        "(a constant draft of --draft-budget layers; per-token time from --acceptance)",
    )
    p.add_argument("--draft-budget", type=int, default=10, help="the lossless rows' draft layers")
    p.add_argument(
        "--no-compiled-generate",
        dest="compiled_generate",
        action="store_false",
        help="with --compile: leave out transformers' compiled generate (eager generate stays)",
    )
    p.add_argument(
        "--acceptance",
        type=Path,
        default=None,
        help="a lossless-mode benchmark record (python -m skipdecode.experiments.benchmarks."
        "bench_speculative --draft-budget B) of a trained draft: its tokens per verify at each k",
    )
    p.add_argument(
        "--no-floor", action="store_true", help="skip measuring the device's bandwidth and peak"
    )
    add_run_options(p, name=None)
    return p


def main(argv: list[str] | None = None) -> None:
    p = _parser()
    args = p.parse_args(argv)
    started = started_provenance(p)
    for s in args.shapes:
        if s not in SHAPES:
            p.error(f"--shapes: {s!r} is not known; choose from {sorted(SHAPES)}")
    for b in args.batch_sizes:
        if b < 1:
            p.error(f"--batch-sizes: {b} is not allowed (must be >= 1)")
    plan_graphs = decode_options_of(p, args).compile_graph == "plan"
    lossless_ks = tuple(args.lossless_ks)
    if lossless_ks and not args.cuda_graphs:
        p.error(f"--lossless-ks {list(lossless_ks)} needs --cuda-graphs (the rows time its path)")
    if any(k < 1 for k in lossless_ks):
        p.error(f"--lossless-ks: {list(lossless_ks)} is not allowed (each k must be >= 1)")
    acceptance = None
    if args.acceptance is not None and lossless_ks:
        try:
            acceptance = acceptance_of(args.acceptance, lossless_ks, args.draft_budget)
        except (OSError, ValueError, KeyError) as e:
            p.error(str(e))

    dtype = getattr(torch, args.dtype)
    limits = None
    if args.mode == "decode" and not args.no_floor:
        limits = measure_device(torch.device(args.device), dtype)
    cells = []
    for shape in args.shapes:
        if args.mode == "decode":
            model = build_random_model(shape, dtype, args.device)
            for b in progress(args.batch_sizes, "batch sizes", enabled=args.progress):
                cell = bench_decode(
                    shape,
                    b,
                    args.prompt_len,
                    args.new_tokens,
                    args.repeats,
                    tuple(args.speedups),
                    not args.no_transformers,
                    dtype,
                    args.device,
                    model=model,
                    compile=args.compile,
                    limits=limits,
                    plan_graphs=plan_graphs,
                    cuda_graphs=args.cuda_graphs,
                    lossless_ks=lossless_ks,
                    draft_budget=args.draft_budget,
                    acceptance=acceptance,
                    compiled_generate=args.compiled_generate,
                )
                cells.append(cell)
                print(decode_table([cell]), flush=True)
                # every finished cell written (whole), so a run cut short keeps what it measured
                stem = args.name or f"{args.mode}-{args.device}"
                partial = {"mode": args.mode, "args": vars(args), "cells": cells, "partial": True}
                write_bench(args.out, stem, partial, decode_table(cells), started, quiet=True)
            del model
        else:
            for b in args.batch_sizes:
                cell = bench_train(
                    shape,
                    b,
                    repeats=args.repeats,
                    speedups=tuple(args.speedups),
                    device=args.device,
                )
                cells.append(cell)
                print(train_table([cell]), flush=True)
    if args.mode == "decode":
        flag_batches(cells)
    table = decode_table(cells) if args.mode == "decode" else train_table(cells)
    stem = args.name or f"{args.mode}-{args.device}"
    payload = {"mode": args.mode, "args": vars(args), "cells": cells}
    write_bench(args.out, stem, payload, table, started)


if __name__ == "__main__":
    main()
