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

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ...core.costs import transformers_generate_seconds
from ...core.engine import SkipDecoder
from ...core.fast_loop import FastLoop
from ...core.floor import DeviceLimits, measure_device
from ...core.options import CUDA_GRAPH_MODE
from ...evaluation.load import CpuLoad
from ...models.shapes import SHAPES, build_random_model, device_name, random_prompts
from ...progress import progress
from ...schedules import FullSchedule, StaticSchedule, linear_for_speedup
from .bench_args import SPEEDUPS, bench_parser
from .bench_lossless import acceptance_of, lossless_rows, lossless_variants
from .bench_profile import PROFILED, step_profiles
from .bench_rows import add_floors, cost_split_of, path_split_of, step_splits, variant_rows
from .bench_speedups import derive_speedups, flag_batches
from .bench_step_graphs import step_graph_costs
from .bench_tables import (
    decode_options_of,
    decode_table,
    started_provenance,
    train_table,
    write_bench,
)
from .bench_timing import cudagraph_skips, timed, warm_up
from .bench_training import bench_train

__all__ = ["SHAPES", "build_random_model", "bench_decode", "bench_train", "main"]


COMPILED_SUFFIXES = ("-compiled", "-compiled-plan", "-graphs", "-step")


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
    step_costs: bool = True,
    loop: bool = True,
    profile: bool = False,
) -> dict[str, Any]:
    """One (shape, batch) cell: every variant interleaved, median and quartiles of ``repeats``,
    compile time apart. ``compile``: compiled ``generate``, the gpt-fast-style loop (unless not
    ``compiled_generate`` / ``loop``) and each schedule's compiled path; ``plan_graphs``: full on
    one graph; ``cuda_graphs``: ``-graphs`` and ``-step`` (warmed twice, nothing compiled or
    recorded while timed; eager times full only); ``lossless_ks``: :mod:`.bench_lossless`;
    ``limits``: floors; ``step_costs``: whole-step graphs' cost; ``profile``: :mod:`.bench_profile`.
    Tokens against each variant's reference; a variant failing its warm-up is left out, error kept."""
    dev, loop_timed = torch.device(device), with_transformers and compile and loop
    model = model if model is not None else build_random_model(shape, dtype, device)
    decoders = _decoders(model, compile, plan_graphs, cuda_graphs)
    L = decoders[""].num_layers
    ids, mask = random_prompts(batch_size, prompt_len, model.config.vocab_size, dev)
    schedules: dict[str, StaticSchedule] = {"skipdecode-full": FullSchedule(L)}
    schedules |= {f"skipdecode-{s}x": linear_for_speedup(L, s, new_tokens) for s in speedups}
    fast = FastLoop(model, batch_size, prompt_len + new_tokens) if loop_timed else None
    variants = _variants(
        model, decoders, schedules, (ids, mask), new_tokens, with_transformers,
        (compile and compiled_generate, fast), (lossless_ks, draft_budget),
    )  # fmt: skip
    skips = cudagraph_skips()
    warm, failed = warm_up(variants, twice=cuda_graphs)  # compiles (and records graphs)
    recorded = -_captures(decoders)
    with CpuLoad() as load:  # whether anything else shared the machine while timing
        samples, compiled_while_timed = timed(variants, repeats)
    recorded += _captures(decoders)
    rows = variant_rows(samples, warm, batch_size, new_tokens, COMPILED_SUFFIXES)
    splits = step_splits(decoders, (ids, mask), repeats)
    lossless_rows(rows, acceptance)
    derive_speedups(rows, schedules, splits, L, with_transformers)
    if limits is not None:
        add_floors(rows, decoders[""].adapter, batch_size, prompt_len + new_tokens, limits)
    full = rows["skipdecode-full"]["decode_ms_per_step"] / 1000
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
        "load": load.result,
        "limits": None if limits is None else limits.as_dict(),
        "cost_split": cost_split_of(splits[""], full, L),
        "variants": rows,
        **_compiled_parts(decoders, splits, plan_graphs),
        "step_graphs": step_graph_costs(model, (ids, mask)) if cuda_graphs and step_costs else None,
        "step_profile": _profiles(decoders, schedules, fast, (ids, mask), rows)
        if profile
        else None,
    }


def _compiled_parts(
    decoders: dict[str, SkipDecoder], splits: dict[str, dict[str, float]], plan_graphs: bool
) -> dict[str, Any]:
    """What a cell records of its other paths: each one's cost split outside the layers and the
    head (``cost_split_compiled``, ``cost_split_graphs``: the ideal speedups of its variants
    follow from it), and the GEMM form of each small-row product its graphs were written with."""
    compiled = decoders.get("-compiled")
    return {
        "cost_split_compiled": None,  # none where the compiled path was not timed
        **{f"cost_split{s.replace('-', '_')}": path_split_of(v) for s, v in splits.items() if s},
        "matmul_forms": None if compiled is None else compiled.compiled.forms.table(),
        "plan_graphs": compiled is not None and plan_graphs,
    }


def _decoders(
    model: nn.Module, compile: bool, plan_graphs: bool, cuda_graphs: bool
) -> dict[str, SkipDecoder]:
    """The paths a cell times, by variant suffix: eager, compiled, one graph per plan, graphs."""
    decoders = {"": SkipDecoder(model)}
    if compile:
        decoders["-compiled"] = SkipDecoder(model, compile=True)
    if compile and plan_graphs:
        decoders["-compiled-plan"] = SkipDecoder(model, compile=True, compile_graph="plan")
    if cuda_graphs:
        decoders["-graphs"] = SkipDecoder(model, compile=CUDA_GRAPH_MODE)
        decoders["-step"] = SkipDecoder(model, compile=CUDA_GRAPH_MODE, compile_graph="step")
    return decoders


def _profiles(
    decoders: dict[str, SkipDecoder],
    schedules: dict[str, StaticSchedule],
    fast: FastLoop | None,
    prompts: tuple[torch.Tensor, torch.Tensor],
    rows: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The variants :data:`.bench_profile.PROFILED` names that were timed, each profiled as a
    call decoding n tokens, beside its timed ms a step."""
    ids, mask = prompts
    runs: dict[str, Callable[[int], Any]] = {}
    for suffix, decoder in decoders.items():
        for name, schedule in schedules.items():
            if name + suffix in PROFILED:
                runs[name + suffix] = lambda n, d=decoder, s=schedule: d.generate(
                    ids, s, n, mask, eos_token_id=[], decode_texts=False
                )
    if fast is not None:
        runs["transformers-loop-compiled"] = lambda n: fast.generate(ids, mask, n)
    timed_ms = {n: r["decode_ms_per_step"] for n, r in rows.items()}
    timed = {n: r for n, r in runs.items() if n in rows}
    new_tokens = rows["skipdecode-full"]["raw"]["steps"] + 1  # the prefill's token, then steps
    return step_profiles(timed, new_tokens, ids.device, timed_ms)


def _captures(decoders: dict[str, SkipDecoder]) -> int:
    return sum(d.compiled.captures for d in decoders.values() if d.compiled is not None)


def _variants(
    model: nn.Module,
    decoders: dict[str, SkipDecoder],
    schedules: dict[str, StaticSchedule],
    prompts: tuple[torch.Tensor, torch.Tensor],
    new_tokens: int,
    with_transformers: bool,
    compiled: tuple[bool, FastLoop | None],
    lossless: tuple[tuple[int, ...], int],
) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every timed call of a cell, by variant name: transformers' ``generate`` eager, and where
    ``compiled`` says, compiled ``generate`` and the gpt-fast-style loop given; each schedule on each path
    (the eager path times full only beside the graph path, and one graph per plan serves full
    only); and on the graph paths the lossless mode at each of ``lossless``'s k with a draft of
    its budget of layers."""
    ids, mask = prompts
    L = decoders[""].num_layers
    cuda_graphs = "-graphs" in decoders

    def run_skip(decoder: SkipDecoder, schedule: StaticSchedule) -> dict[str, Any]:
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

    def run_hf(compiled: bool) -> dict[str, Any]:
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

    def run_loop(loop: FastLoop) -> dict[str, Any]:
        start = time.perf_counter()
        tokens, prefill, decode = loop.generate(ids, mask, new_tokens)
        return {
            "wall_s": time.perf_counter() - start,
            "prefill_s": prefill,
            "decode_s": decode,
            "steps": new_tokens - 1,
            "layers_per_token": float(L),
            "generated": tokens,
            "reference": "skipdecode-full",  # greedy, the same model: the same tokens
        }

    variants: dict[str, Callable[[], dict[str, Any]]] = {}
    if with_transformers:
        variants["transformers-generate"] = lambda: run_hf(False)
        if compiled[0]:
            variants["transformers-generate-compiled"] = lambda: run_hf(True)
        if compiled[1] is not None:  # the loop
            variants["transformers-loop-compiled"] = lambda: run_loop(compiled[1])
    for suffix, decoder in decoders.items():
        for name, sched in schedules.items():
            if suffix == "-compiled-plan" or (suffix == "" and cuda_graphs):
                if name != "skipdecode-full":
                    continue
            variants[name + suffix] = lambda d=decoder, s=sched: run_skip(d, s)
    ks, budget = lossless
    if cuda_graphs and ks:
        for suffix in ("-graphs", "-step"):  # host-driven and sync-free rounds
            full = f"skipdecode-full{suffix}"
            variants |= lossless_variants(
                decoders[suffix], ids, mask, new_tokens, ks, budget, reference=full
            )
    return variants


def main(argv: list[str] | None = None) -> None:
    p = bench_parser(__doc__)
    args = p.parse_args(argv)
    started = started_provenance(p)
    for s in args.shapes:
        if s not in SHAPES:
            p.error(f"--shapes: {s!r} is not known; choose from {sorted(SHAPES)}")
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
                    loop=args.loop,
                    step_costs=b == args.batch_sizes[0],
                    profile=args.profile,
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
    write_bench(args.out, stem, payload, table, started, allow_busy=args.allow_busy)


if __name__ == "__main__":
    main()
