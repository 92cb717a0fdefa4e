"""BERTScore (bert_score) with multi-reference support, a per-setting scorer cache and the exact
settings recorded.

Per example, P, R and F1 are each maximised over the references *independently* (bert_score's
own multi-reference rule), then averaged over examples. Scale 0-1 (or rescaled with a baseline).
BERTScore never reaches the network: the model is checked first (:mod:`.bertscore_compat`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import Any

from ...config import ConfigError, count
from ...progress import progress_enabled
from .bertscore_compat import minilm_hint, patch_tokenizer_for_bert_score, resolve_bertscore_model
from .references import MetricSettingError, normalize_references, ref_count_summary

__all__ = ["bertscore", "clear_bertscore_cache"]

_SCORER_CACHE: dict[tuple, Any] = {}
_SCORER_CACHE_MAX = 2


def clear_bertscore_cache() -> None:
    """Drop the cached ``bert_score.BERTScorer`` objects (frees their models)."""
    _SCORER_CACHE.clear()


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
    fixes = patch_tokenizer_for_bert_score(scorer._tokenizer)
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

    p = setting_prefix
    hyps, refs = normalize_references(hypotheses, references, where="bertscore")
    device, model_type, num_layers = _checked_settings(
        p, batch_size, device, model_type, num_layers, rescale_with_baseline, lang, baseline_path
    )

    t0 = time.perf_counter()
    try:
        scorer, fixes, was_cached = _get_scorer(
            model_type, num_layers, device, lang, rescale_with_baseline, baseline_path
        )
    except OSError as e:
        raise MetricSettingError(
            f"{p}.model_type={model_type!r} could not be loaded offline ({e}); point it at a "
            f"local model directory, e.g. {minilm_hint(p)}"
        ) from e
    load_s = time.perf_counter() - t0

    scorer._idf = bool(idf)
    scorer._idf_dict = None
    if idf:
        scorer.compute_idf([r for group in refs for r in group])
    t1 = time.perf_counter()
    P, R, F = scorer.score(hyps, refs, batch_size=batch_size, verbose=progress_enabled())
    score_s = time.perf_counter() - t1
    out: dict[str, Any] = {
        "precision": float(P.mean()),
        "recall": float(R.mean()),
        "f1": float(F.mean()),
        "n": len(hyps),
        "scale": "0-1" if not rescale_with_baseline else "rescaled",
        "settings": _settings_record(
            model_type,
            num_layers,
            idf,
            rescale_with_baseline,
            baseline_path,
            lang,
            batch_size,
            device,
            scorer.hash,
            fixes,
            refs,
        ),  # fmt: skip
        "timing_s": {"load": load_s, "score": score_s, "scorer_cached": was_cached},
    }
    if per_example:
        out["per_example"] = {"precision": P.tolist(), "recall": R.tolist(), "f1": F.tolist()}
    for k in ("precision", "recall", "f1"):
        if math.isnan(out[k]):
            out.setdefault("warnings", []).append(f"{k} is NaN (empty hypotheses/references?)")
    return out


def _checked_settings(
    p: str,
    batch_size: Any,
    device: str | None,
    model_type: str,
    num_layers: int | None,
    rescale_with_baseline: bool,
    lang: str | None,
    baseline_path: str | None,
) -> tuple[str, str, int | None]:
    """``(device, model_type, num_layers)`` after every setting is checked (named by ``p``)."""
    import torch

    try:
        count(batch_size, f"{p}.batch_size", 1)
    except ConfigError as e:
        raise MetricSettingError(str(e)) from None
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif str(device).startswith("cuda") and not torch.cuda.is_available():
        raise MetricSettingError(
            f"{p}.device={device!r} but CUDA is not available; allowed here: 'cpu' or null (auto)"
        )
    model_type, num_layers, _ = resolve_bertscore_model(model_type, num_layers, p)
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

    return device, model_type, num_layers


def _settings_record(
    model_type: str,
    num_layers: int | None,
    idf: bool,
    rescale_with_baseline: bool,
    baseline_path: str | None,
    lang: str | None,
    batch_size: int,
    device: str,
    scorer_hash: str,
    fixes: Any,
    refs: Sequence[Sequence[str]],
) -> dict[str, Any]:
    """What a BERTScore record says of how it was computed."""
    import importlib.metadata as md

    import transformers

    return {
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
        "hash": scorer_hash,
        "compat_fixes": fixes,
        "multi_reference": "P, R, F1 each maxed over references per example (bert_score)",
        "aggregation": "mean over examples",
        "references_per_example": ref_count_summary(refs),
    }
