"""Two drafts compared over training seeds: a seed-aware interval for tokens per verify.

Each side is a draft (a shape, a budget, a recipe) trained with several seeds; each trained
model is one ``bench_speculative`` record, every record decoding the same inputs at batch 1 (the
128-input acceptance runs of ``make study NAME=speculative_b10_seed``). The measure is tokens per verify
at one ``k``, pooled over the inputs ((accepted + rounds) / rounds), the figure the lossless
mode's speed rests on, and it is deterministic: timing does not enter.

The interval is the framework's two-level paired bootstrap
(:mod:`skipdecode.evaluation.metrics.bootstrap`): each draw picks the inputs with replacement
(shared by every model, as they decoded the same ones) and the seeds with replacement, seed
``s`` of one side paired with seed ``s`` of the other (the same seed orders the same training
data), and takes the mean over the drawn seeds of the two sides' pooled difference on the drawn
inputs. It covers what a training seed does as well as which inputs were drawn. Beside it, each
seed's own difference and the t-interval over seeds (the seeds' spread alone). With two seeds a
side the seed level has little to draw from; the record says how many.

    python -m studies.draft_seeds \\
        --first results/bench/speculative-b10-acceptance-128-b10{,_seed-2,_seed-3}.json \\
        --second results/bench/speculative-b10-acceptance-128-b10_warmup-5{,-seed-2,-seed-3}.json \\
        --names "bottom 1 + top 9" "bottom 5 + top 5" --out results/bench \\
        --name speculative-b10-shape-seeds
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from skipdecode.evaluation.metrics.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    percentile_interval,
)
from skipdecode.experiments.benchmarks.bench_tables import write_bench
from skipdecode.experiments.sweeps.seeds import mean_ci95

from .speculative_budgets import (
    BudgetError,
    check_shared_settings,
    load_budget_run,
    pooled_measures,
    prompt_arrays,
)

__all__ = ["compare_over_seeds", "seeds_table", "main"]


def _per_input(run: dict[str, Any], k: int) -> dict[str, np.ndarray]:
    """Per input at batch 1: :func:`~.speculative_budgets.prompt_arrays` of ``k``'s variant."""
    cells = [c for c in run["cells"] if c["batch_size"] == 1]
    if not cells or f"speculative-k{k}" not in cells[0]["variants"]:
        raise BudgetError(
            f"{run['path']}: no batch-1 speculative-k{k}; allowed: records that ran it"
        )
    return prompt_arrays(cells[0], k)


def compare_over_seeds(
    first: list[dict[str, Any]],
    second: list[dict[str, Any]],
    k: int = 2,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, Any]:
    """``first`` minus ``second`` in tokens per verify at ``k``: each seed's difference (the
    runs paired by position), the mean over seeds with the two-level bootstrap interval and the
    t-interval over seeds."""
    if len(first) != len(second) or len(first) < 2:
        raise BudgetError(
            f"{len(first)} and {len(second)} runs; allowed: the same number of seeds on each "
            "side, at least 2, given in the same seed order"
        )
    if resamples < 1:
        raise BudgetError(f"resamples={resamples}; allowed: >= 1")
    check_shared_settings(first + second, ignore=("batch_sizes",))  # only batch 1 is read
    a = [_per_input(r, k) for r in first]
    b = [_per_input(r, k) for r in second]
    n = len(a[0]["tokens"])
    if any(len(x["tokens"]) != n for x in a + b):
        counts = sorted({len(x["tokens"]) for x in a + b})
        raise BudgetError(f"runs hold {counts} inputs; allowed: one")
    S = len(a)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rows = rng.integers(0, n, size=(resamples, n))
    picked = rng.integers(0, S, size=(resamples, S))
    weights = np.stack([np.bincount(p, minlength=S) for p in picked]) / S  # (resamples, S)

    def pooled(x: dict[str, np.ndarray], draw: np.ndarray) -> np.ndarray:
        return pooled_measures(x, draw)["tokens_per_verify"]

    everything = np.arange(n)[None]
    whole = {"first": [float(pooled(x, everything)[0]) for x in a]}
    whole["second"] = [float(pooled(y, everything)[0]) for y in b]
    per_seed = [x - y for x, y in zip(whole["first"], whole["second"])]
    drawn = np.stack([pooled(x, rows) - pooled(y, rows) for x, y in zip(a, b)], 1)
    mean, low, high = mean_ci95(per_seed)
    return {
        "k": k,
        "seeds": S,
        "inputs": n,
        "first": [r["path"] for r in first],
        "second": [r["path"] for r in second],
        "tokens_per_verify": whole,
        "per_seed_difference": per_seed,
        "difference": percentile_interval(float(np.mean(per_seed)), (drawn * weights).sum(1)),
        "t_interval_over_seeds": {"delta": mean, "ci95_low": low, "ci95_high": high},
        "resamples": resamples,
        "interval": "95% two-level paired bootstrap: inputs (shared) and training seeds (seed s "
        "of one side with seed s of the other) drawn with replacement",
    }


def seeds_table(result: dict[str, Any], names: tuple[str, str]) -> str:
    first, second = names
    t = result["tokens_per_verify"]
    out = [
        f"| seed | {first} | {second} | difference |",
        "|---|---|---|---|",
    ]
    for s, (x, y, d) in enumerate(zip(t["first"], t["second"], result["per_seed_difference"])):
        out.append(f"| {s + 1} | {x:.3f} | {y:.3f} | {d:+.3f} |")
    d, ti = result["difference"], result["t_interval_over_seeds"]
    out += [
        f"| mean | {np.mean(t['first']):.3f} | {np.mean(t['second']):.3f} | {d['delta']:+.3f} |",
        "",
        f"Tokens per verify at k = {result['k']}, batch 1, {result['inputs']} inputs, "
        f"{result['seeds']} training seeds a side. {first} minus {second}: {d['delta']:+.3f} "
        f"[{d['ci95_low']:+.3f}, {d['ci95_high']:+.3f}] ({result['interval']}; "
        f"{result['resamples']} draws); t-interval over the seeds' own differences "
        f"[{ti['ci95_low']:+.3f}, {ti['ci95_high']:+.3f}]. Seed rows are the runs in the order "
        "given.",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--first", nargs="+", type=Path, required=True, help="one draft, a record a seed"
    )
    p.add_argument("--second", nargs="+", type=Path, required=True, help="the other, same order")
    p.add_argument("--names", nargs=2, default=("first", "second"), help="the two drafts' names")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES)
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--name", default="draft-seeds")
    args = p.parse_args(argv)
    try:
        result = compare_over_seeds(
            [load_budget_run(r, f"first-{i}") for i, r in enumerate(args.first)],
            [load_budget_run(r, f"second-{i}") for i, r in enumerate(args.second)],
            args.k,
            args.resamples,
        )
    except BudgetError as err:
        p.error(str(err))
    result["names"] = list(args.names)
    write_bench(args.out, args.name, result, seeds_table(result, tuple(args.names)))


if __name__ == "__main__":
    main()
