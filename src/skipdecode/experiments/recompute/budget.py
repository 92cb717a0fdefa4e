"""Every fine-tuning-budget page (``budget.csv``, ``budget.md``) recomputed from its folder's
table of stepped rows.

Own reading: the table and metric are SciTLDR's ROUGE-L *max* from ``summaries.csv`` where its
rows evaluated at a training step have it (which :mod:`.summaries` recomputes from the
generations), else BLEU from ``results.csv`` where those rows have a BLEU mean, else its ROUGE-L
(ROUGE shown x 100). Per row of a schedule other than full evaluated at a step: full's mean at
the same step and its seeds, the row's mean and its seeds, its difference from full with the
seeds x inputs interval and the per-seed t-interval (the table's, which :mod:`.deltas` or
:mod:`.summaries` recompute from the generations), and decided: every interval there excludes 0.
Per schedule, the page's sentence: not separable at any budget; still separable at its largest;
or not separable from the first budget after the last decided one; where every seeds x inputs
interval of the undecided budgets excludes 0, it adds that only the per-seed one includes it.
``budget.md``'s table at its printed digits, every row once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweeps.table import num
from .findings import Findings, check_rows, csv_rows, tables_of

__all__ = ["check_budget"]

#: (table, metric, its mean's column, label, scale), the first with stepped rows that have it.
_SOURCES = (
    ("summaries.csv", "rougeL_max", "rougeL_max", "ROUGE-L max", 100.0),
    ("results.csv", "bleu", "bleu_mean", "BLEU", 1.0),
    ("results.csv", "rougeL", "rougeL_mean", "ROUGE-L per-type max", 100.0),
)
_FIELDS = ("full", "value", "delta", "delta_ci95_low", "delta_ci95_high",
           "delta_seed_ci95_low", "delta_seed_ci95_high")  # fmt: skip


def _source(folder: Path) -> tuple[list[dict[str, str]], tuple] | None:
    """The stepped rows of the first :data:`_SOURCES` table whose stepped rows have its metric,
    and that source; each table read once."""
    read: dict[str, list[dict[str, str]]] = {}
    for source in _SOURCES:
        if source[0] not in read:
            rows = csv_rows(folder / source[0]) if (folder / source[0]).is_file() else []
            read[source[0]] = [r for r in rows if num(r.get("train_steps")) is not None]
        if any(num(r.get(source[2])) is not None for r in read[source[0]]):
            return read[source[0]], source
    return None


def _expected(folder: Path) -> list[dict[str, Any]]:
    found = _source(folder)
    if found is None:
        return []
    stepped, (_, metric, mean, label, scale) = found

    def scaled(row: dict[str, str] | None, key: str) -> float | None:
        value = num((row or {}).get(key))
        return None if value is None else value * scale

    full = {int(num(r["train_steps"])): r for r in stepped if r.get("schedule") == "full"}
    out = []
    for r in stepped:
        steps = int(num(r["train_steps"]))
        if r.get("schedule") == "full" or num(r.get(f"{metric}_delta")) is None:
            continue
        row = {"schedule": r["schedule"], "train_steps": steps, "metric": label,
               "full_seeds": (full.get(steps) or {}).get("seeds") or "",
               "seeds": r.get("seeds") or "", "delta_seeds": r.get("delta_seeds") or "",
               "full": scaled(full.get(steps), mean),
               "value": scaled(r, mean), "delta": scaled(r, f"{metric}_delta")}  # fmt: skip
        for kind in ("", "_seed"):
            for bound in ("low", "high"):
                key = f"delta{kind}_ci95_{bound}"
                row[key] = scaled(r, f"{metric}_{key}")
        pairs = [(row[f"delta{k}_ci95_low"], row[f"delta{k}_ci95_high"]) for k in ("", "_seed")]
        shown = [(low, high) for low, high in pairs if low is not None and high is not None]
        row["decided"] = bool(shown) and all(low > 0 or high < 0 for low, high in shown)
        out.append(row)
    return out


_ONLY_PER_SEED = "there every seeds x inputs interval excludes 0; only the per-seed one includes it"


def _sentence(rows: list[dict[str, Any]]) -> str:
    parts = []
    for schedule in sorted({r["schedule"] for r in rows}):
        mine = sorted(
            (r for r in rows if r["schedule"] == schedule), key=lambda r: r["train_steps"]
        )
        decided = [r["train_steps"] for r in mine if r["decided"]]
        if decided and decided[-1] == mine[-1]["train_steps"]:
            parts.append(f"{schedule}: still separable from full at {decided[-1]} steps")
            continue
        undecided = [r for r in mine if not decided or r["train_steps"] > decided[-1]]
        if decided:
            first = min(r["train_steps"] for r in undecided)
            text = f"{schedule}: not separable from full from {first} steps on"
        else:
            text = f"{schedule}: not separable from full at any budget measured"
        inputs_exclude = [
            r["delta_ci95_low"] is not None
            and r["delta_ci95_high"] is not None
            and (r["delta_ci95_low"] > 0 or r["delta_ci95_high"] < 0)
            for r in undecided
        ]
        if all(inputs_exclude):
            text += f" ({_ONLY_PER_SEED})"
        parts.append(text)
    return "; ".join(parts) + "."


def _check_folder(folder: Path, found: Findings) -> None:
    expected = _expected(folder)
    where = f"{folder.name}/budget"
    published = csv_rows(folder / "budget.csv")
    by_key = {(r["schedule"], r["train_steps"]): r for r in published}
    if len(by_key) != len(published) or set(by_key) != {
        (r["schedule"], str(r["train_steps"])) for r in expected
    }:
        found.differences.append(f"{where}.csv: its rows are not its table's stepped rows")
        return
    for row in expected:
        shown = by_key[(row["schedule"], str(row["train_steps"]))]
        at = f"{where}.csv {row['schedule']} {row['train_steps']}"
        for key in _FIELDS:
            found.compare(at, key, shown.get(key), row[key])
        for key in ("metric", "full_seeds", "seeds", "delta_seeds"):
            found.compare(at, key, shown.get(key), row[key])
        found.compare(at, "decided", shown.get("decided"), str(row["decided"]))
    page = (folder / "budget.md").read_text(encoding="utf-8")
    found.checked += 1
    if f"\n{_sentence(expected)}\n" not in page:
        found.differences.append(f"{where}.md: the sentence is not {_sentence(expected)!r}")
    tables = tables_of(folder / "budget.md")
    metric = expected[0]["metric"] if expected else ""

    def interval(row: dict[str, Any], kind: str) -> list[Any]:
        low, high = row[f"delta{kind}_ci95_low"], row[f"delta{kind}_ci95_high"]
        return [low, high] if kind else [row["delta"], low, high]

    lines = {
        (r["schedule"], str(r["train_steps"])): {
            "full seeds": r["full_seeds"], f"full {metric}": [r["full"]], "seeds": r["seeds"],
            metric: [r["value"]], "paired seeds": r["delta_seeds"],
            f"Δ{metric} [seeds x inputs]": interval(r, ""),
            "Δ [per-seed t]": interval(r, "_seed"), "decided": "yes" if r["decided"] else "no",
        }
        for r in expected
    }  # fmt: skip
    table = tables[0] if tables else ([], [])
    check_rows(
        found, f"{where}.md", table, lines, lambda p: (p.get("schedule", ""), p.get("steps", ""))
    )


def check_budget(results: Path) -> Findings:
    """Every folder's budget page from its table of stepped rows."""
    found = Findings("fine-tuning-budget pages from their tables")
    for page in sorted(results.glob("*/budget.csv")):
        _check_folder(page.parent, found)
    return found
