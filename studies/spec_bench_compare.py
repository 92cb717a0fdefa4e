"""Two Spec-Bench runs of one method compared question by question (a base model and its
fine-tune, say): mean accepted tokens per step and speedup over each run's own plain decoding,
overall and per task, with a 95% interval for the difference from a paired bootstrap over
questions drawn within each task (a run fixes how many questions each task has), and how many
plain turns the two models answer alike.

Both measures are computed as ``spec_bench`` computes them: accepted tokens pooled over every
decoding step of the drawn questions; speedup, the mean tokens/s of the method over the mean
tokens/s of plain on the same questions. A run folder holds one trained model timed once per
question, so the interval covers the sampling of questions only, neither training seeds nor
timing noise between the runs; the output says so. Where the two models answer differently, a
difference in acceptance mixes a better draft with text that is easier to draft.

The runs must have decoded the same questions with the same decoding settings (read from the
``<name>.json`` record beside each ``<name>/`` folder).

Given one run, the method is set against that run's own plain decoding instead: per task and
overall, its mean accepted tokens per step and speedup with 95% bootstrap intervals over the
task's questions (:func:`method_intervals`).

    python -m studies.spec_bench_compare results/bench/spec-bench-b8-base \\
        results/bench/spec-bench-b8-finetuned --method speculative-k2 \\
        --out results/bench --name spec-bench-b8-compare
    python -m studies.spec_bench_compare results/bench/spec-bench-480-b8-base \\
        --method speculative-k2 --out results/bench --name spec-bench-480-b8-base-intervals
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skipdecode.evaluation.metrics.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    percentile_interval,
)
from skipdecode.experiments.benchmarks.bench_tables import write_bench
from skipdecode.io import read_jsonl

from .spec_bench import TASKS, task_of, tokens_per_second

__all__ = [
    "SpecBenchCompareError", "compare_runs", "compare_table", "intervals_table", "load_run",
    "main", "method_intervals",
]  # fmt: skip

#: Decoding settings two compared runs must share (``spec_bench``'s arguments).
SHARED_SETTINGS = (
    "per_task", "new_tokens", "draft_speedup", "draft_budget", "draft_vocab",
    "draft_vocab_data", "compile", "dtype", "device",
)  # fmt: skip
MEASURES = ("mean_accepted_tokens", "speedup")
#: Fewest questions a task needs for its own interval in a comparison: a bootstrap over a
#: handful of questions understates the spread (three questions have ten distinct draws).
TASK_INTERVAL_MIN_QUESTIONS = 10


class SpecBenchCompareError(ValueError):
    """Two runs that cannot be compared, or a run folder that lacks what is compared."""


def load_run(folder: Path, method: str, role: str = "run") -> dict[str, Any]:
    """``{"plain": answers, method: answers, "settings": spec_bench's arguments}`` of the
    ``spec_bench`` output folder ``folder`` (``role`` names it in errors)."""
    folder = Path(folder)
    record = folder.parent / f"{folder.name}.json"
    if not record.is_file():
        raise SpecBenchCompareError(
            f"{role}: {folder} has no record {record.name} beside it; allowed: a spec_bench "
            "output folder (<out>/<name>/ with <out>/<name>.json)"
        )
    held = sorted(p.stem for p in folder.glob("*.jsonl"))
    run: dict[str, Any] = {"settings": json.loads(record.read_text()).get("args", {})}
    for name, setting in (("plain", role), (method, "--method")):
        path = folder / f"{name}.jsonl"
        if not path.is_file():
            raise SpecBenchCompareError(
                f"{setting}: {folder} holds no {name}.jsonl; methods there: {held or 'none'} "
                "(a spec_bench run always holds plain)"
            )
        run[name] = read_jsonl(path)
    return run


@dataclass
class QuestionStats:
    """One run's per-question figures, in a shared question order."""

    accepted: np.ndarray  # tokens the method's decoding steps produced
    steps: np.ndarray  # the method's decoding steps
    method_speed: np.ndarray  # tokens/s of the method
    plain_speed: np.ndarray  # tokens/s of plain decoding

    def measures(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Mean accepted tokens per step and speedup over plain of the questions in ``rows``
        (the last axis; one value per leading index)."""
        return {
            "mean_accepted_tokens": self.accepted[rows].sum(-1) / self.steps[rows].sum(-1),
            "speedup": self.method_speed[rows].mean(-1) / self.plain_speed[rows].mean(-1),
        }


def _question_stats(run: dict[str, Any], method: str, ids: list[int], role: str) -> QuestionStats:
    method_by_id = {a["question_id"]: a["choices"][0] for a in run[method]}
    plain_by_id = {a["question_id"]: a["choices"][0] for a in run["plain"]}
    missing = [q for q in ids if q not in plain_by_id]
    if missing:
        raise SpecBenchCompareError(
            f"{role}: plain.jsonl lacks questions {missing[:5]} that {method}.jsonl holds; "
            "allowed: a complete spec_bench run"
        )
    steps = np.array([len(method_by_id[q]["accept_lengths"]) for q in ids], float)
    if not steps.all():
        raise SpecBenchCompareError(
            f"{role}: {method}.jsonl has questions with no decoding step "
            f"{[q for q, n in zip(ids, steps) if not n][:5]}; allowed: answered questions"
        )
    return QuestionStats(
        accepted=np.array([sum(method_by_id[q]["accept_lengths"]) for q in ids], float),
        steps=steps,
        method_speed=np.array([tokens_per_second(method_by_id[q]) for q in ids]),
        plain_speed=np.array([tokens_per_second(plain_by_id[q]) for q in ids]),
    )


def _check_comparable(baseline: dict[str, Any], system: dict[str, Any], method: str) -> list[int]:
    """The shared question ids, in the baseline's order; refuses runs that differ."""
    ids = [a["question_id"] for a in baseline[method]]
    other = {a["question_id"] for a in system[method]}
    if not ids:
        raise SpecBenchCompareError(f"--method: the baseline's {method}.jsonl holds no questions")
    if set(ids) != other or len(ids) != len(system[method]):
        raise SpecBenchCompareError(
            f"the runs decoded different questions: only the baseline holds "
            f"{sorted(set(ids) - other)[:5]}, only the system {sorted(other - set(ids))[:5]}; "
            "allowed: two runs of the same --per-task"
        )
    differ = {
        k: (baseline["settings"].get(k), system["settings"].get(k))
        for k in SHARED_SETTINGS
        if baseline["settings"].get(k) != system["settings"].get(k)
    }
    if differ:
        raise SpecBenchCompareError(
            f"the runs decoded with different settings {differ} (baseline, system); allowed: "
            f"runs that share {', '.join(SHARED_SETTINGS)}"
        )
    return ids


def _tasks(run: dict[str, Any], method: str, ids: list[int]) -> list[str]:
    """The Spec-Bench task of each question in ``ids``."""
    category = {a["question_id"]: a["category"] for a in run[method]}
    return [task_of(category[q]) for q in ids]


def _stratified_draws(
    tasks: list[str], resamples: int, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per task, in Spec-Bench's task order: its question rows and those rows drawn with
    replacement within the task (``resamples`` x the task's count); then ``"overall"``: every
    row and every task's draws joined, as a run fixes how many questions each task has."""
    rng = np.random.default_rng(seed)
    present = [t for t in TASKS if t in tasks] + sorted(set(tasks) - set(TASKS))
    out = {}
    for task in present:
        rows = np.flatnonzero(np.array(tasks) == task)
        out[task] = rows, rows[rng.integers(0, rows.size, size=(resamples, rows.size))]
    out["overall"] = np.arange(len(tasks)), np.concatenate([d for _, d in out.values()], axis=1)
    return out


def _difference(
    base: QuestionStats, mine: QuestionStats, rows: np.ndarray, draws: np.ndarray | None
) -> dict[str, Any]:
    """Both runs' measures over ``rows`` and system - baseline, with the 2.5th/97.5th
    percentiles over ``draws`` (the same drawn questions for both runs: paired) where given."""
    observed_base, observed_mine = base.measures(rows), mine.measures(rows)
    drawn = None if draws is None else (base.measures(draws), mine.measures(draws))
    out = {}
    for name in MEASURES:
        delta = float(observed_mine[name] - observed_base[name])
        if drawn is None:
            interval = {"delta": delta, "ci95_low": None, "ci95_high": None}
        else:
            interval = percentile_interval(delta, drawn[1][name] - drawn[0][name])
        out[name] = {
            "baseline": float(observed_base[name]),
            "system": float(observed_mine[name]),
            **interval,
        }
    return out


def _plain_turns_alike(baseline: dict, system: dict, ids: list[int]) -> tuple[int, int]:
    """Plain turns both runs answered with the same text, and the turns compared."""
    turns_base = {a["question_id"]: a["choices"][0]["turns"] for a in baseline["plain"]}
    turns_mine = {a["question_id"]: a["choices"][0]["turns"] for a in system["plain"]}
    pairs = [(x, y) for q in ids for x, y in zip(turns_base[q], turns_mine[q])]
    return sum(x == y for x, y in pairs), len(pairs)


def compare_runs(
    baseline: dict[str, Any],
    system: dict[str, Any],
    method: str,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """Overall measures of both runs with the difference (system - baseline) and its interval,
    per-task measures, whether every speculative turn equalled its plain turn, and the plain
    turns the two models answer alike."""
    if resamples < 1:
        raise SpecBenchCompareError(f"--resamples: {resamples}; allowed: an integer >= 1")
    ids = _check_comparable(baseline, system, method)
    base = _question_stats(baseline, method, ids, "baseline")
    mine = _question_stats(system, method, ids, "system")
    draws = _stratified_draws(_tasks(baseline, method, ids), resamples, seed)
    overall = draws.pop("overall")
    by_task = []
    for task, (rows, drawn_rows) in draws.items():
        enough = rows.size >= TASK_INTERVAL_MIN_QUESTIONS
        measured = _difference(base, mine, rows, drawn_rows if enough else None)
        by_task.append({"task": task, "questions": int(rows.size)} | measured)
    alike, turns = _plain_turns_alike(baseline, system, ids)
    return {
        "method": method,
        "questions": len(ids),
        "overall": _difference(base, mine, *overall),
        "tasks": by_task,
        "identical_to_plain": all(
            a.get("identical_to_plain", False) for run in (baseline, system) for a in run[method]
        ),
        "plain_turns_alike": alike,
        "plain_turns": turns,
        "settings": {
            "resamples": resamples,
            "seed": seed,
            "interval": "2.5th-97.5th percentile of system - baseline over questions drawn "
            "with replacement within each task (overall: every task's draws joined; a task's "
            f"own interval only with {TASK_INTERVAL_MIN_QUESTIONS} or more questions); one "
            "trained model and one timing per question in each run, so neither training seeds "
            "nor timing noise are sampled",
        },
    }


def _signed(m: dict[str, Any]) -> str:
    """``+0.123 [+0.045, +0.201]``, or the difference alone where it has no interval."""
    if m["ci95_low"] is None:
        return f"{m['delta']:+.3f}"
    return f"{m['delta']:+.3f} [{m['ci95_low']:+.3f}, {m['ci95_high']:+.3f}]"


def compare_table(result: dict[str, Any], labels: tuple[str, str]) -> str:
    """Markdown: the overall and per-task differences with their intervals, plain agreement."""
    base, mine = labels
    lines = [
        f"{result['method']}, {result['questions']} questions: {mine} against {base} "
        "(difference with a 95% paired bootstrap interval over questions drawn within each task; "
        "one trained model and one timing per question each, so neither training seeds nor "
        "timing noise are sampled)\n",
        f"| measure | {base} | {mine} | difference [95% interval] |",
        "|---|---|---|---|",
    ]
    for name, label, fmt in (
        ("mean_accepted_tokens", "mean accepted tokens per step", "{:.3f}"),
        ("speedup", "speedup over its own plain decoding", "{:.3f}x"),
    ):
        m = result["overall"][name]
        lines.append(
            f"| {label} | {fmt.format(m['baseline'])} | {fmt.format(m['system'])} | {_signed(m)} |"
        )
    lines += [
        "",
        f"| task | questions | accepted, {base} | accepted, {mine} | accepted, difference "
        f"| speedup, {base} | speedup, {mine} | speedup, difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in result["tasks"]:
        a, v = t["mean_accepted_tokens"], t["speedup"]
        lines.append(
            f"| {t['task']} | {t['questions']} | {a['baseline']:.3f} | {a['system']:.3f} "
            f"| {_signed(a)} | {v['baseline']:.3f}x | {v['system']:.3f}x | {_signed(v)} |"
        )
    lines.append(
        f"\nA task's difference has an interval only with {TASK_INTERVAL_MIN_QUESTIONS} or more "
        f"questions. Every {result['method']} turn identical to its own model's plain turn: "
        f"{result['identical_to_plain']}. Plain turns answered alike by both models: "
        f"{result['plain_turns_alike']} of {result['plain_turns']}.\n"
    )
    return "\n".join(lines)


def method_intervals(
    run: dict[str, Any],
    method: str,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """One run's ``method`` against its own plain decoding: per task and overall, the mean
    accepted tokens per step and the speedup (``value``), each with the 2.5th/97.5th
    percentiles over the task's questions drawn with replacement (the same draws for both
    measures; overall, each task's draws joined, as the run fixes how many each task has)."""
    if resamples < 1:
        raise SpecBenchCompareError(f"--resamples: {resamples}; allowed: an integer >= 1")
    ids = [a["question_id"] for a in run[method]]
    if not ids:
        raise SpecBenchCompareError(f"--method: the run's {method}.jsonl holds no questions")
    stats = _question_stats(run, method, ids, "run")
    out = []
    draws = _stratified_draws(_tasks(run, method, ids), resamples, seed)
    for task, (rows, drawn_rows) in draws.items():
        observed, drawn = stats.measures(rows), stats.measures(drawn_rows)
        measured = {}
        for name in MEASURES:
            interval = percentile_interval(float(observed[name]), drawn[name])
            measured[name] = {"value": interval.pop("delta"), **interval}
        out.append({"task": task, "questions": int(rows.size)} | measured)
    return {
        "method": method,
        "questions": len(ids),
        "tasks": out,
        "identical_to_plain": all(a.get("identical_to_plain", False) for a in run[method]),
        "settings": {
            "resamples": resamples,
            "seed": seed,
            "interval": "2.5th-97.5th percentile over the task's questions drawn with "
            "replacement (overall: within each task, joined); one timing per question, so "
            "timing noise between runs is not sampled",
        },
    }


def intervals_table(result: dict[str, Any]) -> str:
    """Markdown: per task, the method's measures against plain with their intervals."""
    lines = [
        f"{result['method']} against plain decoding of the same run, {result['questions']} "
        "questions (95% bootstrap intervals over each task's questions; one timing per question)\n",
        "| task | questions | mean accepted tokens per step [95% interval] "
        "| speedup over plain [95% interval] |",
        "|---|---|---|---|",
    ]
    for t in result["tasks"]:
        a, v = t["mean_accepted_tokens"], t["speedup"]
        lines.append(
            f"| {t['task']} | {t['questions']} | {a['value']:.3f} [{a['ci95_low']:.3f}, "
            f"{a['ci95_high']:.3f}] | {v['value']:.3f}x [{v['ci95_low']:.3f}, {v['ci95_high']:.3f}] |"
        )
    lines.append(
        f"\nEvery {result['method']} turn identical to the plain turn: "
        f"{result['identical_to_plain']}.\n"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("baseline", type=Path, help="spec_bench output folder of the baseline run")
    p.add_argument(
        "system", type=Path, nargs="?", default=None,
        help="spec_bench output folder of the compared run (left out: the baseline run's "
        "method against its own plain decoding, per task with intervals)",
    )  # fmt: skip
    p.add_argument("--method", required=True, help="method both runs hold, e.g. speculative-k2")
    p.add_argument("--labels", nargs=2, default=None, help="names of the two runs in the table")
    p.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES)
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--name", default="spec-bench-compare")
    args = p.parse_args(argv)
    if args.system is None:
        if args.labels:
            p.error(f"--labels: {args.labels} names two runs; allowed only with a second run")
        try:
            result = method_intervals(
                load_run(args.baseline, args.method), args.method, args.resamples
            )
        except SpecBenchCompareError as err:
            p.error(str(err))
        payload = {"args": vars(args), "run": str(args.baseline)}
        write_bench(args.out, args.name, {**payload, **result}, intervals_table(result))
        return
    labels = tuple(args.labels or (args.baseline.name, args.system.name))
    try:
        baseline = load_run(args.baseline, args.method, "baseline")
        system = load_run(args.system, args.method, "system")
        result = compare_runs(baseline, system, args.method, args.resamples)
    except SpecBenchCompareError as err:
        p.error(str(err))
    payload = {"args": vars(args), "baseline": str(args.baseline), "system": str(args.system)}
    write_bench(args.out, args.name, {**payload, **result}, compare_table(result, labels))


if __name__ == "__main__":
    main()
