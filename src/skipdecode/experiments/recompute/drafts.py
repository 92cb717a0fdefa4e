"""The lossless mode's draft comparisons recomputed from the benchmark records they compare.

A draft comparison (``results/bench/speculative-*.json`` naming ``runs``: ``make study
NAME=speculative_budgets`` and its variants) sets one ``bench_speculative`` record per draft side
by side. Its page prints, per batch size, draft and k: the variant's acceptance, tokens per
verify, draft pass and verify cost, predicted and measured speedup, the steps a round advances
and those it would need for the goal speedup (goal x steps a round / predicted speedup), the
ceiling at full acceptance ((k + 1) / (k x draft pass + verify + acceptance + bookkeeping)), the
full model's ms per step and whether the output was the full model's; the chosen row is the
highest measured speedup of its batch size. At batch 1 (a prompt a batch) the chosen setting
against each other draft: tokens per verify at the chosen k and speedup at that draft's own best
k, each pooled over the prompts (tokens over verify rounds; the full model's seconds over the
draft's), the difference with the 2.5th and 97.5th percentiles over prompts drawn with
replacement (numpy's generator seeded 12345, the same draws for both sides). And two drafts
compared over training seeds (a record naming ``first`` and ``second`` runs, ``make study
NAME=speculative_b10_seed``): each seed's tokens per verify, their differences and mean, the
two-level paired bootstrap over inputs and seeds, and the t-interval over the seeds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..sweeps.excerpts import page_tables
from .findings import Findings, check_rows, printed_as, tables_beside
from .tables import mean_interval

__all__ = ["check_drafts"]

SEED = 12345
_K = re.compile(r"speculative-k(\d+)")
_SIGNED = r"([+-]\d+\.\d+)"
#: The seeds page's sentence: the mean difference [bootstrap], then the seeds' t-interval.
_INTERVALS = re.compile(
    rf"minus [^:]*: {_SIGNED} \[{_SIGNED}, {_SIGNED}\].*?own differences \[{_SIGNED}, {_SIGNED}\]",
    re.S,
)


def _ks(cell: Mapping[str, Any]) -> list[int]:
    return sorted(int(m[1]) for n in cell["variants"] if (m := _K.fullmatch(n)))


def _row(cell: Mapping[str, Any], k: int, goal: float) -> dict[str, Any]:
    """A (draft, k) row's page figures, and its measured speedup (``_measured``)."""
    v = cell["variants"][f"speculative-k{k}"]
    cost = v.get("cost") or {}
    predicted, draft = cost.get("predicted_speedup"), cost.get("draft_pass")
    steps = cost.get("steps_per_round")
    need = ceiling = None
    if predicted and draft is not None:
        need = goal * steps / predicted
        rest = cost["verify_per_round"] + cost["accept_per_round"] + cost["bookkeeping_per_round"]
        ceiling = (k + 1) / (k * draft + rest)
    exact = v.get("identical_to_full")
    return {
        "acceptance": [v.get("acceptance_rate")],
        "tokens/verify": [v.get("tokens_per_verify")],
        "draft pass": [draft],
        "verify": [cost.get("verify_per_round")],
        "predicted": [predicted],
        "measured vs own full": [v["speedup_vs_full"]],
        f"steps a round: got / for {goal:g}x": [steps, need],
        "ceiling (all accepted)": [ceiling],
        "own full, ms/step": [cell["variants"]["skipdecode-full"]["ms_per_step_of_full"]],
        "exact": "None" if exact is None else str(exact),
        "_measured": v["speedup_vs_full"],
    }


def _prompts(cell: Mapping[str, Any], k: int) -> dict[str, np.ndarray]:
    full = cell["variants"]["skipdecode-full"]["per_batch"]
    spec = cell["variants"][f"speculative-k{k}"]["per_batch"]
    return {
        "full_s": np.array([b["decode_s"] for b in full]),
        "spec_s": np.array([b["decode_s"] for b in spec]),
        "tokens": np.array([b["accepted"] + b["row_rounds"] for b in spec], float),
        "rounds": np.array([b["row_rounds"] for b in spec], float),
    }


def _pooled(a: Mapping[str, np.ndarray], rows: np.ndarray, name: str) -> np.ndarray:
    if name == "tokens":
        return a["tokens"][rows].sum(-1) / a["rounds"][rows].sum(-1)
    return a["full_s"][rows].sum(-1) / a["spec_s"][rows].sum(-1)


def _difference(mine: Mapping, other: Mapping, name: str, draws: np.ndarray) -> list[float]:
    every = np.arange(draws.shape[1])[None]
    point = float(_pooled(mine, every, name)[0] - _pooled(other, every, name)[0])
    drawn = _pooled(mine, draws, name) - _pooled(other, draws, name)
    return [point, *(float(x) for x in np.percentile(drawn, [2.5, 97.5]))]


def _draft_row(row: dict[str, str]) -> tuple[str, ...]:
    """A row's key: batch, draft and k (its chosen mark off)."""
    return (row.get("batch", ""), row.get("draft", ""), row.get("k", "").split(" (")[0])


def _check_comparison(path: Path, record: Mapping[str, Any], root: Path, found: Findings) -> None:
    runs = [json.loads((root / p).read_text(encoding="utf-8")) for p in record["runs"]]
    drafts, goal, resamples = record["drafts"], float(record["goal"]), int(record["resamples"])
    expected: dict[tuple[str, str, str], dict[str, Any]] = {}
    against: dict[str, list[Any]] = {}
    for cells in zip(*(r["cells"] for r in runs), strict=True):
        size = str(cells[0]["batch_size"])
        rows = {(size, d, str(k)): _row(c, k, goal) for d, c in zip(drafts, cells) for k in _ks(c)}
        best = max(rows, key=lambda key: rows[key]["_measured"])
        for key, row in rows.items():  # the chosen mark on the highest measured speedup
            row["k"] = key[2] + (" (chosen)" if key == best else "")
        expected |= rows
        if size != "1":
            continue
        by_draft = dict(zip(drafts, cells))
        mine = _prompts(by_draft[best[1]], int(best[2]))
        n = len(mine["tokens"])
        draws = np.random.default_rng(SEED).integers(0, n, size=(resamples, n))
        for draft, cell in by_draft.items():
            if draft == best[1]:
                continue
            own = max((k for k in rows if k[1] == draft), key=lambda k: rows[k]["_measured"])
            tokens = _difference(mine, _prompts(cell, int(best[2])), "tokens", draws)
            speed = _difference(mine, _prompts(cell, int(own[2])), "speedup", draws)
            against[draft] = [tokens, [*speed, int(own[2])]]
    page = path.with_suffix(".md")
    tables = tables_beside(path, found)
    if not tables:
        return
    check_rows(found, f"bench/{page.name}", tables[0], expected, _draft_row)
    vs = next((t for t in tables if t[0] and t[0][0] == "against draft"), ([], []))
    got = {row[0]: row[1:] for row in vs[1]}
    if set(got) != set(against):
        found.differences.append(
            f"bench/{page.name}: batch 1 rows {sorted(got)} != {sorted(against)}"
        )
    for draft in sorted(set(got) & set(against)):
        if len(got[draft]) != len(against[draft]):
            found.differences.append(f"bench/{page.name} against {draft}: {got[draft]!r}")
            continue
        for printed, want in zip(got[draft], against[draft], strict=True):
            found.checked += 1
            if not printed_as(printed, want):
                found.differences.append(
                    f"bench/{page.name} against {draft}: {printed!r} != {want!r}"
                )


def _check_seeds(path: Path, record: Mapping[str, Any], root: Path, found: Findings) -> None:
    """Two drafts over training seeds: each seed's batch-1 tokens per verify at ``k`` pooled over
    the inputs, their differences, the mean with the two-level paired bootstrap (inputs and
    seeds drawn, seed s with seed s) and the t-interval over the seeds."""
    k, resamples = int(record["k"]), int(record["resamples"])
    sides = []
    for paths in (record["first"], record["second"]):
        runs = [json.loads((root / p).read_text(encoding="utf-8")) for p in paths]
        sides.append(
            [_prompts(next(c for c in r["cells"] if c["batch_size"] == 1), k) for r in runs]
        )
    first, second = sides
    n, seeds = len(first[0]["tokens"]), len(first)
    every = np.arange(n)[None]
    whole = [[float(_pooled(x, every, "tokens")[0]) for x in side] for side in sides]
    per_seed = [x - y for x, y in zip(*whole)]
    rng = np.random.default_rng(SEED)
    rows = rng.integers(0, n, size=(resamples, n))
    picked = rng.integers(0, seeds, size=(resamples, seeds))
    weights = np.stack([np.bincount(p, minlength=seeds) for p in picked]) / seeds
    drawn = np.stack(
        [_pooled(x, rows, "tokens") - _pooled(y, rows, "tokens") for x, y in zip(first, second)], 1
    )
    low, high = np.percentile((drawn * weights).sum(1), [2.5, 97.5])
    mean, t_low, t_high = mean_interval(per_seed)
    page = path.with_suffix(".md")
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    tables = page_tables(text)
    if not tables:
        found.differences.append(f"bench/{path.name}: no page with a table beside it")
        return
    want = [[x, y, d] for x, y, d in zip(*whole, per_seed)]
    want.append([float(np.mean(whole[0])), float(np.mean(whole[1])), mean])
    printed = tables[0][1]
    if len(printed) != len(want):
        found.differences.append(
            f"bench/{page.name}: {len(printed)} rows, the records give {len(want)}"
        )
    for row, values in zip(printed, want):
        if len(row) != len(values) + 1:
            found.differences.append(f"bench/{page.name} seed {row[0]}: {row!r}")
            continue
        for cell, value in zip(row[1:], values, strict=True):
            found.checked += 1
            if not printed_as(cell, [value]):
                found.differences.append(f"bench/{page.name} seed {row[0]}: {cell!r} != {value!r}")
    quoted = _INTERVALS.search(text)
    found.checked += 1
    if not quoted or not printed_as(" ".join(quoted.groups()), [mean, low, high, t_low, t_high]):
        found.differences.append(
            f"bench/{page.name}: the intervals read {quoted and quoted.groups()}"
        )


def check_drafts(results: Path) -> Findings:
    """Every draft comparison page, from the benchmark records it names."""
    found = Findings("draft comparisons from their benchmark records")
    root = results.resolve().parent
    for path in sorted((results / "bench").glob("speculative-*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if "runs" in record and "batches" in record:
            _check_comparison(path, record, root, found)
        elif "per_seed_difference" in record:
            _check_seeds(path, record, root, found)
        elif "cells" not in record:
            found.differences.append(
                f"bench/{path.name}: a page of a layout the audit does not know"
            )
    return found
