"""One budget-randomized model against the models fine-tuned for one schedule each.

For every schedule a budget-randomized model (``schedule=randomized_*``, evaluated under
``sweep.eval_schedule``; ``make study NAME=randomized_scitldr``) was decoded under, beside the
cells of the same model, dataset and schedule fine-tuned for that schedule alone (another
results folder): ROUGE-L max, BLEU and BERTScore F1 of both (mean over seeds [95% t-interval;
none with one seed]; what is decided is read on ROUGE-L max for summarization, on BLEU for
E2E); the difference randomized - per-schedule with the two-level paired bootstrap over the
seeds both have and the inputs (:func:`~.summaries.paired_deltas`), the t-interval over
per-seed differences with two or more paired seeds, and what they decide
(:func:`~.summaries.decided`); and each side's measured decode and end-to-end speedups, each
against the full model of its own training on the same batches and path, so the two are
compared at the speed each measured (the page prints both where both records give them: one
written before raw timings were kept gives no end-to-end speedup).

Writes ``one_model.md`` and ``one_model.csv`` into the randomized model's folder, each whole or
not at all (``--page NAME``: ``NAME.md`` and ``NAME.csv``, for a second comparison such as a
per-schedule fine-tune given only the steps the randomized model spent on its plan):

    python -m skipdecode.experiments.sweeps.one_model results/scitldr_randomized \\
        --against results/scitldr_smollm2
"""

from __future__ import annotations

import argparse
import csv
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...io import read_json_or_none, write_text_atomic
from .seeds import mean_ci95, mean_ci95_every
from .summaries import (
    LABELS,
    decided,
    delta_columns,
    interval_text,
    is_summarization,
    markdown_table,
    paired_deltas,
    summary_cells,
)
from .table import csv_text

__all__ = [
    "ONE_MODEL_CSV",
    "ONE_MODEL_MD",
    "against_of",
    "one_model_rows",
    "pairs_of",
    "write_one_model",
]

ONE_MODEL = "one_model"
ONE_MODEL_MD = f"{ONE_MODEL}.md"
ONE_MODEL_CSV = f"{ONE_MODEL}.csv"
#: The qualities compared, and the two speeds each side measured.
COMPARED = ("rougeL_max", "bleu", "bertscore_f1")
SPEEDS = ("measured_speedup_decode", "measured_speedup_e2e")
_KEY = ("dataset", "model", "schedule")


def one_model_rows(
    randomized: Sequence[Mapping[str, Any]],
    per_schedule: Sequence[Mapping[str, Any]],
    pairs: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per schedule the randomized model was decoded under and the per-schedule folder
    has cells for (module doc); ``randomized`` and ``per_schedule`` are
    :func:`~.summaries.summary_cells` of the two folders; ``pairs`` compares a schedule with
    another's per-schedule cells (a searched schedule against ``target_2x``, say), by name."""
    pairs = pairs or {}
    rows = []
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for cell in randomized:
        groups.setdefault(tuple(cell.get(k) for k in _KEY), []).append(cell)
    for key, cells in groups.items():
        against = (*key[:-1], pairs.get(str(key[-1]), key[-1]))
        own = [c for c in per_schedule if tuple(c.get(k) for k in _KEY) == against]
        if not own:  # nothing to compare with: the page leaves the schedule out
            continue
        row: dict[str, Any] = dict(zip(_KEY, key, strict=True))
        row["per_schedule"] = against[-1]
        row["method"] = cells[0].get("method")
        row["seeds"] = " ".join(sorted(str(c.get("seed")) for c in cells))
        row["per_schedule_seeds"] = " ".join(sorted(str(c.get("seed")) for c in own))
        for m in (*COMPARED, *SPEEDS):
            mean = mean_ci95_every if m in SPEEDS else mean_ci95
            row[m] = mean([c.get(m) for c in cells])
            row[f"per_schedule_{m}"] = mean([c.get(m) for c in own])
        row.update(paired_deltas(cells, {str(c.get("seed")): c for c in own}))
        rows.append(row)
    order = {"full": 0}
    return sorted(rows, key=lambda r: (order.get(str(r["schedule"]), 1), str(r["schedule"])))


def _label(row: Mapping[str, Any]) -> str:
    schedule, against = str(row["schedule"]), str(row.get("per_schedule") or row["schedule"])
    return schedule if against == schedule else f"{schedule} (against {against})"


def _speed(value: Any) -> str:
    mean = value[0] if isinstance(value, tuple) else value
    return "" if mean is None else f"{mean:.2f}x"


def primary_metric(rows: Sequence[Mapping[str, Any]]) -> str:
    """The quality a page decides on: ROUGE-L max for summarization, BLEU otherwise (E2E)."""
    return "rougeL_max" if rows and is_summarization(rows[0].get("dataset")) else "bleu"


def training_steps(cells: Sequence[Mapping[str, Any]]) -> str:
    """The training steps of the checkpoints ``cells`` decoded (their records' ``train_meta``),
    each once: "160", "31", "40 160"; "?" where a record does not say."""
    steps, unknown = set(), False
    for cell in cells:
        record = read_json_or_none(cell.get("record") or "") or {}
        found = re.search(
            r"step(\d+)\.ckpt$", str((record.get("train_meta") or {}).get("checkpoint"))
        )
        if found:
            steps.add(int(found.group(1)))
        else:
            unknown = True
    return " ".join([*map(str, sorted(steps)), *(["?"] if unknown else [])]) or "-"


def format_page(rows: Sequence[Mapping[str, Any]], command: str, steps: tuple[str, str]) -> str:
    primary = primary_metric(rows)
    header = ["schedule", "seeds (one model / per schedule)"]
    header += [
        "measured decode (one model / per schedule)",
        "measured e2e (one model / per schedule)",
    ]
    header += [f"{LABELS[m]} one model" for m in COMPARED]
    header += [f"{LABELS[m]} per schedule" for m in COMPARED]
    header += [f"Δ{LABELS[m]} [seeds x inputs]" for m in COMPARED]
    header += [f"Δ{LABELS[primary]} [per-seed t]", f"{LABELS[primary]}: decided"]
    lines = [
        [
            _label(r),
            f"{r['seeds']} / {r['per_schedule_seeds'] or '-'}",
            *(f"{_speed(r[m])} / {_speed(r[f'per_schedule_{m}'])}" for m in SPEEDS),
            *(interval_text(r[m], None, m) for m in COMPARED),
            *(interval_text(r[f"per_schedule_{m}"], None, m) for m in COMPARED),
            *(
                interval_text(r.get(f"{m}_delta"), r.get(f"{m}_delta_ci95"), m, True)
                for m in COMPARED
            ),
            interval_text(
                r.get(f"{primary}_delta"), r.get(f"{primary}_delta_seed_ci95"), primary, True
            ),  # fmt: skip
            decided(r, primary),
        ]
        for r in rows
    ]
    intro = (
        "# One budget-randomized model against one fine-tune per schedule\n\n"
        f"Written by `{command}` from the committed records; do not edit. Each row: the "
        "budget-randomized model decoded under a schedule, beside the model fine-tuned for that "
        f"schedule alone (same model, data and test inputs; training steps: one model {steps[0]}, "
        f"per schedule {steps[1]}). Quality: mean over seeds "
        "[95% t-interval; none with one seed]. Δ = one model - per schedule, the two-level "
        "paired bootstrap over the seeds both have and the inputs (with one paired seed the "
        "inputs only), and the t-interval over per-seed differences where two or more seeds "
        "pair; *decided* says lower or higher only where every interval excludes 0. Speeds: "
        "each side's measured speedup against the full model of its own training, same batches "
        "and path; the two sides are compared at the speed each measured (a mean over seeds only "
        "where every seed has it; a record written before raw timings were kept gives no "
        "end-to-end speedup).\n"
    )
    return intro + "\n" + "\n".join(markdown_table(header, lines)) + "\n"


def _csv_row(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = (*_KEY, "per_schedule", "method", "seeds", "per_schedule_seeds", "delta_seeds")
    out: dict[str, Any] = {k: row.get(k) for k in keys}
    for m in (*COMPARED, *SPEEDS):
        for side in ("", "per_schedule_"):
            mean, low, high = row.get(f"{side}{m}") or (None, None, None)
            out[f"{side}{m}"], out[f"{side}{m}_ci95_low"], out[f"{side}{m}_ci95_high"] = (
                mean,
                low,
                high,
            )
    for m in COMPARED:
        out.update(delta_columns(row, m))
    return out


def write_one_model(
    folder: str | Path,
    against: str | Path,
    label: str | None = None,
    pairs: Mapping[str, str] | None = None,
    page: str = ONE_MODEL,
) -> dict[str, Path] | None:
    """Write the page and its CSV (``page``.md and .csv) into ``folder``; None when it holds no
    finished cell. ``label``: how the page and its CSV name ``against`` (default: as given);
    ``pairs`` (default: those the published CSV holds) as in :func:`one_model_rows`."""
    folder, against = Path(folder), Path(against)
    label = label or against.as_posix()
    pairs = pairs_of(folder, page) if pairs is None else pairs
    own, per_schedule = summary_cells(folder, False), summary_cells(against, False)
    rows = one_model_rows(own, per_schedule, pairs)
    if not rows:
        return None
    command = (
        f"python -m skipdecode.experiments.sweeps.one_model {folder.as_posix()} --against {label}"
        + "".join(f" --pair {k}={v}" for k, v in sorted(pairs.items()))
        + ("" if page == ONE_MODEL else f" --page {page}")
    )
    compared = {(r["dataset"], r["model"], r["per_schedule"]) for r in rows}
    against_cells = [c for c in per_schedule if tuple(c.get(k) for k in _KEY) in compared]
    steps = (training_steps(own), training_steps(against_cells))
    paths = {"md": folder / f"{page}.md", "csv": folder / f"{page}.csv"}
    lines = [{**_csv_row(r), "against": label} for r in rows]
    write_text_atomic(paths["csv"], csv_text(lines, list(lines[0])))
    write_text_atomic(paths["md"], format_page(rows, command, steps))
    return paths


def _published_rows(folder: Path, page: str = ONE_MODEL) -> list[dict[str, str]]:
    """The rows of a published page's CSV (none without one)."""
    path = Path(folder) / f"{page}.csv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def against_of(folder: Path, page: str = ONE_MODEL) -> str | None:
    """The per-schedule folder a published page compared with (its CSV's ``against``)."""
    rows = _published_rows(folder, page)
    return rows[0].get("against") if rows else None


def pairs_of(folder: Path, page: str = ONE_MODEL) -> dict[str, str]:
    """The schedules a published page compared with another schedule's cells (its CSV)."""
    return {
        r["schedule"]: r["per_schedule"]
        for r in _published_rows(folder, page)
        if r.get("per_schedule") and r["per_schedule"] != r["schedule"]
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the budget-randomized model's results folder")
    p.add_argument("--against", type=Path, required=True, help="the per-schedule results folder")
    p.add_argument(
        "--pair", action="append", default=[], metavar="SCHEDULE=AGAINST",
        help="compare SCHEDULE with AGAINST's per-schedule cells (repeatable)",
    )  # fmt: skip
    p.add_argument("--page", default=ONE_MODEL, help="the page's name: NAME.md and NAME.csv")
    args = p.parse_args(argv)
    if not re.fullmatch(r"one_model[a-z0-9_]*", args.page):
        p.error(f"--page: {args.page!r}; allowed: one_model followed by letters, digits or _")
    for name, path in (("folder", args.folder), ("--against", args.against)):
        if not path.is_dir():
            p.error(f"{name}: {str(path)!r} is not a directory")
    pairs = pairs_of(args.folder, args.page)
    for pair in args.pair:
        schedule, sep, other = pair.partition("=")
        if not sep or not schedule or not other:
            p.error(f"--pair: {pair!r}; allowed: SCHEDULE=AGAINST, two schedule names")
        pairs[schedule] = other
    written = write_one_model(args.folder, args.against, pairs=pairs, page=args.page)
    print(written["md"] if written else f"{args.folder}: no schedule with cells on both sides")


if __name__ == "__main__":
    main()
