"""The lossless mode's draft chosen by measurement: models trained each with its own constant
b-layer draft (``schedule=speculative_b{b}``, or a variant such as its distilled draft,
``speculative_b10_distill``), each benchmarked with ``bench_speculative --draft-budget b`` on
the same inputs, put side by side. Each run is a *draft*: its budget, or the name ``--labels``
gives it (runs of one budget trained differently need names).

Per batch size, for every budget b and every k: acceptance, tokens per verify pass, the round's
cost split in full decode steps (a draft pass, the verify pass), the speedup that cost model
predicts, ``tokens per round / (drafts x draft cost + verify + acceptance + bookkeeping)`` (the
issue's objective, measured), and the measured speedup over the same model's own full decoding.
The chosen setting per batch size is the highest measured speedup. Beside them, what the same
cost split allows: the steps a round must advance for a goal speedup (``--goal``, default 1.5x:
goal x the round's cost; at batch 1 a round advances its tokens per verify) and the ceiling,
the speedup were every drafted token accepted (``k + 1`` tokens for ``k`` draft passes, the
verify, acceptance and bookkeeping at their measured cost). So each row says whether its
acceptance or its costs stand between it and the goal.

At batch 1 every batch is one prompt, so the runs can be compared prompt by prompt, each with a
95% paired bootstrap interval over prompts (the same draws for both runs): the chosen setting
against each other draft's tokens per verify at the chosen k (they grow with k, so only the
same k compares), and against each other draft's speedup at that draft's own best k. Each
draft is one trained model (one seed) timed once per repeat, so the interval samples prompts,
neither training seeds nor timing noise between runs, and it is computed on the data that chose
the winner. Each draft's model is its own fine-tune, so its output (its own full model's, token
for token) differs between drafts and so does the text being drafted. A prompt's time is its
median over the repeats, so with more than two repeats the pooled speedup of the interval can
differ slightly from the table's (the median of whole-workload times).

    python -m studies.speculative_budgets \\
        results/bench/speculative-budgets-b{6,8,10,12}.json \\
        --out results/bench --name speculative-budgets
    python -m studies.speculative_budgets \\
        results/bench/speculative-distill-b10{,_distill}.json --labels b10 b10_distill \\
        --out results/bench --name speculative-distill
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from skipdecode.evaluation.metrics.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    percentile_interval,
)
from skipdecode.experiments.benchmarks.bench_tables import cell_text, write_bench

__all__ = ["BudgetError", "choose_budgets", "budgets_table", "load_budget_run", "main"]

#: bench_speculative arguments every compared run must share.
SHARED_SETTINGS = (
    "workload", "prompts", "batch_sizes", "ks", "new_tokens", "draft_vocab", "draft_speedup",
    "auto_off", "repeats", "compile", "dtype", "device",
)  # fmt: skip


#: The speedup whose needed steps a round the table reports by default.
GOAL = 1.5


class BudgetError(ValueError):
    """Runs that cannot be compared, or a record that is not a budget run."""


def load_budget_run(path: Path, label: str | None = None) -> dict[str, Any]:
    """A ``bench_speculative`` record run with ``--draft-budget b``: ``{"draft": label (default:
    b), "budget": b, "args", "cells", "machine"}``."""
    path = Path(path)
    allowed = "allowed: a bench_speculative <name>.json with per-batch figures"
    if not path.is_file():
        raise BudgetError(f"{path}: no such record; {allowed}")
    try:
        record = json.loads(path.read_text())
        args, cells = record["args"], record["cells"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise BudgetError(f"{path}: not a benchmark record ({err!r}); {allowed}") from None
    budget = args.get("draft_budget")
    if not str(budget).isdigit():
        raise BudgetError(
            f"{path}: draft_budget={budget!r}; allowed: a run with --draft-budget b (a constant "
            "b-layer draft, on a model trained with it)"
        )
    for cell in cells:
        for name, variant in cell["variants"].items():
            if "per_batch" not in variant:
                raise BudgetError(
                    f"{path}: batch {cell['batch_size']}, {name} has no per_batch figures (a "
                    f"record from before they were kept); {allowed}: rerun bench_speculative"
                )
    machine = (record.get("provenance") or {}).get("device", {}).get("cpu")
    return {
        "path": str(path), "draft": label or str(budget), "budget": int(budget), "args": args,
        "cells": cells, "machine": (machine, [c.get("threads") for c in cells]),
    }  # fmt: skip


def _check_comparable(runs: list[dict[str, Any]]) -> None:
    if len(runs) < 2:
        raise BudgetError(f"{len(runs)} run(s) given; allowed: two or more drafts to compare")
    drafts = [r["draft"] for r in runs]
    if len(set(drafts)) != len(drafts):
        raise BudgetError(
            f"drafts {drafts}; allowed: each once (name runs of one budget apart with --labels)"
        )
    first = runs[0]
    for run in runs[1:]:
        if run["machine"] != first["machine"]:
            raise BudgetError(
                f"{run['path']}: machine (cpu, threads per batch size) {run['machine']} where "
                f"{first['path']} has {first['machine']}; allowed: runs timed on one machine"
            )
    check_shared_settings(runs)


def check_shared_settings(runs: list[dict[str, Any]], ignore: tuple[str, ...] = ()) -> None:
    """Every run's :data:`SHARED_SETTINGS` (but ``ignore``) as the first run's."""
    first = runs[0]
    for run in runs[1:]:
        for name in SHARED_SETTINGS:
            mine, theirs = first["args"].get(name), run["args"].get(name)
            if name not in ignore and mine != theirs:
                raise BudgetError(
                    f"{run['path']}: {name}={theirs!r} where {first['path']} has {mine!r}; "
                    "allowed: runs of one benchmark setting that differ only in the draft"
                )


def _round_limits(cost: dict[str, Any], k: int, goal: float) -> dict[str, float | None]:
    """From a round's cost split (full steps): the steps a round must advance for ``goal``, and
    the speedup at full acceptance (``k + 1`` steps a round for ``k`` draft passes)."""
    if not cost.get("predicted_speedup") or cost.get("draft_pass") is None:
        return {"steps_for_goal": None, "ceiling": None}
    round_cost = cost["steps_per_round"] / cost["predicted_speedup"]
    full_round = (
        k * cost["draft_pass"]
        + cost["verify_per_round"]
        + cost["accept_per_round"]
        + cost["bookkeeping_per_round"]
    )
    return {"steps_for_goal": goal * round_cost, "ceiling": (k + 1) / full_round}


def _row(run: dict[str, Any], k: int, cell: dict[str, Any], goal: float) -> dict[str, Any]:
    """One (draft, k) of one batch size's cell: its figures, what its cost split allows, and
    its own full step's time."""
    variant = cell["variants"][f"speculative-k{k}"]
    cost = variant.get("cost") or {}
    return {
        "draft": run["draft"],
        "budget": run["budget"],
        "k": k,
        "acceptance": variant.get("acceptance_rate"),
        "tokens_per_verify": variant.get("tokens_per_verify"),
        "draft_pass": cost.get("draft_pass"),
        "verify": cost.get("verify_per_round"),
        "predicted": cost.get("predicted_speedup"),
        "steps_per_round": cost.get("steps_per_round"),
        **_round_limits(cost, k, goal),
        "measured": variant["speedup_vs_full"],
        "exact": variant.get("identical_to_full"),
        "full_ms_per_step": cell["variants"]["skipdecode-full"]["ms_per_step_of_full"],
    }


def _ks(cell: dict[str, Any]) -> list[int]:
    """The draft lengths a cell ran (its ``speculative-k<k>`` variants)."""
    return sorted(
        int(m[1]) for n in cell["variants"] if (m := re.fullmatch(r"speculative-k(\d+)", n))
    )


def prompt_arrays(cell: dict[str, Any], k: int) -> dict[str, np.ndarray]:
    """Per batch of ``cell`` (a prompt at batch 1): the full and ``k``'s decode seconds, and
    ``k``'s tokens (accepted + rounds) and verify rounds."""
    full = cell["variants"]["skipdecode-full"]["per_batch"]
    spec = cell["variants"][f"speculative-k{k}"]["per_batch"]
    return {
        "full_s": np.array([b["decode_s"] for b in full]),
        "spec_s": np.array([b["decode_s"] for b in spec]),
        "tokens": np.array([b["accepted"] + b["row_rounds"] for b in spec]),
        "rounds": np.array([b["row_rounds"] for b in spec]),
    }


def pooled_measures(a: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """Pooled over the prompts of each resample (``rows``: draws x prompts)."""
    return {
        "tokens_per_verify": a["tokens"][rows].sum(-1) / a["rounds"][rows].sum(-1),
        "speedup": a["full_s"][rows].sum(-1) / a["spec_s"][rows].sum(-1),
    }


def _interval(
    mine: dict[str, np.ndarray], other: dict[str, np.ndarray], name: str, draws: np.ndarray
) -> dict[str, float]:
    everything = np.arange(draws.shape[1])[None]
    point = pooled_measures(mine, everything)[name][0] - pooled_measures(other, everything)[name][0]
    drawn = pooled_measures(mine, draws)[name] - pooled_measures(other, draws)[name]
    return percentile_interval(float(point), drawn)


def _against(
    cells: dict[str, dict[str, Any]], chosen: dict[str, Any], best_k: dict[str, int], resamples: int
) -> dict[str, Any]:
    """Batch 1: the chosen (draft, k) against each other draft, paired over prompts."""
    mine = prompt_arrays(cells[chosen["draft"]], chosen["k"])
    n = len(mine["tokens"])
    draws = np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(resamples, n))
    out = {}
    for draft, cell in cells.items():
        if draft == chosen["draft"]:
            continue
        same_k, own_best = prompt_arrays(cell, chosen["k"]), prompt_arrays(cell, best_k[draft])
        if len(same_k["tokens"]) != n:
            raise BudgetError(
                f"batch 1: draft {draft} holds {len(same_k['tokens'])} prompts, draft "
                f"{chosen['draft']} {n}; allowed: the same prompts"
            )
        out[draft] = {
            "tokens_per_verify": _interval(mine, same_k, "tokens_per_verify", draws),
            "speedup": {**_interval(mine, own_best, "speedup", draws), "k": best_k[draft]},
        }
    return out


def choose_budgets(
    runs: list[dict[str, Any]], resamples: int = BOOTSTRAP_RESAMPLES, goal: float = GOAL
) -> dict[str, Any]:
    """Per batch size every (budget, k) with what its cost split allows for ``goal``, the chosen
    one (highest measured speedup), and at batch 1 the chosen setting against each other budget
    with paired bootstrap intervals: tokens per verify at the chosen k, speedup at that budget's
    own best k."""
    if resamples < 1:
        raise BudgetError(f"resamples={resamples}; allowed: >= 1")
    if not goal > 1:
        raise BudgetError(f"goal={goal}; allowed: a speedup > 1")
    _check_comparable(runs)
    runs = sorted(runs, key=lambda r: (r["budget"], r["draft"]))
    batches = []
    for cells in zip(*(r["cells"] for r in runs), strict=True):
        size = cells[0]["batch_size"]
        rows = [
            _row(run, k, cell, goal)
            for run, cell in zip(runs, cells, strict=True)
            for k in _ks(cell)
        ]
        best = max(rows, key=lambda r: r["measured"])
        best_predicted = max(rows, key=lambda r: r["predicted"] or 0.0)
        batch: dict[str, Any] = {
            "batch_size": size,
            "rows": rows,
            "chosen": {key: best[key] for key in ("draft", "budget", "k")},
            "chosen_by_cost_model": {key: best_predicted[key] for key in ("draft", "budget", "k")},
        }
        if size == 1:
            by_draft = {r["draft"]: c for r, c in zip(runs, cells, strict=True)}
            best_k = {
                d: max((r for r in rows if r["draft"] == d), key=lambda r: r["measured"])["k"]
                for d in by_draft
            }
            batch["against_chosen"] = _against(by_draft, batch["chosen"], best_k, resamples)
            batch["prompts"] = len(
                by_draft[best["draft"]]["variants"]["skipdecode-full"]["per_batch"]
            )
        batches.append(batch)
    return {
        "runs": [r["path"] for r in runs],
        "drafts": [r["draft"] for r in runs],
        "budgets": [r["budget"] for r in runs],
        "resamples": resamples,
        "goal": goal,
        "interval": "95% paired bootstrap over prompts (batch 1); one trained model per draft, "
        "so neither training seeds nor timing noise between runs are sampled, and computed on "
        "the data that chose the winner",
        "batches": batches,
    }


def budgets_table(result: dict[str, Any]) -> str:
    out = [
        "| batch | draft | k | acceptance | tokens/verify | draft pass | verify | predicted | "
        f"measured vs own full | steps a round: got / for {result['goal']:g}x | "
        "ceiling (all accepted) | own full, ms/step | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for batch in result["batches"]:
        chosen = batch["chosen"]
        for r in batch["rows"]:
            mark = " (chosen)" if (r["draft"], r["k"]) == (chosen["draft"], chosen["k"]) else ""
            out.append(
                f"| {batch['batch_size']} | {r['draft']} | {r['k']}{mark} | "
                f"{cell_text(r['acceptance'])} | {cell_text(r['tokens_per_verify'])} | "
                f"{cell_text(r['draft_pass'])} | {cell_text(r['verify'])} | "
                f"{cell_text(r['predicted'], '{:.2f}x')} | {cell_text(r['measured'], '{:.2f}x')} | "
                f"{cell_text(r['steps_per_round'])} / {cell_text(r['steps_for_goal'])} | "
                f"{cell_text(r['ceiling'], '{:.2f}x')} | "
                f"{cell_text(r['full_ms_per_step'])} | {r['exact']} |"
            )
    for batch in result["batches"]:
        if "against_chosen" not in batch:
            continue
        c = batch["chosen"]
        out += [
            "",
            f"Batch 1, {batch['prompts']} prompts: draft {c['draft']} (k = {c['k']}) against "
            f"each other draft, tokens per verify at k = {c['k']}, speedup at that draft's own "
            f"best k; {result['interval']}.",
            "",
            f"| against draft | tokens/verify difference at k = {c['k']} [95%] | "
            "speedup difference [95%] (its best k) |",
            "|---|---|---|",
        ]
        for b, iv in batch["against_chosen"].items():
            t, s = iv["tokens_per_verify"], iv["speedup"]
            out.append(
                f"| {b} | {t['delta']:+.3f} [{t['ci95_low']:+.3f}, {t['ci95_high']:+.3f}] | "
                f"{s['delta']:+.3f} [{s['ci95_low']:+.3f}, {s['ci95_high']:+.3f}] (k = {s['k']}) |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("records", nargs="+", type=Path, help="bench_speculative records, one a draft")
    p.add_argument(
        "--labels", nargs="+", help="a name for each record's draft (default: its budget)"
    )
    p.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES)
    p.add_argument(
        "--goal",
        type=float,
        default=GOAL,
        help=f"the speedup whose needed steps a round each row reports (default {GOAL})",
    )
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--name", default="speculative-budgets")
    args = p.parse_args(argv)
    labels = args.labels or [None] * len(args.records)
    if len(labels) != len(args.records):
        p.error(
            f"--labels gives {len(labels)} names for {len(args.records)} records; allowed: one "
            "name per record, or none"
        )
    try:
        runs = [load_budget_run(r, label) for r, label in zip(args.records, labels, strict=True)]
        result = choose_budgets(runs, args.resamples, args.goal)
    except BudgetError as err:
        p.error(str(err))
    write_bench(args.out, args.name, result, budgets_table(result))


if __name__ == "__main__":
    main()
