"""A cell's id names what was trained, not where: the same config and the same data files give
the same id in any checkout, so published cells are found again after ``--restore``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from exports import make_fake_sweep

from skipdecode.experiments.sweeps.aggregate import aggregate
from skipdecode.experiments.sweeps.identity import (
    IDENTITY_FILE,
    calibrates,
    cell_identity,
    directory_fingerprint,
    eval_identity,
    identity_hash,
)
from skipdecode.experiments.sweeps.publish import publish, restore


def _data(folder: Path, reference: str = "Aromi is a pub.") -> Path:
    folder.mkdir(parents=True)
    (folder / "devset.csv").write_text(f'mr,ref\n"name[Aromi]","{reference}"\n')
    (folder / "testset_w_refs.csv").write_text('mr,ref\n"name[Zizzi]","Zizzi is a pub."\n')
    return folder


def _cfg(data_dir: Path) -> dict:
    return {
        "model": {"name": "tiny"},
        "dataset": {"name": "e2e", "data_dir": str(data_dir), "seed": 0},
        "schedule": {"name": "full"},
        "trainer": {"max_steps": 10},
        "seed": 1,
        "paths": {"shared_dir": str(data_dir.parent)},
    }


def test_the_cell_id_follows_the_data_files_not_their_folder(tmp_path):
    here = _data(tmp_path / "checkout_a" / "shared" / "e2e")
    there = tmp_path / "elsewhere" / "data" / "e2e"
    shutil.copytree(here, there)
    changed = _data(tmp_path / "changed" / "e2e", reference="Aromi is a coffee shop.")

    cell_id, ident = cell_identity(_cfg(here))
    assert cell_id == cell_identity(_cfg(there))[0]
    assert cell_id != cell_identity(_cfg(changed))[0]
    assert str(tmp_path) not in json.dumps(ident)  # nothing machine-local in the identity
    assert ident["dataset"]["data_dir"] == directory_fingerprint(there)
    # a renamed file is other data, even with the same bytes
    (there / "devset.csv").rename(there / "train.csv")
    assert cell_id != cell_identity(_cfg(there))[0]


def test_a_file_larger_than_a_read_chunk_is_hashed_whole(tmp_path):
    """Files are hashed a chunk at a time; the fingerprint is still that of all their bytes
    (the published identities were made by hashing each file whole)."""
    import hashlib

    folder = tmp_path / "data"
    folder.mkdir()
    blob = bytes(range(256)) * (5 * 4096 + 3)  # ~5 MiB, not a multiple of the chunk
    (folder / "big.bin").write_bytes(blob)
    whole = hashlib.sha256(b"big.bin\0" + hashlib.sha256(blob).digest()).hexdigest()[:16]
    assert directory_fingerprint(folder) == "files-sha256:" + whole
    (folder / "big.bin").write_bytes(blob[:-1] + b"x")  # the last byte, in the last chunk
    assert directory_fingerprint(folder) != "files-sha256:" + whole


def test_a_dataset_without_local_files_keeps_its_config(tmp_path):
    cfg = _cfg(tmp_path / "absent")
    cfg["dataset"]["data_dir"] = None
    _, ident = cell_identity(cfg)
    assert ident["dataset"]["data_dir"] is None


def test_restore_puts_a_cell_where_a_rerun_elsewhere_looks_for_it(tmp_path):
    """A cell trained in one checkout (its identity written with that checkout's path, as
    identities were before they were made portable) is published, then restored in another
    checkout whose data folder is a copy at another path: the restored evaluation lands in the
    folder named by the id that checkout computes."""
    data = _data(tmp_path / "checkout_a" / "shared" / "e2e")
    sweep = make_fake_sweep(tmp_path / "sweep")
    cell_dir = tmp_path / "checkout_a" / "cells" / "tiny__e2e__full__oldpathid0"
    cell_dir.mkdir(parents=True)
    old_ident = {k: v for k, v in _cfg(data).items() if k != "paths"}
    (cell_dir / IDENTITY_FILE).write_text(json.dumps(old_ident))  # path form
    cell_file = sweep / "0" / "cell.json"
    cell = json.loads(cell_file.read_text())
    record = Path(cell["record"])
    shutil.move(record.parent, cell_dir / "eval-1234")
    cell.update(cell_dir=str(cell_dir), record=str(cell_dir / "eval-1234" / "record.json"))
    cell_file.write_text(json.dumps(cell))

    published = publish(sweep, tmp_path / "results" / "run", aggregate)
    portable = json.loads((published / "0" / IDENTITY_FILE).read_text())
    assert str(tmp_path) not in json.dumps(portable)

    other = tmp_path / "checkout_b" / "shared" / "e2e"
    shutil.copytree(data, other)
    shutil.rmtree(tmp_path / "checkout_a")
    cells = tmp_path / "checkout_b" / "cells"
    (written,) = restore(published, cells)
    rerun_id = cell_identity(_cfg(other))[0]
    assert written == cells / f"tiny__e2e__full__{rerun_id}" / "eval-1234" / "record.json"
    assert identity_hash(portable) == rerun_id
    assert json.loads((written.parents[1] / IDENTITY_FILE).read_text()) == portable


def test_identity_records_the_real_model_sizes_outside_the_cell_id(tmp_path):
    """identity.json says what the model is in numbers (read from its files for a pretrained
    model, not the placeholder ``model.arch``); the cell id does not depend on that record."""
    from skipdecode.experiments.sweeps.identity import SIZES_KEY, without_sizes
    from skipdecode.models.loading import model_sizes

    cell_id, ident = cell_identity(_cfg(_data(tmp_path / "e2e")))
    recorded = {**ident, SIZES_KEY: {"hidden_size": 576}}
    assert identity_hash(recorded) == cell_id and without_sizes(recorded) == ident
    random = {"source": "random", "arch": {"model_type": "opt", "hidden_size": 64}}
    assert model_sizes({**random, "tokenizer": {"vocab_size": 512}}) == {
        "model_type": "opt",
        "hidden_size": 64,
        "vocab_size": 512,
    }
    local = tmp_path / "model"
    local.mkdir()
    (local / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": 576, "vocab_size": 49152, "x": 1})
    )
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(local / "model.safetensors"))
    sizes = model_sizes({"source": "local", "pretrained": str(local), "arch": {"hidden_size": 32}})
    assert sizes == {
        "model_type": "llama",
        "hidden_size": 576,
        "vocab_size": 49152,
        "num_parameters": 17,
    }


def test_a_later_schedule_setting_at_its_default_keeps_the_published_cell_id(tmp_path):
    cfg = _cfg(_data(tmp_path / "e2e"))
    cfg["schedule"] = {"name": "target", "target_speedup": 2}
    published = cell_identity(cfg)
    for default in ("median", None):
        assert (
            cell_identity({**cfg, "schedule": {**cfg["schedule"], "lengths": default}}) == published
        )
    fitted = cell_identity({**cfg, "schedule": {**cfg["schedule"], "lengths": "validation"}})
    assert fitted[0] != published[0] and fitted[1]["schedule"]["lengths"] == "validation"


def test_calibration_settings_name_the_evaluation_only_of_a_schedule_that_calibrates():
    ev = {"split": "test", "calibration": {"split": "validation", "limit": 32, "iterations": 8}}
    every = {**ev, "calibration": {**ev["calibration"], "limit": None}}
    not_calibrated = (
        {"name": "full"},
        {"name": "calm", "threshold": 0.9, "target_speedup": 2},
        {"name": "adaptive"},  # no target: the builder's default sharpness
        {"name": "target", "target_speedup": 2},
        {"name": "speculative", "threshold": None},
        {"name": "speculative", "threshold": 0.5},
    )
    for schedule in not_calibrated:
        assert not calibrates(schedule)
        assert eval_identity(every, schedule) == eval_identity(ev, schedule) == eval_identity(ev)
    calibrated = (
        {"name": "calm", "threshold": None, "target_speedup": 2},
        {"name": "adaptive", "target_speedup": 4},
        {"name": "speculative", "threshold": "calibrate"},
    )
    for schedule in calibrated:
        assert calibrates(schedule)
        assert eval_identity(ev, schedule) == eval_identity(ev)  # as published
        assert eval_identity(every, schedule) != eval_identity(ev, schedule)


def test_no_references_keeps_a_published_evaluation_id():
    published = {"split": "test", "speed": {"baseline": "full", "repeats": 3}}
    with_none = {"split": "test", "speed": {"baseline": "full", "repeats": 3, "references": []}}
    assert eval_identity(with_none) == eval_identity(published)
    timed = {**with_none, "speed": {**with_none["speed"], "references": ["loop"]}}
    assert eval_identity(timed) != eval_identity(published)
