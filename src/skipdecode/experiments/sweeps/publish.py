"""Publish finished sweeps into the repository: ``results/<name>/``, rebuilt from their records.

``python -m skipdecode.aggregate outputs/sweep/<name> [more sweeps] --publish results/<name>``
copies, per cell, ``cell.json`` (the record path made relative, the cell's folder in the cells
directory kept as ``source``), its ``identity.json`` (the training config it was trained from,
made portable: see :mod:`skipdecode.experiments.sweeps.identity`), the evaluation ``record.json`` and
its ``generations.jsonl`` gzipped (the paired bootstrap and ``samples.md`` need the per-input
outputs; gzip keeps a 630-input cell at ~200 KB instead of ~1 MB) and ``val_loss.csv``
(validation loss by optimizer step, when the cell was trained with the CSV logger), plus the
sweep's ``plan.json``; then runs the aggregation on the copy, so the published ``results.md``,
``cells.md``, CSVs and plots are exactly what the aggregate code makes from the committed records
(a test checks it). One sweep keeps its job numbers; several are merged with their jobs named
``<sweep>-<num>``. The directory is built beside the target and renamed into place: it is
written whole or not at all.

``--restore results/<name>`` does the reverse for a fresh machine: it puts every published
evaluation back into the cells directory, in the folder the cell's identity names on this machine
(``<cells_dir>/<model>__<dataset>__<schedule>__<cell id>/<eval folder>/record.json``, the id
recomputed from the published ``identity.json``; ``source`` as published for cells without one),
so a rerun of the same sweeps reuses those cells instead of training them again (a cell whose
evaluation record exists is done; see :func:`skipdecode.experiments.sweeps.sweep.run_cell`). A reused
cell is not trained again, so restore also puts its published validation curve and training time
in its folder (where the folder lacks them), and the next publication carries them on.
"""

from __future__ import annotations

import csv
import gzip
import shutil
import tempfile
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ...evaluation.load import BUSY_SHARE, timed_busy
from ...io import read_json_or_none, write_bytes_atomic, write_json_atomic, write_text_atomic
from ...provenance import diff_missing
from .account import EARLIER_KEY
from .identity import CELL_FILE, IDENTITY_FILE, identity_hash, portable_identity
from .sources import generations_bytes, pack_folder
from .table import PLAN_FILE, TRAIN_DONE

__all__ = ["PublishError", "evaluation_folder", "publish", "restore", "restored_source"]

RECORD = "record.json"
GENERATIONS = "generations.jsonl"
GZIPPED = GENERATIONS + ".gz"
VAL_CURVE = "val_loss.csv"
#: beside a record put back by ``restore``: published before, so publishing it again is no news
RESTORED = "restored.json"


def publish(
    sweep_dirs: str | Path | Sequence[str | Path],
    target: str | Path,
    rebuild: Callable[[Path], Any],
    update: bool = False,
    allow_dirty: bool = False,
    allow_busy: bool = False,
) -> Path:
    """Copy the sweeps' records into ``target`` and ``rebuild`` the tables there (the
    aggregation: ``aggregate.aggregate``); returns ``target``.

    ``update``: start from what ``target`` already publishes (its jobs, their numbers and its
    plan) and replace a published job only by the sweeps' job of the same cell (model,
    dataset, schedule, seed, evaluated steps; among several such jobs, the one of the same
    training config, ``cell_id``) that finished (``ok``) with a record other than the published one,
    or whose published twin did not finish; a cell not published yet is added under a new
    number, and jobs the sweeps never reached keep their published cells. A rerun that retries
    the failed cells and is cut short then adds what it finished and loses nothing, and a cell
    it only found again keeps the published account of how it was trained.

    A cell evaluated from a checkout with uncommitted changes (its record's
    ``provenance.git.dirty``) is refused, naming the cells, unless ``allow_dirty``; its record
    then carries the diff it ran with (``provenance.git.diff``). Records put back by
    :func:`restore` were published before and are not checked again. A cell whose record was
    timed while other processes used more than :data:`BUSY_SHARE` of the CPUs
    (``speed.load.other_share``) is refused likewise, unless ``allow_busy``; one that names a
    record written outside its run (evaluated again since by another sweep) is always refused."""
    if isinstance(sweep_dirs, (str, Path)):
        sweep_dirs = [sweep_dirs]
    sweeps = [Path(d) for d in sweep_dirs]
    target = Path(target)
    merged = len(sweeps) > 1
    cells = {d: sorted(d.glob(f"*/{CELL_FILE}")) for d in sweeps}
    for d, found in cells.items():
        if not found:
            raise FileNotFoundError(f"{str(d)!r} holds no {CELL_FILE}: nothing to publish")
    _refuse(cells, allow_dirty, allow_busy)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        if update and target.is_dir():
            _update(target, [f for d in sweeps for f in cells[d]], staging)
        else:
            plan: list[dict[str, Any]] = []
            for d in sweeps:
                prefix = f"{d.name}-" if merged else ""
                for cell_file in cells[d]:
                    _copy_cell(cell_file, staging / f"{prefix}{cell_file.parent.name}")
                for job in (read_json_or_none(d / PLAN_FILE) or {}).get("jobs", []):
                    plan.append({**job, "num": f"{prefix}{job.get('num')}"})
            if plan:
                write_json_atomic(staging / PLAN_FILE, {"jobs": plan})
        pack_folder(staging)  # the cells' shared sources once, in the folder (module .sources)
        rebuild(staging)
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            try:
                staging.rename(target)
            except BaseException:  # the published folder back as it was
                old.rename(target)
                raise
            shutil.rmtree(old)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _refuse(cells: dict[Path, list[Path]], allow_dirty: bool, allow_busy: bool) -> None:
    """A :class:`PublishError` for cells from a dirty checkout (without their diff always; with
    it unless ``allow_dirty``) or timed on a busy machine (unless ``allow_busy``)."""
    dirty = [f for found in cells.values() for f in found if _from_dirty_tree(f)]
    no_diff = [f for f in dirty if _from_dirty_tree(f, without_diff=True)]
    if no_diff:
        raise PublishError(
            f"{_named(no_diff)} were evaluated from a checkout with uncommitted changes and "
            "their records hold no diff: nothing says what code they ran; commit and rerun them "
            "(--allow-dirty accepts only records that keep their diff)"
        )
    foreign = [f for found in cells.values() for f in found if _written_by_another_run(f)]
    if foreign:
        raise PublishError(
            f"{_named(foreign)} name records written outside their job's run (the record's "
            "provenance.timestamp_utc is not between the job's started and finished): another "
            "run evaluated those cells since, and their cell.json describes a run whose record "
            "is gone; publish the sweep whose run wrote them"
        )
    busy = [f for found in cells.values() for f in found if _timed_on_a_busy_machine(f)]
    if busy and not allow_busy:
        raise PublishError(
            f"{_named(busy)} were timed while other processes used more than "
            f"{BUSY_SHARE:.0%} of the CPUs (their record's speed.load.other_share): their speeds "
            "are not the code's alone; rerun them on a quiet machine, or publish with "
            "--allow-busy (the records say how busy it was)"
        )
    if dirty and not allow_dirty:
        raise PublishError(
            f"{_named(dirty)} were evaluated from a checkout with uncommitted changes: commit "
            "and rerun them, or publish with --allow-dirty (their records keep the diff they "
            "ran with)"
        )


def _named(cell_files: Sequence[Path]) -> str:
    """``"N cell(s) (sweep/job, ...)"``: the first eight named."""
    names = ", ".join(f"{f.parent.parent.name}/{f.parent.name}" for f in cell_files[:8])
    more = f" and {len(cell_files) - 8} more" if len(cell_files) > 8 else ""
    return f"{len(cell_files)} cell(s) ({names}{more})"


class PublishError(RuntimeError):
    """A sweep that cannot be published as asked."""


def _new_record(cell_file: Path) -> dict[str, Any]:
    """The record of a job's finished cell, unless restore put it back (published before, so
    not checked again); ``{}`` otherwise."""
    cell = read_json_or_none(cell_file) or {}
    record = Path(str(cell.get("record") or ""))
    if cell.get("status") != "ok" or not record.is_file() or (record.parent / RESTORED).is_file():
        return {}
    return read_json_or_none(record) or {}


def _from_dirty_tree(cell_file: Path, without_diff: bool = False) -> bool:
    """Whether the job's finished cell was evaluated from a dirty checkout (and not restored);
    ``without_diff``: one whose record does not hold the diff."""
    prov = _new_record(cell_file).get("provenance") or {}
    if without_diff:
        return diff_missing(prov)
    return bool((prov.get("git") or {}).get("dirty"))


def _written_by_another_run(cell_file: Path) -> bool:
    """Whether the job's finished cell evaluated (not reused) a record that another run wrote
    after: its record's time is outside the job's ``started`` to ``finished`` (local times)."""
    cell = read_json_or_none(cell_file) or {}
    written = (_new_record(cell_file).get("provenance") or {}).get("timestamp_utc")
    if cell.get("eval_reused") or not (written and cell.get("started") and cell.get("finished")):
        return False
    at = datetime.fromisoformat(str(written).replace("Z", "+00:00"))
    started, finished = (
        datetime.fromisoformat(cell[k]).astimezone() for k in ("started", "finished")
    )
    slack = timedelta(seconds=2)  # the cell's times are to the second
    return not started - slack <= at <= finished + slack


def _timed_on_a_busy_machine(cell_file: Path) -> bool:
    """Whether the job's finished cell (not restored) was timed beside other work."""
    return timed_busy((_new_record(cell_file).get("speed") or {}).get("load"))


def _cell_key(cell: dict[str, Any]) -> tuple | None:
    """Which cell a job is, whatever its number in its multirun: its model, dataset, schedule,
    seed and, for a checkpoint evaluated before the end (``sweep.eval_step``), its steps."""
    if cell.get("schedule") is None:
        return None
    return tuple(cell.get(k) for k in ("model", "dataset", "schedule", "seed", "train_steps"))


def _published_twin(cell: dict[str, Any], twins: Sequence[tuple[Path, dict]]) -> Path | None:
    """The published job among ``twins`` (the jobs of ``cell``'s key, each with its
    ``cell.json``) that ``cell`` replaces: the one trained from the same config (``cell_id``;
    among several, the one of the same evaluation folder), else the only one; ``None`` for none.
    Several twins and none of them its training is a :class:`PublishError`, never a guess."""
    same = [(job, twin) for job, twin in twins if twin.get("cell_id") == cell.get("cell_id")]
    if len(same) > 1:  # one training evaluated otherwise: the same evaluation folder
        evaluation = evaluation_folder(cell)
        same = [(job, twin) for job, twin in same if evaluation_folder(twin) == evaluation] or same
    if len(same) == 1 or (not same and len(twins) == 1):
        return (same or twins)[0][0]
    if not twins:
        return None
    names = ", ".join(sorted(job.name for job, _ in (same or twins)))
    raise PublishError(
        f"the new cell {cell.get('schedule')!r} seed {cell.get('seed')} (cell_id "
        f"{cell.get('cell_id')!r}) matches the published jobs {names} by model, dataset, "
        f"schedule, seed and steps, and {'each' if same else 'none'} of them by its training "
        "config: which one it replaces is not decided; publish it into a folder of its own"
    )


def evaluation_folder(cell: dict[str, Any]) -> str:
    """A job's evaluation folder (``eval-<hash>``): the end of a published cell's ``source``,
    else the folder of a sweep cell's record ("" where neither says)."""
    source = str(cell.get("source") or "")
    if "/" in source:
        return source.rsplit("/", 1)[1]
    return Path(str(cell.get("record") or "")).parent.name


def _update(target: Path, cell_files: Sequence[Path], staging: Path) -> None:
    """``staging``: ``target``'s jobs, each replaced by the new job of the same cell when that
    one finished or the published one did not; new cells under numbers after the last."""
    shutil.copytree(target, staging, dirs_exist_ok=True)
    published: dict[tuple, list[tuple[Path, dict]]] = {}
    for job_cell in sorted(staging.glob(f"*/{CELL_FILE}")):
        job = read_json_or_none(job_cell) or {}
        key = _cell_key(job)
        if key is not None:
            published.setdefault(key, []).append((job_cell.parent, job))
    numbers = [int(p.name) for p in staging.iterdir() if p.is_dir() and p.name.isdigit()]
    next_number = max(numbers, default=-1) + 1
    for cell_file in cell_files:
        cell = read_json_or_none(cell_file) or {}
        key = _cell_key(cell)
        job_dir = _published_twin(cell, published.get(key, [])) if key is not None else None
        if job_dir is None:
            job_dir, next_number = staging / str(next_number), next_number + 1
            if key is not None:
                published.setdefault(key, []).append((job_dir, cell))
        else:
            old = (read_json_or_none(job_dir / CELL_FILE) or {}).get("status")
            if old == "ok" and (cell.get("status") != "ok" or _same_record(cell, job_dir)):
                continue
            shutil.rmtree(job_dir)
        _copy_cell(cell_file, job_dir)


def _same_record(cell: dict[str, Any], job_dir: Path) -> bool:
    """Whether the job's record is byte for byte the one ``job_dir`` publishes: a rerun that
    reused the published evaluation, whose cell.json would only replace how the cell was made
    (trained, resumed, when) by how it was found again."""
    record, published = Path(str(cell.get("record") or "")), job_dir / RECORD
    return (
        record.is_file() and published.is_file() and record.read_bytes() == published.read_bytes()
    )


def _copy_cell(cell_file: Path, job_dir: Path) -> None:
    cell: dict[str, Any] = read_json_or_none(cell_file) or {}
    job_dir.mkdir(parents=True)
    record = Path(str(cell.get("record") or ""))
    if cell.get("status") == "ok" and record.is_file():
        shutil.copy2(record, job_dir / RECORD)
        generations = record.parent / GENERATIONS
        if generations.is_file():  # mtime=0: the same records give the same bytes
            (job_dir / GZIPPED).write_bytes(gzip.compress(generations.read_bytes(), mtime=0))
        _copy_val_curve(cell, job_dir)
        cell["record"] = RECORD
        if cell.get("cell_dir"):  # <cell folder>/<eval folder> and its identity, for --restore
            cell_dir = Path(cell["cell_dir"])
            cell["source"] = f"{cell_dir.name}/{record.parent.name}"
            identity = read_json_or_none(cell_dir / IDENTITY_FILE)
            if identity:
                write_json_atomic(job_dir / IDENTITY_FILE, portable_identity(identity))
            if cell.get("train_seconds") is None:  # a reused cell: its folder's summary
                trained = read_json_or_none(cell_dir / TRAIN_DONE) or {}
                cell["train_seconds"] = trained.get("seconds")
    for key in ("cell_dir", "job_dir", "export", EARLIER_KEY):  # machine-local paths
        cell.pop(key, None)
    write_json_atomic(job_dir / CELL_FILE, cell)


def _copy_val_curve(cell: dict[str, Any], job_dir: Path) -> None:
    """The cell's validation loss by step (from the CSV logger's metrics.csv), as ``VAL_CURVE``:
    the evidence that the step budget was enough (the curve has flattened)."""
    if not cell.get("cell_dir"):  # a cell that never reached its folder has no curve
        return
    cell_dir = Path(cell["cell_dir"])
    metrics = cell_dir / "train" / "csv" / "metrics.csv"
    if not metrics.is_file():
        if (cell_dir / VAL_CURVE).is_file():  # restored from published results
            shutil.copy2(cell_dir / VAL_CURVE, job_dir / VAL_CURVE)
        return
    with metrics.open(newline="") as f:
        rows = list(csv.DictReader(f))
    # val_start/*: before the first step; val/*: after step+1 optimizer steps (the CSV logger
    # records the index of the step just finished)
    start = [("0", r["val_start/loss"]) for r in rows if r.get("val_start/loss")][:1]
    points = start + [(str(int(r["step"]) + 1), r["val/loss"]) for r in rows if r.get("val/loss")]
    if points:
        lines = ["step,val_loss"] + [f"{step},{loss}" for step, loss in points]
        (job_dir / VAL_CURVE).write_text("\n".join(lines) + "\n")


def restore(published: str | Path, cells_dir: str | Path) -> list[Path]:
    """Put the published evaluations back into ``cells_dir`` (those not already there);
    returns the record paths written."""
    published, cells_dir = Path(published), Path(cells_dir)
    if not published.is_dir():
        raise FileNotFoundError(f"published results {str(published)!r} do not exist")
    written: list[Path] = []
    for cell_file in sorted(published.glob(f"*/{CELL_FILE}")):
        cell = read_json_or_none(cell_file) or {}
        source, job = cell.get("source"), cell_file.parent
        if cell.get("status") != "ok" or not source or not (job / RECORD).is_file():
            continue
        identity = read_json_or_none(job / IDENTITY_FILE)
        identity = portable_identity(identity) if identity else None
        eval_dir = cells_dir / restored_source(source, identity)
        eval_dir.mkdir(parents=True, exist_ok=True)
        _restore_training_evidence(cell, job, eval_dir.parent)
        if (eval_dir / RECORD).is_file():
            continue
        if identity:
            write_json_atomic(eval_dir.parent / IDENTITY_FILE, identity)
        if (job / GZIPPED).is_file():  # whole again, as the evaluation wrote it
            write_bytes_atomic(eval_dir / GENERATIONS, generations_bytes(job / GZIPPED))
        elif (job / GENERATIONS).is_file():  # published before generations were gzipped
            write_bytes_atomic(eval_dir / GENERATIONS, (job / GENERATIONS).read_bytes())
        write_json_atomic(eval_dir / RESTORED, {"published": str(published), "job": job.name})
        write_text_atomic(eval_dir / RECORD, (job / RECORD).read_text())  # last: the marker
        written.append(eval_dir / RECORD)
    return written


def _restore_training_evidence(cell: dict[str, Any], job: Path, cell_dir: Path) -> None:
    """What a republication needs of a cell's training that a reused cell cannot measure again:
    its validation curve and its training time. Written only where the cell's folder lacks them
    (a cell trained on this machine keeps its own); the training summary says ``restored``, never
    ``ok``, so it is never taken for a trained model to evaluate."""
    if (job / VAL_CURVE).is_file() and not (cell_dir / VAL_CURVE).is_file():  # whole or absent
        write_bytes_atomic(cell_dir / VAL_CURVE, (job / VAL_CURVE).read_bytes())
    if cell.get("train_seconds") is not None and not (cell_dir / TRAIN_DONE).is_file():
        write_json_atomic(
            cell_dir / TRAIN_DONE, {"status": "restored", "seconds": cell["train_seconds"]}
        )


def restored_source(source: str, identity: dict[str, Any] | None) -> str:
    """``<cell folder>/<eval folder>`` under the cells directory: the published ``source`` with
    its cell id recomputed from the cell's portable identity (so an identity published before
    identities were portable lands where a rerun on this machine looks)."""
    if not identity:
        return source
    cell_folder, eval_folder = source.split("/", 1)
    labels = cell_folder.rsplit("__", 1)[0]
    return f"{labels}__{identity_hash(identity)}/{eval_folder}"
