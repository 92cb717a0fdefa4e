"""``reach.csv`` and ``reach.md`` (target, planned and reached speedup) recomputed per cell.

From the records alone: a row for every finished cell and none without; its labels and target
(the cell's), reached speedup and generated length (the record's summary), a calibrated
schedule's plan (its record's calibration), and empty plan cells where nothing is planned over
lengths (the lossless mode; test references of a calibrated schedule). With the model's tokenizer (``make
smollm2 gemma3``; otherwise counted as skipped): the mean test reference length, and a static
budget's planned and test-reference speedups, ``L x passes / layers`` with the layers summed here
from the schedule's per-step budgets (a sequence of ``n`` tokens makes ``n - 1`` decode passes;
pass ``g`` runs ``budget(g)`` layers). The lengths are counted as the page counts them (the same
data loader and tokenizer: counting tokens is not arithmetic to redo). Every ``reach.md`` cell
against ``reach.csv`` at its printed digits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...evaluation.record import described_schedule
from ...io import read_json_or_none
from ...models.loading import ModelConfigError
from ...schedules import build_schedule
from ..sweeps import reach as writer
from ..sweeps.excerpts import table_cells
from .findings import Findings, csv_rows

__all__ = ["check_reach"]

_HEADER = (
    "job", "schedule", "method", "seed", "target", "planned", "planned on", "test refs",
    "reached", "ref. tokens", "gen. tokens",
)  # fmt: skip
_SPEEDS = ("target", "planned", "test_references", "reached")
_LENGTHS = ("reference_tokens", "generated_tokens")


def _speedup(budget: Any, num_layers: int, lengths: tuple[int, ...]) -> float | None:
    passes = [max(0, n - 1) for n in lengths]
    if sum(passes) == 0:
        return None  # no decode pass to count (the writer refuses such lengths)
    per_pass = [budget(g) for g in range(max(passes))]
    layers = sum(sum(per_pass[:n]) for n in passes)
    return num_layers * sum(passes) / layers


def _finished(folder: Path) -> dict[str, dict[str, Any]]:
    cells = {}
    for path in sorted(folder.glob("*/cell.json")):
        cell = read_json_or_none(path) or {}
        if cell.get("status") == "ok" and cell.get("record"):
            record = path.parent / str(cell["record"])
            cells[path.parent.name] = {**cell, "record": record}
    return cells


def _lengths(f: Findings, model: str, record: dict, split: str, limit: Any) -> Any:
    try:
        dataset = tuple(sorted(writer._dataset(record).items()))
        return writer._lengths(model, dataset, split, limit)
    except (ModelConfigError, OSError) as e:  # no tokenizer or data on this machine
        f.skip(
            f"reach rows of {model} whose lengths cannot be counted here: {str(e).splitlines()[0]}"
        )
        return None


def _check_row(f: Findings, where: str, row: dict[str, str], cell: dict[str, Any]) -> None:
    record = read_json_or_none(Path(cell["record"]))
    if not isinstance(record, dict) or "summary" not in record:
        f.differences.append(f"{where}: its record {cell['record']} cannot be read")
        return
    summary = record["summary"]
    for label in ("model", "schedule", "method", "seed"):
        f.compare(where, label, row[label], cell.get(label))
    f.compare(where, "target", row["target"], cell.get("target_speedup"))
    f.compare(where, "reached", row["reached"], summary.get("theoretical_speedup"))
    f.compare(
        where, "generated_tokens", row["generated_tokens"], summary.get("mean_generated_length")
    )
    desc = dict(record["schedule"])
    calibration = desc.get("calibration")
    if calibration:
        f.compare(where, "planned", row["planned"], calibration.get("theoretical_speedup"))
        planned_on = f"{calibration.get('num_inputs')} {calibration.get('split')} inputs"
        f.compare(where, "planned_on", row["planned_on"], planned_on)
    built = (
        None if calibration else build_schedule(described_schedule(desc), int(desc["num_layers"]))
    )
    schedule = None if built is None else built.static()
    if schedule is None:  # nothing planned over lengths: those cells stay empty
        empty = (
            ("test_references",) if calibration else ("planned", "planned_on", "test_references")
        )
        for column in empty:
            f.compare(where, column, row[column], "")
    model = str(cell.get("model"))
    scored = record.get("dataset") or {}
    test = _lengths(f, model, record, str(scored.get("split") or "test"), scored.get("limit"))
    if test is None:
        return
    f.compare(where, "reference_tokens", row["reference_tokens"], sum(test) / len(test))
    validation = None if schedule is None else _lengths(f, model, record, "validation", None)
    if schedule is None or validation is None:
        return
    layers = schedule.num_layers
    f.compare(where, "planned", row["planned"], _speedup(schedule.budget, layers, validation))
    f.compare(where, "planned_on", row["planned_on"], f"{len(validation)} validation targets")
    f.compare(
        where, "test_references", row["test_references"], _speedup(schedule.budget, layers, test)
    )


def _printed(f: Findings, folder: Path, rows: list[dict[str, str]]) -> None:
    if not (folder / "reach.md").is_file():
        f.differences.append(f"{folder.name}: reach.csv without reach.md")
        return
    lines = (folder / "reach.md").read_text(encoding="utf-8").splitlines()
    header = table_cells(lines[0]) if lines else []
    if header != list(_HEADER):
        f.differences.append(f"{folder.name}/reach.md: header {header} != {list(_HEADER)}")
    body = [ln for ln in lines[2:] if ln.startswith("|")]
    if len(body) != len(rows):
        f.differences.append(f"{folder.name}/reach.md: {len(body)} rows, reach.csv {len(rows)}")
        return
    for line, row in zip(body, rows):
        cells = table_cells(line)
        speed = {k: (f"{float(row[k]):.2f}x" if row[k] else "") for k in _SPEEDS}
        length = {k: (f"{float(row[k]):.1f}" if row[k] else "") for k in _LENGTHS}
        expected = [
            row["job"], row["schedule"], row["method"], row["seed"], speed["target"],
            speed["planned"], row["planned_on"], speed["test_references"], speed["reached"],
            length["reference_tokens"], length["generated_tokens"],
        ]  # fmt: skip
        if len(cells) != len(expected):
            f.differences.append(f"{folder.name}/reach.md job {row['job']}: {len(cells)} cells")
            continue
        for got, want in zip(cells, expected):
            f.compare(f"{folder.name}/reach.md job {row['job']}", "cell", got, want)


def check_reach(results: Path) -> Findings:
    f = Findings("reach pages from records")
    for page in sorted(results.glob("*/reach.md")):
        if not (page.parent / "reach.csv").is_file():
            f.differences.append(f"{page.parent.name}: reach.md without reach.csv")
    for path in sorted(results.glob("*/reach.csv")):
        folder = path.parent
        rows, cells = csv_rows(path), _finished(folder)
        for job in sorted(set(cells) - {r["job"] for r in rows}):
            f.differences.append(f"{folder.name}/reach.csv: no row for finished cell {job}")
        for row in rows:
            where = f"{folder.name}/reach.csv job {row['job']}"
            if row["job"] not in cells:
                f.differences.append(f"{where}: no finished cell")
                continue
            _check_row(f, where, row, cells[row["job"]])
        _printed(f, folder, rows)
    return f
