"""What an evaluation reads: the model to score, its schedule, and the prompts of a split.

``load_model`` accepts an exported directory, a training output directory or a Lightning
``.ckpt``; ``resolve_schedule`` takes the override or the schedule the model was trained with;
``dataset_settings`` / ``load_examples`` / ``encode_prompts`` give the split's inputs exactly as
training encoded them, ``fit_prompts`` checks them against the model's context; ``calibrate`` tunes a schedule that needs it on validation prompts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import flag
from ..core.context import ContextError, check_context, context_record, evaluation_demand
from ..core.engine import SkipDecoder
from ..data.collate import encode_prompt, left_pad
from ..data.datasets import group_by_source, load_split, target_lengths
from ..models.loading import load_pretrained_dir
from ..schedules import Schedule, ScheduleError, build_schedule

log = logging.getLogger(__name__)

__all__ = [
    "EvaluationError",
    "LoadedModel",
    "load_model",
    "resolve_schedule",
    "calibrate",
    "dataset_settings",
    "load_examples",
    "encode_prompts",
    "validation_lengths",
    "batch_order",
    "fit_prompts",
    "prompt_token_counts",
    "DATASET_KEYS",
]

#: The ``dataset`` settings an evaluation reads (anything else is refused by name).
DATASET_KEYS = ("name", "data_dir", "hub_name", "seed", "max_source_tokens", "on_long_context")
DATASET_KEYS += ("options",)


class EvaluationError(ValueError):
    """An evaluation setting or input cannot work; the message names the key and the fix."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: Any
    meta: dict[str, Any]  # skipdecode.json of the export ({} if absent)
    path: Path  # the model directory actually loaded
    source: str  # "export", "train_output" or "checkpoint"


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def load_model(
    checkpoint: str | Path | None,
    work_dir: str | Path | None = None,
    device: str | None = None,
    dtype: str | None = None,
) -> LoadedModel:
    """Load an exported model directory, a training output dir holding ``export/``, or a
    Lightning ``.ckpt`` (exported first into ``work_dir/model``)."""
    if checkpoint in (None, "", "???"):
        raise EvaluationError(
            "checkpoint is not set: give checkpoint=PATH (an exported model directory with "
            "config.json + skipdecode.json, a training output directory, or a .ckpt file)"
        )
    path = Path(str(checkpoint)).expanduser()
    if not path.exists():
        raise EvaluationError(
            f"checkpoint={str(checkpoint)!r}: no such file or directory; give an exported model "
            "directory (<train output>/export), a training output directory or a .ckpt file"
        )
    source = "export"
    if path.is_dir() and not _is_model_dir(path) and _is_model_dir(path / "export"):
        path, source = path / "export", "train_output"
    elif path.is_file():
        if path.suffix != ".ckpt":
            raise EvaluationError(
                f"checkpoint={str(checkpoint)!r} is a file but not a Lightning .ckpt; give a .ckpt "
                "or an exported model directory"
            )
        if work_dir is None:
            raise EvaluationError("a .ckpt checkpoint needs a work_dir to export it into")
        out = Path(work_dir) / "model"
        from ..training.export import export_checkpoint  # Lightning, for a checkpoint only

        export_checkpoint(str(path), str(out))
        path, source = out, "checkpoint"
    elif not _is_model_dir(path):
        raise EvaluationError(
            f"checkpoint={str(checkpoint)!r} is a directory without config.json (and no export/ "
            "inside): not a saved model; give <train output>/export or a .ckpt file"
        )
    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_dtype = None
    if dtype is not None:
        torch_dtype = getattr(torch, str(dtype), None)
        if not isinstance(torch_dtype, torch.dtype):
            raise EvaluationError(
                f"eval.dtype={dtype!r}; allowed: null (as saved), float32, float16, bfloat16"
            )
    model, tokenizer, meta = load_pretrained_dir(path, dtype=torch_dtype, device=device)
    return LoadedModel(model, tokenizer, dict(meta or {}), path, source)


def resolve_schedule(
    override: Mapping[str, Any] | None,
    meta: Mapping[str, Any],
    num_layers: int,
    expected_length: int,
    lengths: Sequence[int] | None = None,
) -> tuple[Schedule, str]:
    if override:
        spec, origin = dict(override), "override"
    elif meta.get("schedule"):
        spec, origin = dict(meta["schedule"]), "checkpoint"
    else:
        raise EvaluationError(
            "the checkpoint records no training schedule (no 'schedule' in skipdecode.json); "
            "choose one with schedule=<name> (e.g. schedule=full or schedule=target_2x)"
        )
    try:
        return build_schedule(spec, num_layers, expected_length, lengths), origin
    except (ScheduleError, KeyError, TypeError) as e:
        raise EvaluationError(
            f"schedule ({origin}: {spec}) is incompatible with the {num_layers}-layer model: {e}"
        ) from e


def calibrate(
    decoder: SkipDecoder,
    schedule: Schedule,
    data_settings: Mapping[str, Any],
    task: Any,
    max_new_tokens: int,
    cfg: Mapping[str, Any],
    generation: Mapping[str, Any],
    scored_split: str,
) -> tuple[Schedule, dict[str, Any]]:
    """Tune a schedule that needs it (CALM's threshold, adaptive's sharpness) on *validation*
    prompts, never on the test prompts being scored, batched as the evaluation batches its
    prompts (``generation``'s batch size and length order: a batch shares its budget; the
    calibration split is refused where it is ``scored_split``);
    returns the tuned schedule and what the tuning found. ``cfg`` (``eval.calibration``) was
    checked by :func:`~skipdecode.evaluation.settings.check_eval_settings`."""
    split = cfg.get("split", "validation")
    if split == scored_split:
        raise EvaluationError(
            f"eval.calibration.split={split!r} is the split being scored (eval.split); allowed: "
            "a held-out split (a schedule tuned on the prompts it is scored on is not a result)"
        )
    examples = load_examples(dict(data_settings), split, cfg.get("limit"))
    max_source = int(data_settings.get("max_source_tokens") or task.max_source_tokens)
    prompts, _ = encode_prompts(decoder.tokenizer, task, [ex.source for ex in examples], max_source)
    pad_id = decoder.tokenizer.pad_token_id
    pad_id = pad_id if pad_id is not None else decoder.tokenizer.eos_token_id
    order = batch_order(
        prompts,
        int(generation["batch_size"]),
        flag(generation.get("sort_by_length", True), "eval.generation.sort_by_length"),
    )
    batches = [left_pad([prompts[i] for i in rows], pad_id) for rows in order]
    tuned, info = schedule.calibrate(
        decoder, batches, int(max_new_tokens), iterations=cfg.get("iterations", 8)
    )
    log.info("%s calibrated on %d %s prompts: %s", schedule.name, len(examples), split, info)
    return tuned, {"split": split, "num_inputs": len(examples), "batches": len(batches), **info}


def batch_order(
    prompts: Sequence[Sequence[int]], batch_size: int, by_length: bool
) -> list[list[int]]:
    """Indices of ``prompts`` in decoding batches of ``batch_size``: by prompt length when
    ``by_length`` (less padding; outputs are put back in input order), else in input order."""
    order = list(range(len(prompts)))
    if by_length:
        order.sort(key=lambda i: len(prompts[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def dataset_settings(data_cfg: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Dataset name and loader settings: the config's, else those the model was trained on."""
    trained = dict(meta.get("dataset") or {})
    name = data_cfg.get("name") or trained.get("name")
    if not name:
        raise EvaluationError(
            "dataset.name is not set and the checkpoint records no dataset; give dataset.name=<name>"
        )
    settings: dict[str, Any] = {}
    if name == trained.get("name"):  # same dataset: reuse its location and options
        for key in ("data_dir", "hub_name", "seed"):
            if trained.get(key) is not None:
                settings[key] = trained[key]
        settings.update(trained.get("options") or {})
        if trained.get("max_source_tokens") is not None:
            settings["max_source_tokens"] = int(trained["max_source_tokens"])
    for key in ("data_dir", "hub_name", "seed", "max_source_tokens"):
        if data_cfg.get(key) is not None:
            settings[key] = data_cfg[key]
    settings.update(data_cfg.get("options") or {})
    return {"name": name, **settings}


def _load_pairs(settings: Mapping[str, Any], split: str, limit: int | None = None) -> list[Any]:
    """One example per (source, reference) pair of ``split`` (:func:`dataset_settings`)."""
    kwargs = {k: v for k, v in settings.items() if k not in ("name", "max_source_tokens")}
    return load_split(settings["name"], split, limit=limit, **kwargs)


def load_examples(settings: Mapping[str, Any], split: str, limit: int | None) -> list[Any]:
    examples = _load_pairs(settings, split, limit)
    grouped = group_by_source(examples)
    if not grouped:
        raise EvaluationError(f"dataset {settings['name']!r} split {split!r} has no inputs")
    return grouped


def validation_lengths(
    settings: Mapping[str, Any], tokenizer: Any, task: Any, limit: int | None = None
) -> list[int]:
    """Every target length (tokens, EOS included) of the validation split (its first ``limit``
    sources: ``dataset.limit_validation``), one per (source, reference) pair as training sees
    them: what ``schedule.lengths: validation`` fits to."""
    pairs = _load_pairs(settings, "validation", limit)
    return target_lengths(pairs, tokenizer, task=task)


def draft_vocabulary(settings: Mapping[str, Any], tokenizer: Any, size: int) -> list[int]:
    """The lossless mode's draft vocabulary: the ``size`` token ids most frequent in the
    *training* targets (EOS first), never in the split being scored."""
    from ..core.subset_head import frequency_ranked_vocab

    train = _load_pairs(settings, "train")
    targets = [tokenizer(ex.target, add_special_tokens=False)["input_ids"] for ex in train]
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return frequency_ranked_vocab(targets, size, always=eos)


def encode_prompts(
    tokenizer: Any, task: Any, sources: Sequence[str], max_source_tokens: int
) -> tuple[list[list[int]], int]:
    """Prompt ids per source, cut to ``max_source_tokens`` exactly as in training (the data
    layer's ``encode_prompt``); also the number of truncated sources."""
    out, cut = [], 0
    for source in sources:
        ids, truncated = encode_prompt(tokenizer, source, task, max_source_tokens)
        out.append(list(ids))
        cut += int(truncated)
    return out, cut


def prompt_token_counts(prompts: Sequence[Sequence[int]]) -> dict[str, float]:
    """Prompt lengths in tokens (BOS and template included) over the evaluated inputs."""
    lengths = [len(p) for p in prompts]
    return {"mean": sum(lengths) / len(lengths), "max": max(lengths), "min": min(lengths)}


def fit_prompts(
    settings: dict[str, Any],
    data_cfg: Mapping[str, Any],
    lm: LoadedModel,
    decoder: SkipDecoder,
    task: Any,
    max_new_tokens: int,
) -> dict[str, Any]:
    """Prompts plus new tokens checked against the model's context before any batch is decoded
    (calibration included): refused (``dataset.on_long_context: error``, the rule the model was
    trained under unless given) or ``settings``' prompt bound lowered to fit (``truncate``);
    returns what the check found, for the record."""
    trained = lm.meta.get("dataset") or {}
    rule = data_cfg.get("on_long_context")
    if rule is None and trained.get("name") == settings["name"]:
        rule = trained.get("on_long_context")
    max_source = int(settings.get("max_source_tokens") or task.max_source_tokens)
    demand = evaluation_demand(max_source, max_new_tokens)
    limit = decoder.adapter.context_limit
    model = (lm.meta.get("model") or {}).get("name") or lm.model.config.model_type
    try:
        fitted = check_context([demand], limit, str(model), rule)[demand.use]
    except ContextError as e:
        raise EvaluationError(str(e)) from e
    settings["max_source_tokens"] = fitted
    return context_record(demand, limit, rule, fitted)
