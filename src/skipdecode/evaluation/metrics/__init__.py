"""Quality metrics (BLEU, ROUGE, BERTScore, E2E's suite) with the exact settings recorded.

Every metric takes ``hypotheses: list[str]`` and ``references: list[list[str]]`` (each hypothesis
has its own, possibly variable-length, list of references; a bare string is accepted as a
single reference) and returns a plain ``dict`` that holds the scores *and* the settings needed to
reproduce them, ready to be written into a run record. ``compute_all`` runs the switched-on
metrics from the ``eval.metrics`` config.

``text`` (BLEU, ROUGE), ``bertscore`` (BERTScore), ``bertscore_compat`` (offline model checks
and the transformers-5 fixes for bert-score) and ``e2e`` (the E2E challenge's BLEU, NIST,
METEOR, ROUGE-L and CIDEr, off by default: it needs Java) hold the details.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from .bertscore import bertscore, clear_bertscore_cache
from .bertscore_compat import minilm_hint, resolve_bertscore_model
from .e2e import e2e_suite
from .references import MetricSettingError, normalize_references
from .text import ROUGE_CONVENTIONS, ROUGE_DEFAULT_TYPES, bleu, rouge

__all__ = [
    "MetricSettingError",
    "ROUGE_CONVENTIONS",
    "ROUGE_DEFAULT_TYPES",
    "bleu",
    "rouge",
    "bertscore",
    "e2e_suite",
    "compute_all",
    "check_metric_settings",
    "clear_bertscore_cache",
    "normalize_references",
    "resolve_bertscore_model",
]


_SECTION_KEYS: dict[str, set[str]] = {
    "bleu": {
        "enabled",
        "tokenize",
        "lowercase",
        "smooth_method",
        "smooth_value",
        "effective_order",
        "convention",
    },
    "rouge": {"enabled", "types", "use_stemmer", "summary", "per_example"},
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
    "e2e": {"enabled"},
}
_DEFAULT_ON = {"bleu": True, "rouge": True, "bertscore": False, "e2e": False}


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
    if name == "bertscore" and kwargs.get("model_type") is None:
        raise MetricSettingError(
            f"{prefix}.bertscore.model_type is missing; set it to a local model directory, "
            f"e.g. {minilm_hint(prefix + '.bertscore')}"
        )
    return kwargs


def check_metric_settings(
    settings: Mapping[str, Any] | None, prefix: str
) -> dict[str, dict[str, Any] | None]:
    """Each metric's keyword arguments from ``settings`` (the ``eval.metrics`` node, named
    ``prefix``; None: switched off), every section's keys checked and any other key refused by
    name, so a mistyped metric fails before anything is decoded instead of being left out."""
    settings = _to_plain(settings) if settings is not None else {}
    if not isinstance(settings, Mapping):
        raise MetricSettingError(f"{prefix}={settings!r} is not allowed; allowed: a mapping")
    unknown = set(settings) - set(_SECTION_KEYS)
    if unknown:
        raise MetricSettingError(
            f"{prefix} has unknown metrics {sorted(unknown)}; allowed: {sorted(_SECTION_KEYS)}"
        )
    return {name: _section(settings, name, prefix) for name in _SECTION_KEYS}


def compute_all(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    settings: Mapping[str, Any] | None = None,
    *,
    prefix: str = "eval",
) -> dict[str, Any]:
    """Compute the switched-on metrics from a cfg-like mapping.

    ``settings`` holds optional sections ``bleu``, ``rouge``, ``bertscore``, ``e2e``; each is
    ``true``/``false`` or a mapping of that function's keyword arguments plus ``enabled``. Absent
    sections: BLEU and ROUGE on with defaults, BERTScore and E2E's suite off. Any other key is
    refused (:func:`check_metric_settings`). ``prefix`` names that node in error messages.
    """
    sections = check_metric_settings(settings, prefix)
    hyps, refs = normalize_references(hypotheses, references, where="compute_all")
    out: dict[str, Any] = {"n": len(hyps), "timing_s": {}}
    fns = {"bleu": bleu, "rouge": rouge, "e2e": e2e_suite}
    for name, kwargs in sections.items():
        if kwargs is None:
            continue
        t0 = time.perf_counter()
        if name == "bertscore":
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
