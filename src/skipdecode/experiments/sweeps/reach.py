"""Target, planned and reached speedup of every cell of a results folder, and where they part.

A schedule is chosen to meet a target speedup before any test output exists, so what it reaches
on the test set can differ. For each finished cell of a results folder (published, or a sweep's
output folder) the table shows, as theoretical speedups (layers per generated token, the one
accounting of skipdecode):

- **target**: the nominal speedup of the schedule config;
- **planned**: what the schedule was fitted to. For a static layer budget (SkipDecode, early
  exit, unified skip, power law) its speedup over every target length of the validation split
  (the lengths a ``target`` rule can know); for a calibrated schedule (CALM, adaptive
  SkipDecode) the speedup its calibration reached on its validation inputs (their generations);
- **test references**: a static budget's speedup over the test references' lengths (what it
  would reach if it wrote outputs as long as the references);
- **reached**: its speedup over the outputs it generated (the record's theoretical speedup);
- the mean reference and generated lengths in tokens.

planned → test references isolates the split (test references differ from validation ones);
test references → reached isolates the model's output lengths. Writes ``reach.csv`` (one line
per cell) and ``reach.md`` into the folder, each whole or not at all. Lengths are counted with
the tokenizer of the cell's pretrained model (``conf/model/<model>.yaml``; a model whose
tokenizer is trained on the data, such as ``tiny``, has none to count with: an error says so).

    python -m skipdecode.experiments.sweeps.reach results/e2e_smollm2 results/e2e_gemma3
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ...data.datasets import dataset_options, get_task, load_split, target_lengths
from ...evaluation.record import described_schedule
from ...io import read_json_or_none, write_text_atomic
from ...models.loading import ModelConfigError, load_pretrained_tokenizer, needs_trained_tokenizer
from ...paths import repo_root
from ...schedules import build_schedule
from .identity import CELL_FILE
from .table import csv_text, row_order

log = logging.getLogger(__name__)

__all__ = ["REACH_CSV", "REACH_MD", "reach_rows", "write_reach"]

REACH_CSV = "reach.csv"
REACH_MD = "reach.md"
COLUMNS = (
    "job",
    "model",
    "schedule",
    "method",
    "seed",
    "target",
    "planned",
    "planned_on",
    "test_references",
    "reached",
    "reference_tokens",
    "generated_tokens",
)


def _repo() -> Path:
    root = repo_root()
    if root is None:
        raise FileNotFoundError(
            "the reach table needs the repository's conf/ (run it from a checkout)"
        )
    return root


@lru_cache(maxsize=4)
def _tokenizer(model: str) -> Any:
    cfg = OmegaConf.to_container(OmegaConf.load(_repo() / "conf" / "model" / f"{model}.yaml"))
    if needs_trained_tokenizer(cfg):
        raise ModelConfigError(
            f"model={model}: its tokenizer is trained on the data (model.source="
            f"{cfg.get('source')}); the reach table counts lengths with a pretrained model's"
        )
    return load_pretrained_tokenizer(cfg)


def _dataset(record: Mapping[str, Any]) -> dict[str, Any]:
    """The loader settings of the record's dataset (its folder found on this machine: the
    checkout's ``paths.shared_dir``, ``../shared``, when the recorded one is elsewhere)."""
    recorded = record.get("dataset") or {}
    keys = {"name", "data_dir", "hub_name", "seed", *dataset_options(str(recorded["name"]))}
    ds = {k: v for k, v in recorded.items() if k in keys}
    if ds.get("data_dir") and not Path(str(ds["data_dir"])).is_dir():
        ds["data_dir"] = str(_repo().parent / "shared" / "data" / str(ds["name"]))
    return ds


@lru_cache(maxsize=16)
def _lengths(
    model: str, dataset: tuple[tuple[str, Any], ...], split: str, limit: int | None = None
) -> tuple[int, ...]:
    settings = dict(dataset)
    name = settings.pop("name")
    pairs = load_split(name, split, limit=limit, **settings)
    return tuple(target_lengths(pairs, _tokenizer(model), task=get_task(name)))


def _cell_reach(row: Mapping[str, Any]) -> dict[str, Any] | None:
    record = read_json_or_none(Path(str(row["record"])))
    if record is None:
        return None
    desc = dict(record["schedule"])
    out: dict[str, Any] = {k: row.get(k) for k in ("job", "model", "schedule", "method", "seed")}
    out.update(
        target=row.get("target_speedup"),
        reached=record["summary"].get("theoretical_speedup"),
        generated_tokens=record["summary"].get("mean_generated_length"),
    )
    dataset = tuple(sorted(_dataset(record).items()))
    model = str(row["model"])
    scored = record.get("dataset") or {}  # the split and inputs the record scored
    test = _lengths(model, dataset, str(scored.get("split") or "test"), scored.get("limit"))
    out["reference_tokens"] = statistics.fmean(test)
    calibration = desc.get("calibration")
    if calibration:
        out["planned"] = calibration.get("theoretical_speedup")
        out["planned_on"] = f"{calibration.get('num_inputs')} {calibration.get('split')} inputs"
        return out
    schedule = build_schedule(described_schedule(desc), int(desc["num_layers"])).static()
    if schedule is None:
        return out  # no static budget to plan with (the lossless mode)
    validation = _lengths(model, dataset, "validation")
    out["planned"] = schedule.theoretical_speedup(validation)
    out["planned_on"] = f"{len(validation)} validation targets"
    out["test_references"] = schedule.theoretical_speedup(test)
    return out


def _finished_cells(results_dir: Path) -> list[dict[str, Any]]:
    """The finished cells' ``cell.json`` (job, labels, record path), in the tables' order."""
    cells = []
    for cell_file in sorted(results_dir.glob(f"*/{CELL_FILE}")):
        cell = read_json_or_none(cell_file) or {}
        if cell.get("status") != "ok" or not cell.get("record"):
            continue
        record = Path(str(cell["record"]))
        record = record if record.is_absolute() else cell_file.parent / record
        cells.append({**cell, "job": cell_file.parent.name, "record": str(record)})
    return sorted(cells, key=row_order)


def reach_rows(results_dir: str | Path) -> list[dict[str, Any]]:
    """One row per finished cell of ``results_dir`` (see the module doc)."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results folder {str(results_dir)!r} does not exist")
    cells = [_cell_reach(c) for c in _finished_cells(results_dir)]
    return [{k: c.get(k) for k in COLUMNS} for c in cells if c is not None]


def _x(v: Any) -> str:
    return "" if v is None else f"{float(v):.2f}x"


def _n(v: Any) -> str:
    return "" if v is None else f"{float(v):.1f}"


def format_reach(rows: Sequence[Mapping[str, Any]]) -> str:
    head = (
        "| job | schedule | method | seed | target | planned | planned on | test refs | reached "
        "| ref. tokens | gen. tokens |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['job']} | {r['schedule']} | {r['method']} | {r['seed']} | {_x(r['target'])} "
        f"| {_x(r['planned'])} | {r['planned_on'] or ''} | {_x(r['test_references'])} "
        f"| {_x(r['reached'])} | {_n(r['reference_tokens'])} | {_n(r['generated_tokens'])} |\n"
        for r in rows
    )
    note = (
        "\nTheoretical speedups (layers per generated token). planned: over every validation "
        "target length (static budgets) or what calibration reached on its validation inputs "
        "(CALM, adaptive); test refs: the static budget over the test references' lengths; "
        "reached: over the generated outputs. Written by `python -m skipdecode.experiments.sweeps.reach`.\n"
    )
    return head + body + note


def write_reach(results_dir: str | Path) -> list[dict[str, Any]]:
    """Write ``reach.csv`` and ``reach.md`` into ``results_dir``; returns the rows."""
    results_dir = Path(results_dir)
    rows = reach_rows(results_dir)
    write_text_atomic(results_dir / REACH_CSV, csv_text(rows, COLUMNS))
    write_text_atomic(results_dir / REACH_MD, format_reach(rows))
    log.info("wrote %s and %s (%d cells)", results_dir / REACH_CSV, REACH_MD, len(rows))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results folders (published or sweep output)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for folder in args.results:
        write_reach(folder)


if __name__ == "__main__":
    main()
