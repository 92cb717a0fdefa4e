"""Read an offline W&B run (``offline-run-*/run-*.wandb``) without the network: its config,
summary, logged history and run attributes.

The file is W&B's LevelDB-style record log: a 7-byte header (``:W&B``, magic, version), then
32 KiB blocks of chunks, each with a 7-byte header (CRC32, length, type: 1 full, 2 first,
3 middle, 4 last) holding serialized ``wandb_internal_pb2.Record`` messages.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7


def _records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    records, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # block trailer padding
            pos += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            records.append(pending)
            pending = b""
    return records


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(run_dir: str | Path) -> dict[str, Any]:
    """``{"config", "summary", "history", "group", "job_type", "name"}`` of one run (history:
    the last value logged under each key; media and tables appear as their ``<key>/...`` fields)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = Path(run_dir).glob("run-*.wandb")
    out: dict[str, Any] = {"config": {}, "summary": {}, "history": {}}
    for raw in _records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "config":
            for item in record.config.update:
                out["config"][_key(item)] = json.loads(item.value_json)
        elif kind == "summary":
            for item in record.summary.update:
                out["summary"][_key(item)] = json.loads(item.value_json)
        elif kind == "history":
            for item in record.history.item:  # the last logged value of every key
                out["history"][_key(item)] = json.loads(item.value_json)
        elif kind == "run":
            run = record.run
            out.update(group=run.run_group, job_type=run.job_type, name=run.display_name)
            for item in record.run.config.update:
                out["config"][_key(item)] = json.loads(item.value_json)
    return out
