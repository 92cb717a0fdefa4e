"""Benchmark of lossless SkipDecode (self-speculative decoding) on real weights.

SmolLM2-135M-Instruct (the converted offline copy, or any exported model with ``--model``) on
every prompt of the workload (``--workload``, ``bench_workloads``: ``chat`` prompts in the
model's chat template, or for a fine-tuned export the ``dataset`` test inputs it was trained
for, prompted and batched as the evaluation does; ``--prompts``: the first N; batches cover
them all, a batch larger than the workload repeats prompts), greedy, stopping at EOS: the work
a user's requests make. Variants, interleaved and repeated (median of the workload's total
decode time after a warm-up on its first batch): skipdecode ``full`` (the baseline: plain
decoding of the same model on the same path), ``speculative`` with the SkipDecode target plan
as draft for each ``k`` (``--draft-budget b``: a constant b-layer plan instead; ``--draft-vocab
N``: every variant drafts over N tokens), and with constant-budget drafts (``--draft-budgets``:
``{name: budgets, budgets: [b]}``) and drafts over vocabulary subsets (``--draft-vocabs``) at the
largest ``k``; with ``--auto-off`` also the largest ``k`` with ``auto_off`` (each batch times a
plain step and its first rounds and decodes plainly once speculating is slower; the label says
in how many of the workload's batches it was off: turned off, or off from the start because an
earlier call of the same batch size, the warm-up included, had turned it off). Every
speculative output is checked to be the full model's, token for token; every variant runs the
same tokens.

Per variant: acceptance overall and per draft budget, tokens per verify, and the round's cost
split (draft layers, draft head, verify, acceptance, bookkeeping; ``profile_rounds``) in units
of one full decode step, with the speedup it predicts: ``tokens per round / (drafts x draft
cost + verify + acceptance + bookkeeping)``. Among the constant-budget drafts at the largest
``k`` (``--draft-budgets``, and ``--draft-budget``'s own) the one with the highest predicted
speedup is marked chosen. The split is timed on a CPU only (on a GPU it
would synchronise every part of every round). With ``--compile`` every variant, the full
baseline included, runs on the compiled decode path (``core.compiled``), its compiling kept out
of the decode time. (transformers' ``generate`` with a static cache and ``torch.compile`` is
the peer of the compiled decode benchmark, ``make study NAME=decode_smollm2_cpu_compiled``.)

    python -m skipdecode.experiments.benchmarks.bench_speculative --batch-sizes 1 8 32 --ks 2 4 6 \
        --draft-budgets 6 8 10
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch

from ...core.engine import SkipDecoder
from ...evaluation.load import CpuLoad
from ...progress import progress
from ...schedules import FullSchedule, Schedule, build_schedule
from .bench_speculative_args import check_counts, check_drafts, parser
from .bench_tables import (
    decode_options_of,
    load_bench_model,
    speculative_table,
    started_provenance,
    write_bench,
)
from .bench_workloads import CHAT_PROMPTS, Workload, load_workload

__all__ = ["CHAT_PROMPTS", "bench_speculative", "round_cost", "main"]

PHASES = ("draft_layers", "draft_head", "verify", "accept", "bookkeeping")


def round_cost(spec: dict[str, Any], full_step_s: float, steps: int) -> dict[str, Any]:
    """A round's cost split in units of one full decode step at the same batch size, and the
    speedup it predicts. ``spec``: the summed speculation counts of the workload (with
    ``phase_seconds``); ``steps``: the full model's decode steps on the same workload."""
    rounds = spec["rounds"] or 1
    phases = spec.get("phase_seconds") or {}
    unit = full_step_s * rounds
    per_round = {p: phases.get(p, 0.0) / unit for p in PHASES}
    drafts = spec["draft_passes"] / rounds
    out = {
        "drafts_per_round": drafts,
        "draft_pass": (per_round["draft_layers"] + per_round["draft_head"]) / drafts
        if drafts
        else None,
        "head_share_of_draft": per_round["draft_head"]
        / (per_round["draft_layers"] + per_round["draft_head"])
        if drafts
        else None,
        **{f"{p}_per_round": v for p, v in per_round.items()},
        # the batch advances by the furthest row; per row, tokens per verify
        "steps_per_round": steps / rounds,
    }
    total = sum(per_round.values())
    out["predicted_speedup"] = out["steps_per_round"] / total if total else None
    return out


def _schedules(
    num_layers: int,
    ks: tuple[int, ...],
    draft: dict[str, Any],
    new_tokens: int,
    draft_budgets: tuple[int, ...],
    draft_warmup: int,
    auto_off: bool,
) -> dict[str, Schedule]:
    """Each variant's schedule by name: the full baseline, speculative with ``draft`` for each
    k, and at the largest k the constant-budget drafts and, with ``auto_off``, auto_off."""
    L = num_layers
    schedules: dict[str, Schedule] = {"skipdecode-full": FullSchedule(L)}
    for k in ks:
        schedules[f"speculative-k{k}"] = build_schedule(
            {"name": "speculative", "draft": draft, "k": k}, L, new_tokens
        )
    k_max = max(ks)
    largest = f"speculative-k{k_max}"
    for b in draft_budgets:
        constant = {"name": "budgets", "budgets": [b], "warmup_layers": draft_warmup}
        schedules[f"{largest}-b{b}"] = build_schedule(
            {"name": "speculative", "draft": constant, "k": k_max}, L, new_tokens
        )
    if auto_off:
        schedules[f"{largest}-auto"] = build_schedule(
            {"name": "speculative", "draft": draft, "k": k_max, "auto_off": True}, L, new_tokens
        )
    return schedules


def _with_draft_vocabs(
    schedules: dict[str, Schedule],
    largest: str,
    workload: Workload,
    tokenizer: Any,
    draft_vocabs: tuple[int, ...],
    draft_vocab: int | None,
) -> None:
    """Adds to ``schedules`` the ``largest`` variant again drafting over each size of
    ``draft_vocabs``; with ``draft_vocab``, every other speculative variant drafts over that
    many tokens. Returns nothing."""
    for size in draft_vocabs:
        vocab = workload.draft_vocab(tokenizer, size)
        schedules[f"{largest}-vocab{size}"] = schedules[largest].with_draft_vocab(vocab)
    if draft_vocab is not None:
        vocab = workload.draft_vocab(tokenizer, draft_vocab)
        for name, sched in schedules.items():
            if name != "skipdecode-full" and not name.startswith(f"{largest}-vocab"):
                schedules[name] = sched.with_draft_vocab(vocab)  # type: ignore[attr-defined]


def _run(
    dec: SkipDecoder, schedule: Schedule, work: list, new_tokens: int, eos: list[int]
) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """``(run, generated)`` of one variant over the batches ``work``: the run's totals
    (``decode_s``, ``steps``, ``tokens``), its summed speculation counts and its per-batch
    records; the generated ids of each batch."""
    counts, generated, batches_run = None, [], []
    for ids, mask in work:
        out = dec.generate(
            ids, schedule, new_tokens, mask, eos_token_id=eos, decode_texts=False,
            profile_rounds=ids.device.type == "cpu",
        )  # fmt: skip
        st = out.stats
        batch = {
            "decode_s": st.decode_seconds,
            "steps": max(st.generated_lengths) - 1,
            "tokens": sum(st.generated_lengths),
        }
        generated.append(out.generated_ids)
        if st.speculation is not None:
            sp = st.speculation
            batch.update(drafted=sp.drafted, accepted=sp.accepted, row_rounds=sp.row_rounds)
            counts = sp if counts is None else (counts.add(sp) or counts)
        batches_run.append(batch)
    spec = counts.as_dict() if counts is not None else None
    run = {
        **{key: sum(b[key] for b in batches_run) for key in ("decode_s", "steps", "tokens")},
        "speculation": spec,
        "batches": batches_run,
    }
    return run, generated


def _samples(
    dec: SkipDecoder,
    schedules: dict[str, Schedule],
    batches: list,
    new_tokens: int,
    eos: list[int],
    repeats: int,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[torch.Tensor]]]:
    """``(samples, outputs)``: each variant's ``repeats`` runs over the whole workload,
    interleaved after a warm-up on its first batch; each variant's generated ids of its last
    run."""
    outputs: dict[str, list[torch.Tensor]] = {}
    for name, schedule in schedules.items():  # warm-up on the first batch
        _, outputs[name] = _run(dec, schedule, batches[:1], new_tokens, eos)
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in schedules}
    for _ in range(repeats):
        for name, schedule in schedules.items():
            run, outputs[name] = _run(dec, schedule, batches, new_tokens, eos)
            samples[name].append(run)
    return samples, outputs


def _row(
    runs: list[dict[str, Any]],
    generated: list[torch.Tensor],
    full: list[torch.Tensor],
    full_s: float,
    full_steps: int,
) -> dict[str, Any]:
    """One variant's row from its ``runs``: median decode time, speedup over the full model
    (``full_s``: its median decode time, ``full_steps``: its decode steps), per-batch records
    and, if it speculates, its acceptance, whether its output ``generated`` is the full
    model's ``full``, and the round's cost split."""
    decode = statistics.median(r["decode_s"] for r in runs)
    row: dict[str, Any] = {
        "decode_s": decode,
        "ms_per_step_of_full": 1000 * decode / max(full_steps, 1),
        "tokens": runs[0]["tokens"],
        "speedup_vs_full": full_s / decode,
        "decode_s_per_repeat": [r["decode_s"] for r in runs],  # decode_s is their median
        # per batch (at batch 1: per prompt), its decode time the median over the repeats
        "per_batch": [
            {
                **first,
                "decode_s": statistics.median(r["batches"][i]["decode_s"] for r in runs),
                "decode_s_per_repeat": [r["batches"][i]["decode_s"] for r in runs],
            }
            for i, first in enumerate(runs[0]["batches"])
        ],
    }
    spec = runs[0]["speculation"]
    if spec:
        row.update(
            acceptance_rate=spec["acceptance_rate"],
            tokens_per_verify=spec["tokens_per_verify"],
            acceptance_by_budget={
                str(b): v["acceptance_rate"] for b, v in spec["by_budget"].items()
            },
            turned_off=spec["turned_off"],
            started_off=spec["started_off"],
            plain_rounds=spec["plain_rounds"],
            identical_to_full=all(torch.equal(a, b) for a, b in zip(generated, full, strict=True)),
        )
        if spec.get("phase_seconds"):
            row["cost"] = round_cost(spec, full_s / max(full_steps, 1), full_steps)
    return row


def _rows(
    samples: dict[str, list[dict[str, Any]]], outputs: dict[str, list[torch.Tensor]]
) -> dict[str, dict[str, Any]]:
    """Each variant's row by name (:func:`_row`), against the full model's runs."""
    full_runs = samples["skipdecode-full"]
    full_s = statistics.median(r["decode_s"] for r in full_runs)
    full_steps = full_runs[0]["steps"]
    return {
        name: _row(runs, outputs[name], outputs["skipdecode-full"], full_s, full_steps)
        for name, runs in samples.items()
    }


def _mark_chosen(
    rows: dict[str, dict[str, Any]],
    largest: str,
    draft_budgets: tuple[int, ...],
    draft_budget: int | None,
) -> None:
    """Marks ``chosen`` the constant-budget draft at the ``largest`` k with the highest predicted
    speedup (``draft_budget``'s own among them), where every one has a prediction. Returns
    nothing."""
    constant = [f"{largest}-b{b}" for b in draft_budgets]
    if draft_budget is not None and draft_budgets:  # the k variants draft with one too
        constant.append(largest)
    predicted = {n: (rows[n].get("cost") or {}).get("predicted_speedup") for n in constant}
    if predicted and all(v is not None for v in predicted.values()):
        rows[max(predicted, key=lambda n: predicted[n])]["chosen"] = True


def bench_speculative(
    model: torch.nn.Module,
    tokenizer: Any,
    batch_size: int,
    ks: tuple[int, ...] = (2, 4, 6),
    draft_speedup: float = 2.0,
    new_tokens: int = 48,
    repeats: int = 3,
    draft_vocabs: tuple[int, ...] = (),
    draft_budgets: tuple[int, ...] = (),
    workload: Workload | None = None,
    auto_off: bool = False,
    compile: bool | str = False,
    draft_budget: int | None = None,
    draft_vocab: int | None = None,
    draft_warmup: int = 1,
    compile_graph: str = "layer",
) -> dict[str, Any]:
    """One batch size: every variant over the whole workload, interleaved, median of
    ``repeats`` after a warm-up. ``draft_vocabs``: for each size N, the largest k again with
    drafts over N tokens (the workload's :meth:`~.bench_workloads.Workload.draft_vocab`: the
    training targets' most frequent, or the tokenizer's first ids). ``draft_budgets``: the
    largest k with a constant draft of b layers (``draft_warmup`` bottom layers plus the top
    b - ``draft_warmup``; default: the bottom layer and the top b - 1).
    ``auto_off``: the largest k again, turning itself off where it does not pay. ``compile``:
    every variant on the compiled decode path. ``workload``: the prompts (default: every chat
    prompt). ``draft_budget``: the ``k`` variants draft with a constant plan of that many layers
    instead of the target plan; ``draft_vocab``: every speculative variant drafts over that many
    tokens. ``compile_graph``: what one compiled graph covers (``"plan"``: all of a pass's
    layers, one compile per layer set)."""
    dec = SkipDecoder(model, tokenizer, compile=compile, compile_graph=compile_graph)
    L = dec.num_layers
    if workload is None:
        workload = load_workload("chat", tokenizer, len(CHAT_PROMPTS), Path("."))
    batches = workload.batches(batch_size)
    draft: dict[str, Any] = {
        "name": "target", "target_speedup": draft_speedup, "expected_length": new_tokens
    }  # fmt: skip
    if draft_budget is not None:
        draft = {"name": "budgets", "budgets": [draft_budget], "warmup_layers": draft_warmup}
    schedules = _schedules(L, ks, draft, new_tokens, draft_budgets, draft_warmup, auto_off)
    largest = f"speculative-k{max(ks)}"
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    _with_draft_vocabs(schedules, largest, workload, tokenizer, draft_vocabs, draft_vocab)
    with CpuLoad() as load:  # whether anything else shared the machine while timing
        samples, outputs = _samples(dec, schedules, batches, new_tokens, eos, repeats)
    rows = _rows(samples, outputs)
    _mark_chosen(rows, largest, draft_budgets, draft_budget)
    first_ids = batches[0][0]
    return {
        "model": str(getattr(model.config, "_name_or_path", "") or model.config.model_type),
        "num_layers": L,
        "batch_size": batch_size,
        "workload": workload.name,
        "prompts": len(workload.prompts),
        "batches": len(batches),
        "prompt_len": int(first_ids.shape[1]),
        "new_tokens": new_tokens,
        "stop_at_eos": True,
        "draft": draft,
        "draft_vocab": draft_vocab,
        "repeats": repeats,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "device": str(first_ids.device),
        "threads": torch.get_num_threads(),
        "load": load.result,
        "compiled": compile,
        "compile_graph": compile_graph if compile else None,
        "compile_s": dec.compiled.compile_seconds if dec.compiled is not None else None,
        # the GEMM form of each small-row product the compiled graphs were written with
        "matmul_forms": dec.compiled.forms.table() if dec.compiled is not None else None,
        "variants": rows,
    }


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    args = p.parse_args(argv)
    started = started_provenance(p)
    check_counts(p, args)
    options = decode_options_of(p, args)
    compile_graph = options.compile_graph
    check_drafts(p, args)
    model, tokenizer, path = load_bench_model(args.model, args.dtype, args.device)
    try:
        workload = load_workload(args.workload, tokenizer, args.prompts, path)
    except ValueError as err:
        p.error(str(err))
    cells = []
    for b in progress(args.batch_sizes, "batch sizes", enabled=args.progress):
        cell = bench_speculative(
            model,
            tokenizer,
            b,
            tuple(args.ks),
            args.draft_speedup,
            args.new_tokens,
            args.repeats,
            tuple(args.draft_vocabs),
            tuple(args.draft_budgets),
            workload,
            args.auto_off,
            options.compile,
            args.draft_budget,
            args.draft_vocab,
            args.draft_warmup,
            compile_graph,
        )
        cell["model"] = str(path)
        cells.append(cell)
        print(speculative_table([cell]), flush=True)
    payload = {"args": vars(args), "cells": cells}
    table = speculative_table(cells)
    write_bench(args.out, args.name, payload, table, started, allow_busy=args.allow_busy)


if __name__ == "__main__":
    main()
