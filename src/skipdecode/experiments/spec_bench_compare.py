"""Two Spec-Bench runs of one method compared question by question (a base model and its
fine-tune, say): mean accepted tokens per step and speedup over each run's own plain decoding,
with a 95% interval for the difference from a paired bootstrap over questions, and how many
plain turns the two models answer alike (a fine-tune changes the answers the mode reproduces).

Both measures are computed as ``spec_bench`` computes them: accepted tokens pooled over every
decoding step of the drawn questions, speedup the mean tokens/s of the method over the mean
tokens/s of plain on the same questions. A run folder holds one trained model, so the interval
covers the sampling of questions only, not training seeds; it is stated in the output.

    python -m skipdecode.experiments.spec_bench_compare results/bench/spec-bench-b8-base \\
        results/bench/spec-bench-b8-finetuned --method speculative-k2 \\
        --out results/bench --name spec-bench-b8-compare
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..evaluation.metrics.bootstrap import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
from .bench_tables import write_bench
from .spec_bench import TASKS, task_of

__all__ = ["SpecBenchCompareError", "compare_runs", "compare_table", "load_run", "main"]


class SpecBenchCompareError(ValueError):
    """Two runs that cannot be compared, or a method a run does not hold."""


def load_run(folder: Path, method: str) -> dict[str, list[dict[str, Any]]]:
    """``{"plain": answers, method: answers}`` of a ``spec_bench`` output folder."""
    held = sorted(p.stem for p in Path(folder).glob("*.jsonl"))
    out = {}
    for name in ("plain", method):
        path = Path(folder) / f"{name}.jsonl"
        if not path.is_file():
            raise SpecBenchCompareError(
                f"--method: {folder} holds no {name}.jsonl; methods there: {held or 'none'}"
            )
        out[name] = [json.loads(line) for line in path.read_text().splitlines() if line]
    return out


def _per_question(run: dict[str, list[dict[str, Any]]], method: str, ids: list[int]) -> dict:
    """Per question (in ``ids`` order): accepted tokens, decoding steps, tokens/s of the method
    and of plain."""
    by_id = {name: {a["question_id"]: a["choices"][0] for a in rows} for name, rows in run.items()}

    def tps(choice: dict[str, Any]) -> float:
        return sum(choice["new_tokens"]) / sum(choice["wall_time"])

    return {
        "accepted": np.array([sum(by_id[method][q]["accept_lengths"]) for q in ids], float),
        "steps": np.array([len(by_id[method][q]["accept_lengths"]) for q in ids], float),
        "tps": np.array([tps(by_id[method][q]) for q in ids]),
        "plain_tps": np.array([tps(by_id["plain"][q]) for q in ids]),
    }


def _measures(q: dict[str, np.ndarray], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean accepted tokens per step and speedup over plain for each row of ``idx``."""
    accepted = q["accepted"][idx].sum(-1) / q["steps"][idx].sum(-1)
    speedup = q["tps"][idx].mean(-1) / q["plain_tps"][idx].mean(-1)
    return accepted, speedup


def compare_runs(
    baseline: dict[str, list[dict[str, Any]]],
    system: dict[str, list[dict[str, Any]]],
    method: str,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """Overall measures of both runs, the difference (system - baseline) with its interval,
    per-task measures, and the plain turns both answer alike."""
    if resamples < 1:
        raise SpecBenchCompareError(f"--resamples: {resamples}; allowed: an integer >= 1")
    ids = [a["question_id"] for a in baseline[method]]
    other = [a["question_id"] for a in system[method]]
    if sorted(ids) != sorted(other):
        raise SpecBenchCompareError(
            f"the runs decoded different questions ({len(ids)} and {len(other)}, "
            f"{len(set(ids) ^ set(other))} not in both); compare runs of the same --per-task"
        )
    category = {a["question_id"]: a["category"] for a in baseline[method]}
    qb, qs = _per_question(baseline, method, ids), _per_question(system, method, ids)
    every = np.arange(len(ids))
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(resamples, len(ids)))
    overall = {}
    for k, name in enumerate(("mean_accepted_tokens", "speedup")):
        base, mine = _measures(qb, every)[k], _measures(qs, every)[k]
        diffs = _measures(qs, draws)[k] - _measures(qb, draws)[k]
        low, high = np.percentile(diffs, [2.5, 97.5])
        overall[name] = {
            "baseline": float(base), "system": float(mine), "delta": float(mine - base),
            "ci95_low": float(low), "ci95_high": float(high),
        }  # fmt: skip
    tasks = []
    for task in TASKS:
        rows = np.array([i for i, q in enumerate(ids) if task_of(category[q]) == task])
        if rows.size:
            (ab, sb), (a_s, ss) = _measures(qb, rows), _measures(qs, rows)
            tasks.append({
                "task": task, "questions": int(rows.size),
                "baseline": {"mean_accepted_tokens": float(ab), "speedup": float(sb)},
                "system": {"mean_accepted_tokens": float(a_s), "speedup": float(ss)},
            })  # fmt: skip
    plain_b = {a["question_id"]: a["choices"][0]["turns"] for a in baseline["plain"]}
    plain_s = {a["question_id"]: a["choices"][0]["turns"] for a in system["plain"]}
    pairs = [(x, y) for q in ids for x, y in zip(plain_b[q], plain_s[q], strict=True)]
    return {
        "method": method,
        "questions": len(ids),
        "overall": overall,
        "tasks": tasks,
        "plain_turns_alike": sum(x == y for x, y in pairs),
        "plain_turns": len(pairs),
        "settings": {
            "resamples": resamples,
            "seed": seed,
            "interval": "2.5th-97.5th percentile of system - baseline over questions drawn "
            "with replacement; one trained model per run, so training seeds are not sampled",
        },
    }


def compare_table(result: dict[str, Any], labels: tuple[str, str]) -> str:
    base, mine = labels
    o = result["overall"]
    lines = [
        f"{result['method']}, {result['questions']} questions: {mine} against {base} "
        "(difference with a 95% paired bootstrap interval over questions; one trained model "
        "each, training seeds not sampled)\n",
        f"| measure | {base} | {mine} | difference [95% interval] |",
        "|---|---|---|---|",
    ]
    for name, label, fmt in (
        ("mean_accepted_tokens", "mean accepted tokens per step", "{:.2f}"),
        ("speedup", "speedup over its own plain decoding", "{:.2f}x"),
    ):
        m = o[name]
        lines.append(
            f"| {label} | {fmt.format(m['baseline'])} | {fmt.format(m['system'])} "
            f"| {m['delta']:+.2f} [{m['ci95_low']:+.2f}, {m['ci95_high']:+.2f}] |"
        )
    lines += [
        "",
        f"| task | questions | accepted, {base} | accepted, {mine} | speedup, {base} "
        f"| speedup, {mine} |",
        "|---|---|---|---|---|---|",
    ]
    for t in result["tasks"]:
        b, s = t["baseline"], t["system"]
        lines.append(
            f"| {t['task']} | {t['questions']} | {b['mean_accepted_tokens']:.2f} "
            f"| {s['mean_accepted_tokens']:.2f} | {b['speedup']:.2f}x | {s['speedup']:.2f}x |"
        )
    lines.append(
        f"\nPlain turns answered alike by both models: {result['plain_turns_alike']} of "
        f"{result['plain_turns']}.\n"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("baseline", type=Path, help="spec_bench output folder of the baseline run")
    p.add_argument("system", type=Path, help="spec_bench output folder of the compared run")
    p.add_argument("--method", required=True, help="method both runs hold, e.g. speculative-k2")
    p.add_argument("--labels", nargs=2, default=None, help="names of the two runs in the table")
    p.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES)
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--name", default="spec-bench-compare")
    args = p.parse_args(argv)
    labels = tuple(args.labels or (args.baseline.name, args.system.name))
    try:
        result = compare_runs(
            load_run(args.baseline, args.method), load_run(args.system, args.method),
            args.method, args.resamples,
        )  # fmt: skip
    except SpecBenchCompareError as err:
        p.error(str(err))
    payload = {"args": vars(args), "baseline": str(args.baseline), "system": str(args.system)}
    write_bench(args.out, args.name, {**payload, **result}, compare_table(result, labels))


if __name__ == "__main__":
    main()
