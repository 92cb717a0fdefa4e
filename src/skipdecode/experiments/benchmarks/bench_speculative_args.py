"""The command line of the lossless-mode benchmark (:mod:`.bench_speculative`): its options with
their defaults, and the checks that refuse bad values by name before anything loads."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...arguments import at_least
from .bench_tables import add_plan_graphs_option, add_run_options
from .bench_workloads import CHAT_PROMPTS, WORKLOADS

__all__ = ["check_counts", "check_drafts", "parser"]


def parser(description: str) -> argparse.ArgumentParser:
    """The command line's parser: every option with its default."""
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2)")
    p.add_argument("--batch-sizes", nargs="+", type=at_least(1), default=[1, 8, 32])
    p.add_argument("--ks", nargs="+", type=at_least(1), default=[2, 4, 6])
    p.add_argument("--draft-speedup", type=at_least(1, float), default=2.0)
    p.add_argument("--new-tokens", type=at_least(1), default=48)
    p.add_argument("--repeats", type=at_least(1), default=3)
    p.add_argument(
        "--draft-budgets",
        nargs="*",
        type=int,
        default=[],
        help="also the largest k with a constant draft of b layers (each b)",
    )
    p.add_argument("--workload", choices=WORKLOADS, default="chat", help="what is decoded")
    p.add_argument(
        "--prompts",
        type=at_least(1),
        default=len(CHAT_PROMPTS),
        help=f"the first N prompts of the workload (chat: 1-{len(CHAT_PROMPTS)})",
    )
    p.add_argument(
        "--draft-budget",
        type=int,
        default=None,
        help="the k variants draft with a constant plan of b layers (default: the target plan)",
    )
    p.add_argument(
        "--draft-warmup",
        type=int,
        default=1,
        help="bottom layers of every constant draft (--draft-budget, --draft-budgets); the rest "
        "of its budget are the top layers (default 1: the shape speculative_b8/b10 train)",
    )
    p.add_argument(
        "--draft-vocab",
        type=int,
        default=None,
        help="every speculative variant drafts over N tokens (dataset: ranked by the training "
        "targets; chat: the first ids)",
    )
    p.add_argument(
        "--draft-vocabs",
        nargs="*",
        type=int,
        default=[],
        help="also the largest k with drafts over N tokens (each N): the subset draft head",
    )
    p.add_argument(
        "--auto-off",
        action="store_true",
        help="also the largest k with auto_off (plain decoding once speculating is slower)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="every variant (the full baseline too) on the compiled decode path",
    )
    add_plan_graphs_option(
        p,
        "one compiled graph for all of a pass's layers (one compile per layer set: meant "
        "for constant drafts) instead of one per layer kind",
    )
    p.add_argument(
        "--step-graphs",
        action="store_true",
        help="every variant on the CUDA-graph path with whole-step graphs and, for constant "
        "greedy drafts, sync-free rounds (core.device_rounds); replaces --compile",
    )
    add_run_options(p, name="speculative")  # --no-transformers: this benchmark has no peer
    return p


def check_counts(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, by option, a draft vocabulary or draft budget out of range (counts, k and batch
    sizes are refused by their types, :func:`skipdecode.arguments.at_least`).
    Returns nothing."""
    for n in args.draft_vocabs:
        if n < 1:
            p.error(f"--draft-vocabs: {n} is not allowed (a number of tokens >= 1)")
    if args.draft_vocab is not None and args.draft_vocab < 1:
        p.error(f"--draft-vocab: {args.draft_vocab} is not allowed (a number of tokens >= 1)")
    for b in args.draft_budgets:
        if b < 2:
            p.error(f"--draft-budgets: {b} is not allowed (layers >= 2: warm-up and top)")


def check_drafts(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses a ``--draft-budget`` under 2 layers, and a ``--draft-warmup`` that shapes no
    constant draft or leaves one no top layer. Returns nothing."""
    if args.draft_budget is not None and args.draft_budget < 2:
        p.error(f"--draft-budget: {args.draft_budget} is not allowed (layers >= 2)")
    budgets = [*args.draft_budgets, *([args.draft_budget] if args.draft_budget else [])]
    if not budgets and args.draft_warmup != 1:
        p.error(
            f"--draft-warmup: {args.draft_warmup} shapes constant drafts, and none is asked for; "
            "allowed with --draft-budget or --draft-budgets"
        )
    if budgets and not 1 <= args.draft_warmup < min(budgets):
        p.error(
            f"--draft-warmup: {args.draft_warmup} is not allowed (1 to one less than the "
            f"smallest constant draft budget, {min(budgets)}: a draft keeps a top layer)"
        )
