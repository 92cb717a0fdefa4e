"""Which trained model and which evaluation a sweep cell is: the hashes that name its folders.

A cell's folder in the cells directory is ``<model>__<dataset>__<schedule>__<cell id>``, the
cell id a hash of the training-relevant config (:data:`IDENTITY_KEYS`), and each evaluation of
it lives in ``eval-<hash of the eval config>``. A rerun of the same sweep, on any machine or in
any checkout, must land on the same folders, or it trains again what is already trained (and
``--restore`` of published results could never be reused). So the identity holds nothing
machine-local: a dataset read from ``data_dir`` is identified by the files in it (a fingerprint
of their names and bytes), not by where they happen to lie.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core.options import DEFAULTS
from ...schedules.registry import calibrates

__all__ = [
    "CELL_FILE",
    "IDENTITY_KEYS",
    "IDENTITY_FILE",
    "cell_identity",
    "eval_identity",
    "calibrates",
    "identity_hash",
    "portable_identity",
    "directory_fingerprint",
    "SIZES_KEY",
    "without_sizes",
]

#: Config keys that define what is trained (everything else, e.g. paths, loggers, eval, does not).
IDENTITY_KEYS: tuple[str, ...] = ("model", "dataset", "schedule", "trainer", "optimizer")
IDENTITY_KEYS += ("scheduler", "loader", "module", "seed", "ckpt_path")
#: The identity config, written beside the trained model and published with the cell.
IDENTITY_FILE = "identity.json"
#: The file in which a sweep job names its cell (in the sweep's job folder and, published, in the
#: job's results folder).
CELL_FILE = "cell.json"
_FINGERPRINT_PREFIX = "files-sha256:"
#: identity.json also records what the model is in numbers (``models.loading.model_sizes``: its
#: real hidden size, vocabulary, parameter count); a record, not part of the cell id (the model
#: config already decides them).
SIZES_KEY = "model_sizes"


#: Schedule settings added after cells were published: at these values they are left out of
#: the identity, so a published cell keeps its id (any other value is a new cell).
_LATER_SCHEDULE_DEFAULTS: dict[str, tuple[Any, ...]] = {"lengths": ("median", None)}
#: Trainer settings added after cells were published, likewise. ``use_distributed_sampler``
#: false: the datamodule shares the data between devices itself (training.resumable.RankShare);
#: every published cell trained on one device, where it changes nothing.
_LATER_TRAINER_DEFAULTS: dict[str, tuple[Any, ...]] = {"use_distributed_sampler": (False,)}
#: Dataset settings added after cells were published, likewise (``on_long_context: error``
#: refuses what would not fit, so it trains nothing another way).
_LATER_DATASET_DEFAULTS: dict[str, tuple[Any, ...]] = {"on_long_context": ("error", None)}


def cell_identity(cfg: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(id, identity config)``: a 12-hex-digit hash of the training-relevant config."""
    ident = portable_identity({k: cfg.get(k) for k in IDENTITY_KEYS if k in cfg})
    for group, later in (
        ("schedule", _LATER_SCHEDULE_DEFAULTS),
        ("trainer", _LATER_TRAINER_DEFAULTS),
        ("dataset", _LATER_DATASET_DEFAULTS),
    ):
        node = ident.get(group)
        if isinstance(node, Mapping):
            ident[group] = {k: v for k, v in node.items() if not (k in later and v in later[k])}
    return identity_hash(ident), ident


def identity_hash(ident: Mapping[str, Any]) -> str:
    """The cell id of an identity config (:func:`portable_identity` of it)."""
    return _config_hash(without_sizes(ident), 12)


def without_sizes(ident: Mapping[str, Any]) -> dict[str, Any]:
    """``ident`` without the recorded model sizes (:data:`SIZES_KEY`)."""
    return {k: v for k, v in ident.items() if k != SIZES_KEY}


#: Evaluation settings added after results were published (dotted paths in the ``eval`` group):
#: at these values they are left out of the hash, so a published evaluation keeps its id (any
#: other value is a new evaluation).
_LATER_EVAL_DEFAULTS: dict[str, Any] = {
    "compile": DEFAULTS.compile, "compile_graph": DEFAULTS.compile_graph, "metrics.e2e": False,
    "speed.references": [],
}  # fmt: skip


#: The calibration settings every evaluation was published with before ``eval.calibration.limit``
#: defaulted to the whole validation split. A schedule that calibrates nothing (anything but
#: CALM without a threshold, adaptive SkipDecode without a sharpness, or the lossless mode with
#: ``threshold: calibrate``) is evaluated the same under any calibration settings, so its
#: evaluation hashes them as these and keeps its id.
_PUBLISHED_CALIBRATION: dict[str, Any] = {"split": "validation", "limit": 32, "iterations": 8}


def eval_identity(ev: Mapping[str, Any], schedule: Mapping[str, Any] | None = None) -> str:
    """The 8-hex-digit hash of an evaluation config (the ``eval`` group).

    With the evaluated ``schedule`` config given, the calibration settings count only for a
    schedule that :func:`calibrates`."""
    ev = dict(ev)
    for key, value in DEFAULTS.as_dict().items():  # a null decode option is its default
        if key in ev and ev[key] is None:
            ev[key] = value
    if schedule is not None and not calibrates(schedule) and "calibration" in ev:
        ev["calibration"] = dict(_PUBLISHED_CALIBRATION)
    return _config_hash({"eval": _without_later_defaults(ev, "")}, 8)


def _without_later_defaults(node: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    kept = {}
    for k, v in node.items():
        path = prefix + str(k)
        if path in _LATER_EVAL_DEFAULTS and v == _LATER_EVAL_DEFAULTS[path]:
            continue
        kept[k] = _without_later_defaults(v, path + ".") if isinstance(v, Mapping) else v
    return kept


def _config_hash(config: Mapping[str, Any], digits: int) -> str:
    blob = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:digits]


def portable_identity(ident: Mapping[str, Any]) -> dict[str, Any]:
    """``ident`` with ``dataset.data_dir`` (a path on this machine) replaced by the fingerprint
    of the files in that folder; unchanged when there is no such folder here (a hub dataset, or
    an identity already made portable)."""
    dataset = ident.get("dataset")
    data_dir = dataset.get("data_dir") if isinstance(dataset, Mapping) else None
    if not isinstance(data_dir, str) or data_dir.startswith(_FINGERPRINT_PREFIX):
        return dict(ident)
    if not Path(data_dir).is_dir():
        return dict(ident)
    return {**ident, "dataset": {**dataset, "data_dir": directory_fingerprint(data_dir)}}


def directory_fingerprint(folder: str | Path) -> str:
    """``files-sha256:<hex>`` over every file under ``folder`` (its relative name and bytes), in
    name order: the same files give the same fingerprint wherever the folder is."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(_file_sha256(path))
    return _FINGERPRINT_PREFIX + digest.hexdigest()[:16]


def _file_sha256(path: Path, chunk_bytes: int = 1 << 20) -> bytes:
    """The sha256 of a file's bytes, read a chunk at a time (a large data file is never held
    in memory whole)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.digest()
