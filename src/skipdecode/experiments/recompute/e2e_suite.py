"""E2E's own metric pages (``e2e_suite.md``) recomputed from their per-cell scores.

The per-cell scores (``e2e_suite.csv``) come from the challenge's scripts (mteval BLEU and NIST,
METEOR 1.5, COCO ROUGE-L and CIDEr; Java), which the audit does not run again and counts apart
(mteval's BLEU is not the records' own: on the two CALM cells they differ in the second
decimal). From the scores, own arithmetic: per schedule, the
seeds, each metric's mean over them with its 95% t-interval, and each metric's difference from
full of the same seed (mean and t-interval over the seeds both have); every row printed once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweeps.excerpts import page_tables
from .findings import Findings, check_rows, csv_rows
from .tables import mean_interval

__all__ = ["check_e2e_suite"]

#: The suite's metrics: the CSV's column and the page's label.
METRICS = (
    ("bleu", "BLEU"),
    ("nist", "NIST"),
    ("meteor", "METEOR"),
    ("rouge_l", "ROUGE-L"),
    ("cider", "CIDEr"),
)


def _shown(values: list[float]) -> list[float]:
    return [v for v in mean_interval(values) if v is not None]


def _expected(scores: list[dict[str, str]]) -> tuple[dict, dict]:
    """The two tables' rows by (model, schedule): the means, and the differences from full."""
    full = {(r["model"], r["seed"]): r for r in scores if r["method"] == "full"}
    groups: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in scores:
        groups.setdefault((r["model"], r["schedule"]), []).append(r)
    means, deltas = {}, {}
    for key, members in groups.items():
        paired = [r for r in members if (r["model"], r["seed"]) in full]
        row: dict[str, Any] = {"seeds": " ".join(sorted(r["seed"] for r in members))}
        difference: dict[str, Any] = {"paired seeds": " ".join(sorted(r["seed"] for r in paired))}
        for column, label in METRICS:
            row[label] = _shown([float(r[column]) for r in members])
            own = [float(r[column]) - float(full[(r["model"], r["seed"])][column]) for r in paired]
            difference[f"Δ{label}"] = _shown(own) if members[0]["method"] != "full" else []
        row["ΔBLEU vs full [per-seed t CI]"] = difference["ΔBLEU"]
        means[key] = row
        if members[0]["method"] != "full":
            deltas[key] = difference
    return means, deltas


def _model_schedule(row: dict[str, str]) -> tuple[str, ...]:
    return (row.get("model", ""), row.get("schedule", ""))


def _check_folder(folder: Path, found: Findings) -> None:
    scores = csv_rows(folder / "e2e_suite.csv")
    for _ in scores:
        found.skip("cells scored by the challenge's own scripts (Java), not scored again")
    means, deltas = _expected(scores)
    tables = page_tables((folder / "e2e_suite.md").read_text(encoding="utf-8"))
    where = f"{folder.name}/e2e_suite.md"
    check_rows(found, where, tables[0] if tables else ([], []), means, _model_schedule)
    table = tables[1] if len(tables) > 1 else ([], [])
    check_rows(found, f"{where} differences", table, deltas, _model_schedule)


def check_e2e_suite(results: Path) -> Findings:
    """Every folder's ``e2e_suite.md`` from its ``e2e_suite.csv``."""
    found = Findings("E2E metric-suite pages from their scores")
    for page in sorted(results.glob("*/e2e_suite.md")):
        _check_folder(page.parent, found)
    return found
