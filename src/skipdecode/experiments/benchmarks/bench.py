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
from .bench_tables import (
    add_plan_graphs_option,
    add_run_options,
    decode_options_of,
    decode_table,
    started_provenance,
    train_table,
    write_bench,
)
from .bench_timing import cudagraph_skips, quartiles, timed, with_compile
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
    records on its second call) and reports the CUDA-graph skips and the graphs compiled while
    timed (both must be 0)."""
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
        if compile:
            variants["transformers-generate-compiled"] = lambda: run_hf(True)
    for suffix, decoder in decoders.items():
        for name, sched in schedules.items():
            if suffix != "-compiled-plan" or name == "skipdecode-full":
                variants[name + suffix] = lambda d=decoder, s=sched: run_skip(d, s)

    skips = cudagraph_skips()
    warm = {name: fn() for name, fn in variants.items()}  # warm-up: compiles
    if cuda_graphs:  # a CUDA graph records on the second call: not in the timed ones
        warm = {name: with_compile(warm[name], fn()) for name, fn in variants.items()}
    samples, compiled_while_timed = timed(variants, repeats)

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
    _derive_speedups(rows, schedules, splits, L, with_transformers)
    if limits is not None:
        for r in rows.values():
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


def _derive_speedups(
    rows: dict[str, dict[str, Any]],
    schedules: dict[str, StaticSchedule],
    splits: dict[str, dict[str, float]],
    L: int,
    with_transformers: bool,
) -> None:
    """Each schedule's theoretical, measured and ideal speedup over the full schedule of its
    own path (eager over eager, compiled over compiled), the ideal from that path's own cost
    split, and the speedup over the optimized peer. A measured speedup above the theoretical
    one, or above the ideal one (efficiency above 1), is flagged."""
    for suffix, split in splits.items():
        full = rows[f"skipdecode-full{suffix}"]["decode_ms_per_step"] / 1000
        other = min(split["non_layer_s"], full)
        per_layer = (full - other) / L
        for name, sched in schedules.items():
            r = rows[name + suffix]
            m = r["layers_per_token"]
            r["theoretical_speedup"] = L / m
            r["measured_speedup"] = full / (r["decode_ms_per_step"] / 1000)
            r["ideal_speedup"] = full / (other + m * per_layer)
            r["efficiency"] = r["measured_speedup"] / r["ideal_speedup"]
            r["schedule"] = sched.describe()
            flags = []
            if r["measured_speedup"] > r["theoretical_speedup"] * 1.02:
                flags.append("measured above theoretical")
            if r["efficiency"] > 1.02:
                flags.append("measured above ideal")
            if flags:
                r["flag"] = "; ".join(flags)
    if not with_transformers:
        return
    for peer in ("transformers-generate", "transformers-generate-compiled"):
        if peer not in rows:
            continue
        t = rows[peer]["decode_ms_per_step"]
        for r in rows.values():
            r[f"speedup_vs_{peer.replace('-', '_')}"] = t / r["decode_ms_per_step"]


def flag_batches(cells: list[dict[str, Any]]) -> None:
    """Flag a variant whose ms per step at some batch exceeds its ms per step at a larger
    batch of the same shape (a smaller batch should never be slower per step)."""
    by_shape: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        by_shape.setdefault(c["shape"], []).append(c)
    for group in by_shape.values():
        group.sort(key=lambda c: c["batch_size"])
        for i, small in enumerate(group):
            for big in group[i + 1 :]:
                for name, r in small["variants"].items():
                    other = big["variants"].get(name)
                    if other and r["decode_ms_per_step"] > other["decode_ms_per_step"]:
                        note = f"slower per step than batch {big['batch_size']}"
                        r["flag"] = "; ".join(x for x in (r.get("flag"), note) if x)


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
                )
                cells.append(cell)
                print(decode_table([cell]), flush=True)
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
