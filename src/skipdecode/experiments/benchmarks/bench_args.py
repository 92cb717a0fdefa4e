"""The decode and training benchmark's options (``python -m skipdecode.bench``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...arguments import at_least
from .bench_tables import add_plan_graphs_option, add_run_options

__all__ = ["SPEEDUPS", "bench_parser"]

#: The target speedups a decode cell times by default.
SPEEDUPS = (2, 3, 4, 5)


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """The benchmark's options (``doc``: its description)."""
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--mode", choices=["decode", "train"], default="decode")
    p.add_argument("--shapes", nargs="+", default=["opt-1.3b", "smollm2-135m", "tiny"])
    p.add_argument("--batch-sizes", nargs="+", type=at_least(1), default=[1, 8, 32])
    p.add_argument("--prompt-len", type=at_least(1), default=64)
    p.add_argument("--new-tokens", type=at_least(1), default=32)
    p.add_argument("--repeats", type=at_least(1), default=3)
    p.add_argument("--speedups", nargs="+", type=at_least(1), default=list(SPEEDUPS))
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
        "(a constant draft of --draft-budget layers; per-token time: a round over the tokens its "
        "own rounds yielded, or --acceptance's)",
    )
    p.add_argument("--draft-budget", type=int, default=10, help="the lossless rows' draft layers")
    p.add_argument(
        "--no-compiled-generate",
        dest="compiled_generate",
        action="store_false",
        help="with --compile: leave out transformers' compiled generate (eager generate and the "
        "gpt-fast-style loop stay)",
    )
    p.add_argument(
        "--no-loop",
        dest="loop",
        action="store_false",
        help="with --compile: leave out the gpt-fast-style compiled loop",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="after timing, profile a decode step of the graph paths and the loop: the kernels "
        "one step runs, their time and the host calls launching them (off a GPU: CPU operators)",
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
