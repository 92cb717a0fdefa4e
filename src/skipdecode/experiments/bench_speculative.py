"""Benchmark of lossless SkipDecode (self-speculative decoding) on real weights.

SmolLM2-135M-Instruct (the converted offline copy, or any exported model with ``--model``) on
chat prompts, greedy, a fixed number of new tokens (EOS off, so every variant does the same
work). Variants, interleaved and repeated (median after a warm-up): transformers ``generate``,
skipdecode ``full``, and ``speculative`` with the SkipDecode target plan as draft for each
``k``. Every speculative output is checked to be the full model's, token for token.

    python -m skipdecode.experiments.bench_speculative --batch-sizes 1 8 32 --ks 2 4 6
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..core.costs import transformers_generate_seconds
from ..core.engine import SkipDecoder
from ..progress import progress
from ..schedules import FullSchedule, Schedule, build_schedule
from .bench_tables import add_run_options, write_bench

__all__ = ["CHAT_PROMPTS", "bench_speculative", "speculative_table", "main"]

CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write one sentence about a restaurant near the river that serves French food.",
    "List three primary colors.",
    "Explain what a cache is in one sentence.",
    "Give me a short tip for staying focused while studying.",
    "What is 12 times 7?",
    "Describe the ocean in two sentences.",
    "Name a famous painting and its painter.",
    "Why do leaves change color in autumn?",
    "Translate 'good morning' into Spanish.",
    "Suggest a name for a coffee shop.",
    "What does a compiler do?",
    "Write a haiku about rain.",
    "How many legs does a spider have?",
    "Summarize the plot of Cinderella in one sentence.",
    "What is photosynthesis?",
)


def _chat_batch(tokenizer: Any, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    prompts = [CHAT_PROMPTS[i % len(CHAT_PROMPTS)] for i in range(batch)]
    chats = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts
    ]
    tokenizer.padding_side = "left"
    enc = tokenizer(chats, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def bench_speculative(
    model: torch.nn.Module,
    tokenizer: Any,
    batch_size: int,
    ks: tuple[int, ...] = (2, 4, 6),
    draft_speedup: float = 2.0,
    new_tokens: int = 48,
    repeats: int = 3,
    with_transformers: bool = True,
    draft_vocabs: tuple[int, ...] = (),
) -> dict[str, Any]:
    """One batch size: every variant interleaved, median of ``repeats`` after a warm-up.
    ``draft_vocabs``: for each size N, the largest k again with drafts over N tokens: the
    tokenizer's first N ids (a BPE vocabulary's merge order, a frequency proxy where there are
    no training targets) and EOS."""
    dec = SkipDecoder(model, tokenizer)
    L = dec.num_layers
    ids, mask = _chat_batch(tokenizer, batch_size)
    draft = {"name": "target", "target_speedup": draft_speedup, "expected_length": new_tokens}
    schedules: dict[str, Schedule] = {"skipdecode-full": FullSchedule(L)}
    for k in ks:
        schedules[f"speculative-k{k}"] = build_schedule(
            {"name": "speculative", "draft": draft, "k": k}, L, new_tokens
        )
    largest = f"speculative-k{max(ks)}"
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    for size in draft_vocabs:
        vocab = list(dict.fromkeys([*eos, *range(size)]))[:size]
        schedules[f"{largest}-vocab{size}"] = schedules[largest].with_draft_vocab(vocab)
    outputs: dict[str, torch.Tensor] = {}

    def run_skip(name: str, schedule: Schedule) -> dict[str, Any]:
        out = dec.generate(ids, schedule, new_tokens, mask, eos_token_id=[], decode_texts=False)
        outputs[name] = out.generated_ids
        st = out.stats
        spec = st.speculation.as_dict() if st.speculation is not None else None
        return {
            "decode_s": st.decode_seconds,
            "steps": st.decode_steps,
            "layers_per_token": st.layers_per_token,
            "speculation": spec,
        }

    def run_hf() -> dict[str, Any]:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        _, decode = transformers_generate_seconds(model, ids, mask, new_tokens, pad)
        return {"decode_s": decode, "steps": new_tokens - 1}

    variants: dict[str, Callable[[], dict[str, Any]]] = {}
    if with_transformers:
        variants["transformers-generate"] = run_hf
    for name, sched in schedules.items():
        variants[name] = lambda name=name, sched=sched: run_skip(name, sched)
    for fn in variants.values():  # warm-up
        fn()
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            samples[name].append(fn())

    rows: dict[str, dict[str, Any]] = {}
    for name, runs in samples.items():
        decode = statistics.median(r["decode_s"] for r in runs)
        rows[name] = {"ms_per_token": 1000 * decode / max(runs[0]["steps"], 1)}
        if "layers_per_token" in runs[0]:
            rows[name]["layers_per_token"] = runs[0]["layers_per_token"]
        if runs[0].get("speculation"):
            rows[name].update(
                acceptance_rate=runs[0]["speculation"]["acceptance_rate"],
                tokens_per_verify=runs[0]["speculation"]["tokens_per_verify"],
                identical_to_full=bool(torch.equal(outputs[name], outputs["skipdecode-full"])),
            )
    full_ms = rows["skipdecode-full"]["ms_per_token"]
    hf_ms = rows.get("transformers-generate", {}).get("ms_per_token")
    for r in rows.values():
        r["speedup_vs_full"] = full_ms / r["ms_per_token"]
        if hf_ms:
            r["speedup_vs_transformers"] = hf_ms / r["ms_per_token"]
    return {
        "model": str(getattr(model.config, "_name_or_path", "") or model.config.model_type),
        "num_layers": L,
        "batch_size": batch_size,
        "prompt_len": int(ids.shape[1]),
        "new_tokens": new_tokens,
        "draft": draft,
        "repeats": repeats,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "device": str(ids.device),
        "threads": torch.get_num_threads(),
        "variants": rows,
    }


def speculative_table(cells: list[dict[str, Any]]) -> str:
    out = [
        "| model | batch | variant | acceptance | tokens/verify | layers/token | ms/token | "
        "vs full | vs transformers | exact |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        for name, r in c["variants"].items():

            def f(key: str, fmt: str = "{:.2f}", r: dict = r) -> str:
                return fmt.format(r[key]) if r.get(key) is not None else ""

            out.append(
                f"| {Path(c['model']).name} | {c['batch_size']} | {name} | "
                f"{f('acceptance_rate')} | {f('tokens_per_verify')} | {f('layers_per_token', '{:.1f}')} | "
                f"{f('ms_per_token')} | {f('speedup_vs_full', '{:.2f}x')} | "
                f"{f('speedup_vs_transformers', '{:.2f}x')} | {r.get('identical_to_full', '')} |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2)")
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32])
    p.add_argument("--ks", nargs="+", type=int, default=[2, 4, 6])
    p.add_argument("--draft-speedup", type=float, default=2.0)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--draft-vocabs",
        nargs="*",
        type=int,
        default=[],
        help="also the largest k with drafts over N tokens (each N): the subset draft head",
    )
    add_run_options(p, name="speculative")
    args = p.parse_args(argv)
    for n in args.draft_vocabs:
        if n < 1:
            p.error(f"--draft-vocabs: {n} is not allowed (a number of tokens >= 1)")
    for k in args.ks:
        if k < 1:
            p.error(f"--ks: {k} is not allowed (k >= 1)")
    for b in args.batch_sizes:
        if b < 1:
            p.error(f"--batch-sizes: {b} is not allowed (must be >= 1)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..models.assets import smollm2_dir

    path = args.model or smollm2_dir()
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, args.dtype), attn_implementation="sdpa"
    ).to(args.device)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
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
            not args.no_transformers,
            tuple(args.draft_vocabs),
        )
        cell["model"] = str(path)
        cells.append(cell)
        print(speculative_table([cell]), flush=True)
    write_bench(args.out, args.name, {"args": vars(args), "cells": cells}, speculative_table(cells))


if __name__ == "__main__":
    main()
