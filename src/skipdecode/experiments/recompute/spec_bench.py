"""Spec-Bench's pages recomputed from the answers their runs keep, question by question.

A **run** is ``bench/<name>.json`` beside ``bench/<name>/``, which holds ``plain.jsonl`` and one
answer file per method (Spec-Bench's format: per question ``choices[0]`` with ``new_tokens`` and
``wall_time`` per turn and ``accept_lengths``, the tokens each decoding step produced). Its page
prints, per method and task (MT-bench's eight categories are one task) and overall: the
questions; the new tokens of every turn; the mean accepted tokens, pooled over every decoding
step; tokens/s, the mean over questions of a question's new tokens over its wall time (every
turn); the speedup, that mean over plain's on the same questions; and whether every answer
equalled plain's.

A **comparison** (a record naming ``baseline`` and ``system`` runs) prints both runs' mean
accepted tokens and speedup, overall and per task, and system - baseline with the 2.5th and 97.5th
percentiles over questions drawn with replacement within each task (numpy's generator seeded as
the record says, each task's draws in Spec-Bench's task order, overall every task's draws
joined; the same draws for both runs; a task's own interval only with
:data:`TASK_INTERVAL_MIN_QUESTIONS` or more questions), and the plain turns both models answered
alike. A run's **intervals** (a record naming one ``run``) print each task's and the overall
measures of the method against plain with the same draws' percentiles.

Every printed number is compared at its printed digits with this module's arithmetic on the
answers.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...io import read_jsonl
from ..benchmarks.spec_bench_tasks import TASKS, task_of
from ..sweeps.excerpts import page_tables
from .findings import Findings, check_rows

__all__ = ["TASK_INTERVAL_MIN_QUESTIONS", "check_spec_bench"]

#: Fewest questions for a task's own interval in a comparison (the writer's stated rule).
TASK_INTERVAL_MIN_QUESTIONS = 10
_DIFF = "difference [95% interval]"  # the comparison's overall column
_ALIKE = re.compile(r"Plain turns answered alike by both models: (\d+) of (\d+)\.")


@dataclass
class _Questions:
    """One method's per-question figures in a given question order, and plain's speeds."""

    tasks: list[str]
    accepted: np.ndarray
    steps: np.ndarray
    speed: np.ndarray
    plain_speed: np.ndarray

    def measures(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean accepted tokens per step and speedup over plain of the questions ``rows``."""
        accepted = self.accepted[rows].sum(-1) / self.steps[rows].sum(-1)
        return accepted, self.speed[rows].mean(-1) / self.plain_speed[rows].mean(-1)


def _speed(answer: Mapping[str, Any]) -> float:
    choice = answer["choices"][0]
    return float(sum(choice["new_tokens"])) / float(sum(choice["wall_time"]))


def _questions(run: Mapping[str, list[dict]], method: str, ids: list[Any]) -> _Questions:
    mine, plain = _by_id(run[method]), _by_id(run["plain"])
    lengths = [mine[q]["choices"][0]["accept_lengths"] for q in ids]
    return _Questions(
        tasks=[task_of(mine[q]["category"]) for q in ids],
        accepted=np.array([float(sum(x)) for x in lengths]),
        steps=np.array([float(len(x)) for x in lengths]),
        speed=np.array([_speed(mine[q]) for q in ids]),
        plain_speed=np.array([_speed(plain[q]) for q in ids]),
    )


def _draws(tasks: list[str], resamples: int, seed: int) -> list[tuple[str, Any, Any]]:
    """(task, its rows, its drawn rows) in Spec-Bench's task order, then ``overall``."""
    rng = np.random.default_rng(seed)
    named = [t for t in TASKS if t in tasks] + sorted(set(tasks) - set(TASKS))
    out = []
    for task in named:
        rows = np.flatnonzero(np.array(tasks) == task)
        out.append((task, rows, rows[rng.integers(0, rows.size, size=(resamples, rows.size))]))
    joined = np.concatenate([drawn for _, _, drawn in out], axis=1)
    return [*out, ("overall", np.arange(len(tasks)), joined)]


def _percentiles(drawn: np.ndarray) -> list[float]:
    return [float(x) for x in np.percentile(drawn, [2.5, 97.5])]


def _first(row: dict[str, str]) -> tuple[str, ...]:
    """A row's key: its first column's cell."""
    return (next(iter(row.values()), ""),)


def _by_id(answers: list[dict]) -> dict[Any, dict]:
    return {a["question_id"]: a for a in answers}


def _load_run(folder: Path) -> dict[str, list[dict]]:
    return {p.stem: read_jsonl(p) for p in sorted(folder.glob("*.jsonl"))}


def _run_expected(run: dict[str, list[dict]]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    plain_speed = {a["question_id"]: _speed(a) for a in run["plain"]}
    for method, answers in run.items():
        for task in (*TASKS, "overall"):
            mine = [a for a in answers if task == "overall" or task_of(a["category"]) == task]
            if not mine:
                continue
            lengths = [x for a in mine for x in a["choices"][0]["accept_lengths"]]
            speed = float(np.mean([_speed(a) for a in mine]))
            base = float(np.mean([plain_speed[a["question_id"]] for a in mine]))
            out[(method, task)] = {
                "questions": [len(mine)],
                "new tokens": [sum(sum(a["choices"][0]["new_tokens"]) for a in mine)],
                "mean accepted tokens": [sum(lengths) / len(lengths)],
                "tokens/s": [speed],
                "speedup": [speed / base],
                "identical to plain": str(all(a["identical_to_plain"] for a in mine)),
            }
    return out


def _check_run(page: Path, folder: Path, found: Findings) -> None:
    run = _load_run(folder)
    tables = page_tables(page.read_text(encoding="utf-8"))
    if "plain" not in run or not tables:
        found.differences.append(f"bench/{page.name}: no plain answers or no table to check")
        return
    check_rows(
        found, f"bench/{page.name}", tables[0], _run_expected(run),
        lambda row: (row.get("method", ""), row.get("task", "")),
    )  # fmt: skip


def _signed(delta: float, interval: list[float] | None) -> list[float]:
    return [delta] if interval is None else [delta, *interval]


def _check_comparison(page: Path, record: Mapping[str, Any], root: Path, found: Findings) -> None:
    """A comparison page: both tables and the plain turns alike, from the two runs."""
    args, settings = record["args"], record["settings"]
    method, resamples, seed = args["method"], int(settings["resamples"]), int(settings["seed"])
    baseline, system = (_load_run(root / record[k]) for k in ("baseline", "system"))
    ids = [a["question_id"] for a in baseline[method]]
    base, mine = _questions(baseline, method, ids), _questions(system, method, ids)
    text = page.read_text(encoding="utf-8")
    tables = page_tables(text)
    named = args.get("labels")  # the record's arguments, as strings; else the runs' folders
    b, m = (
        ast.literal_eval(named)
        if named not in (None, "None")
        else [Path(record[k]).name for k in ("baseline", "system")]
    )
    if len(tables) != 2 or tables[0][0][1:3] != [b, m]:
        found.differences.append(
            f"bench/{page.name}: not the two tables of a comparison of {b} and {m}"
        )
        return
    per_task: dict[tuple[str, ...], dict[str, Any]] = {}
    overall: dict[tuple[str, ...], dict[str, Any]] = {}
    for task, rows, drawn in _draws(base.tasks, resamples, seed):
        (acc_b, spd_b), (acc_m, spd_m) = base.measures(rows), mine.measures(rows)
        (dacc_b, dspd_b), (dacc_m, dspd_m) = base.measures(drawn), mine.measures(drawn)
        enough = task == "overall" or rows.size >= TASK_INTERVAL_MIN_QUESTIONS
        acc = _signed(acc_m - acc_b, _percentiles(dacc_m - dacc_b) if enough else None)
        spd = _signed(spd_m - spd_b, _percentiles(dspd_m - dspd_b) if enough else None)
        if task == "overall":
            overall = {
                ("mean accepted tokens per step",): {b: [acc_b], m: [acc_m], _DIFF: acc},
                ("speedup over its own plain decoding",): {b: [spd_b], m: [spd_m], _DIFF: spd},
            }
            continue
        per_task[(task,)] = {
            "questions": [rows.size],
            f"accepted, {b}": [acc_b],
            f"accepted, {m}": [acc_m],
            "accepted, difference": acc,
            f"speedup, {b}": [spd_b],
            f"speedup, {m}": [spd_m],
            "speedup, difference": spd,
        }
    check_rows(found, f"bench/{page.name} overall", tables[0], overall, _first)
    check_rows(found, f"bench/{page.name} per task", tables[1], per_task, _first)
    turns = [
        (x, y)
        for q in ids
        for x, y in zip(
            _by_id(baseline["plain"])[q]["choices"][0]["turns"],
            _by_id(system["plain"])[q]["choices"][0]["turns"],
        )
    ]
    alike = _ALIKE.search(text)
    found.compare(
        f"bench/{page.name}",
        "plain turns alike",
        f"{alike.group(1)} of {alike.group(2)}" if alike else None,
        f"{sum(x == y for x, y in turns)} of {len(turns)}",
    )


def _check_intervals(page: Path, record: Mapping[str, Any], root: Path, found: Findings) -> None:
    """A run's intervals page: each task's and the overall measures with their percentiles."""
    method, settings = record["args"]["method"], record["settings"]
    run = _load_run(root / record["run"])
    ids = [a["question_id"] for a in run[method]]
    q = _questions(run, method, ids)
    expected = {}
    for task, rows, drawn in _draws(q.tasks, int(settings["resamples"]), int(settings["seed"])):
        (acc, spd), (dacc, dspd) = q.measures(rows), q.measures(drawn)
        expected[(task,)] = {
            "questions": [rows.size],
            "mean accepted tokens per step [95% interval]": [acc, *_percentiles(dacc)],
            "speedup over plain [95% interval]": [spd, *_percentiles(dspd)],
        }
    tables = page_tables(page.read_text(encoding="utf-8"))
    if not tables:
        found.differences.append(f"bench/{page.name}: no table")
        return
    check_rows(found, f"bench/{page.name}", tables[0], expected, _first)


def check_spec_bench(results: Path) -> Findings:
    """Every Spec-Bench run, comparison and intervals page under ``results/bench``."""
    found = Findings("Spec-Bench pages from their answers")
    root = results.resolve().parent
    for path in sorted((results / "bench").glob("spec-bench*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        page = path.with_suffix(".md")
        if not page.is_file():
            found.differences.append(f"bench/{path.name}: no page beside it")
        elif path.with_suffix("").is_dir():
            _check_run(page, path.with_suffix(""), found)
        elif "baseline" in record and "system" in record:
            _check_comparison(page, record, root, found)
        elif "run" in record:
            _check_intervals(page, record, root, found)
        else:
            found.differences.append(f"bench/{path.name}: neither a run nor a comparison")
    return found
