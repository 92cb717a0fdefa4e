"""The evaluation stage: generate for a whole split under a schedule, score quality, time it.

``python -m skipdecode.evaluate checkpoint=PATH [schedule=target_2x] [eval.split=test] ...`` or
``evaluate(cfg)`` with a composed ``conf/evaluate.yaml``. One run writes, into ``output_dir``:

* ``record.json``: quality, speed (:mod:`.generation`), the resolved schedule, data and config,
  provenance (:mod:`.record`);
* ``generations.jsonl``: one line per input (input, references, output).

This module only orchestrates: inputs (:mod:`.inputs`) -> generation and timing
(:mod:`.generation`) -> metrics (:mod:`.metrics`) -> the record (:mod:`.record`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from ..config import ConfigError, config_dir, flag, resolve_config
from ..core.engine import SkipDecoder
from ..core.options import DecodeOptions
from ..data.datasets import get_task, median_target_length
from ..data.examples import check_limit
from ..io import write_json_atomic, write_jsonl_atomic
from ..progress import progress_setting
from ..schedules import Schedule
from .generation import GenerationRun, generate_all
from .inputs import (
    DATASET_KEYS,
    EvaluationError,
    LoadedModel,
    batch_order,
    calibrate,
    dataset_settings,
    draft_vocabulary,
    encode_prompts,
    fit_prompts,
    load_examples,
    load_model,
    prompt_token_counts,
    resolve_schedule,
    validation_lengths,
)
from .load import CpuLoad
from .metrics import compute_all
from .metrics.outputs import output_statistics
from .record import (
    GENERATIONS_FILE,
    RECORD_FILE,
    RECORD_KIND,
    RECORD_VERSION,
    check_metric_assets,
    eval_provenance,
    log_wandb,
    metric_settings,
    per_input_scores,
    summarize,
)
from .references import speed_settings
from .settings import check_eval_settings
from .speed import speed_record

log = logging.getLogger(__name__)

#: Validation inputs whose median target length stands in for the expected length when the
#: model's export does not record it.
EXPECTED_LENGTH_SOURCES = 1000

__all__ = ["EvaluationError", "evaluate", "load_model", "main", "RECORD_FILE", "GENERATIONS_FILE"]


def evaluate(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """Run one evaluation; returns the record (also written to ``output_dir/record.json``).

    ``threads`` (if set) applies to this evaluation only; the previous count is restored;
    ``progress`` (if set) shows or hides the bars of generation, calibration and BERTScore.
    """
    threads = torch.get_num_threads()
    try:
        with progress_setting(cfg.get("progress")):
            return _evaluate(cfg)
    finally:
        torch.set_num_threads(threads)


@dataclass
class _Setup:
    """Everything resolved before the first token is generated."""

    lm: LoadedModel
    decoder: SkipDecoder
    task: Any
    data_settings: dict[str, Any]
    split: str
    examples: list[Any]
    schedule: Schedule
    schedule_origin: str
    expected_length: int
    expected_length_source: str
    context: dict[str, Any]
    calibration: dict[str, Any] | None
    generation: dict[str, Any]
    metric_settings: dict[str, Any]


def _setup(c: Mapping[str, Any], out_dir: Path) -> _Setup:
    ev = c["eval"]
    lm = load_model(c.get("checkpoint"), out_dir, ev.get("device"), ev.get("dtype"))
    data_cfg = c.get("dataset") or {}
    settings = dataset_settings(data_cfg, lm.meta)
    task = get_task(settings["name"])
    split = ev.get("split") or "test"
    metrics = metric_settings(ev.get("metrics") or {}, task)
    check_metric_assets(metrics)  # before the (long) generation
    examples = load_examples(settings, split, check_limit(ev.get("limit"), "eval.limit"))

    tokenizer = lm.tokenizer
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    decoder = SkipDecoder(lm.model, tokenizer, options=DecodeOptions.from_config(ev))
    expected, expected_source = lm.meta.get("expected_length"), "skipdecode.json"
    if not expected:  # never from the split being scored: the held-out validation split
        held_out = load_examples(settings, "validation", EXPECTED_LENGTH_SOURCES)
        expected = median_target_length(held_out, tokenizer, task=task)
        expected_source = f"median target length of {len(held_out)} validation inputs"
    lengths = None
    if (c.get("schedule") or {}).get("lengths") == "validation":  # fitted to them: never test
        trained = lm.meta.get("dataset") or {}
        limit = data_cfg.get("limit_validation")  # else the validation sources training used
        if limit is None and trained.get("name") == settings["name"]:
            limit = trained.get("limit_validation")
        lengths = validation_lengths(settings, tokenizer, task, limit)
    schedule, origin = resolve_schedule(
        c.get("schedule"), lm.meta, decoder.num_layers, int(expected), lengths
    )
    size = getattr(schedule, "draft_vocab_size", None)
    if size and getattr(schedule, "draft_vocab", None) is None:  # lossless mode, subset head
        schedule = schedule.with_draft_vocab(draft_vocabulary(settings, tokenizer, size))

    gen = dict(ev["generation"])
    if gen.get("max_new_tokens") is None:
        gen["max_new_tokens"] = int(task.max_target_tokens)
    context = fit_prompts(settings, data_cfg, lm, decoder, task, int(gen["max_new_tokens"]))
    calibration = None
    if schedule.needs_calibration:
        schedule, calibration = calibrate(
            decoder,
            schedule,
            settings,
            task,
            gen["max_new_tokens"],
            ev.get("calibration") or {},
            gen,
            ev["split"],
        )
    return _Setup(
        lm,
        decoder,
        task,
        settings,
        split,
        examples,
        schedule,
        origin,
        int(expected),
        expected_source,
        context,
        calibration,
        gen,
        metrics,
    )


#: The keys an evaluation reads; anything else is a mistake worth an error (a misspelt or moved
#: key would otherwise be silently ignored).
ALLOWED_KEYS: dict[str, set[str]] = {
    "": set("checkpoint dataset schedule eval seed output_dir wandb progress paths".split()),
    "dataset": set(DATASET_KEYS),
    "eval": {
        "split",
        "limit",
        "threads",
        "generation",
        "device",
        "dtype",
        "cache",
        "compile",
        "compile_graph",
        "calibration",
        "speed",
        "metrics",
    },
}
_MOVED = {"data": "dataset", "threads": "eval.threads"}


def _check_keys(c: Mapping[str, Any]) -> None:
    for section, allowed in ALLOWED_KEYS.items():
        node = c if not section else (c.get(section) or {})
        unknown = sorted(set(node) - allowed)
        if unknown:
            names = [f"{section}.{k}" if section else k for k in unknown]
            hints = [f"{n} (use {_MOVED[n]})" for n in names if n in _MOVED]
            raise EvaluationError(
                f"unused config key(s) {names}"
                + (f"; moved: {', '.join(hints)}" if hints else "")
                + f"; allowed under {section or 'the top level'}: {sorted(allowed)}"
            )


def _evaluate(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    c, out_dir, seed = _start(cfg)
    ev = c["eval"]
    s = _setup(c, out_dir)
    gen = s.generation

    max_source = int(s.data_settings.pop("max_source_tokens", None) or s.task.max_source_tokens)
    prompt_ids, truncated = encode_prompts(
        s.decoder.tokenizer, s.task, [ex.source for ex in s.examples], max_source
    )
    by_length = flag(gen.get("sort_by_length", True), "eval.generation.sort_by_length")
    batches = batch_order(prompt_ids, int(gen["batch_size"]), by_length)

    speed_cfg = ev.get("speed") or {}
    baseline, base_schedule, refs = speed_settings(speed_cfg, s.schedule, s.decoder)

    t0 = time.perf_counter()
    warmup = int(speed_cfg.get("warmup_batches", 1))
    repeats = int(speed_cfg.get("repeats", 1)) if base_schedule or refs else 1
    timed = speed_cfg.get("timed_batches")
    with CpuLoad() as load:  # whether anything else shared the machine while timing
        run = generate_all(
            s.decoder, batches, prompt_ids, s.schedule, base_schedule, gen, seed, warmup, repeats,
            timed, refs,
        )  # fmt: skip
    gen_wall = time.perf_counter() - t0
    references = [list(ex.references) for ex in s.examples]

    t1 = time.perf_counter()
    quality = compute_all(run.texts, references, s.metric_settings, prefix="eval.metrics")
    per_input = per_input_scores(quality)
    metric_wall = time.perf_counter() - t1
    first_runs = refs.first_run_seconds if refs is not None else None
    speed = {**speed_record(run, baseline, first_runs), "load": load.result}

    rows = _rows(s, run, per_input)
    bleu_settings = (quality.get("bleu") or {}).get("settings") or {}
    output_stats = output_statistics(rows, bleu_settings, int(gen["max_new_tokens"]))

    record: dict[str, Any] = {
        "kind": RECORD_KIND,
        "version": RECORD_VERSION,
        "status": "ok",
        "summary": {**summarize(quality, speed), **output_stats},
        "outputs": output_stats,
        "quality": quality,
        "speed": speed,
        "model": _model_record(s),
        "schedule": _schedule_record(s),
        "dataset": {
            **s.data_settings,
            "split": s.split,
            "num_inputs": len(s.examples),
            "num_references": sum(len(r) for r in references),
            "max_source_tokens": max_source,
            "truncated_sources": truncated,
            "prompt_tokens": prompt_token_counts(prompt_ids),
            "context": s.context,
            "limit": ev.get("limit"),
        },
        "generation": {
            **gen,
            **s.decoder.options.as_dict(),  # what ran ("auto": what it chose, and why)
            "baseline": baseline,
            "warmup_batches": warmup,
            "repeats": run.repeats,
            "timed_batches": timed,
        },
        "timing_s": {"generation_wall": gen_wall, "metrics_wall": metric_wall},
        "train_meta": s.lm.meta,
        "config": c,
        "provenance": eval_provenance(seed, str(next(s.lm.model.parameters()).device)),
        "files": {"generations": GENERATIONS_FILE},
    }
    write_jsonl_atomic(out_dir / GENERATIONS_FILE, rows)
    write_json_atomic(out_dir / RECORD_FILE, record)
    log.info("record: %s", out_dir / RECORD_FILE)
    log.info("summary: %s", json.dumps(record["summary"]))
    log_wandb(c.get("wandb") or {}, record, rows, out_dir)
    return record


def _start(cfg: DictConfig | Mapping[str, Any]) -> tuple[dict[str, Any], Path, int]:
    """The resolved config (keys and decode options checked), the output folder (created) and
    the seed; also sets ``eval.threads`` and seeds everything."""
    try:
        c = resolve_config(cfg)
    except ConfigError as e:
        raise EvaluationError(str(e)) from e
    ev = c["eval"]
    _check_keys(c)
    check_eval_settings(ev)  # every model-free setting, before anything loads
    out_dir = Path(c["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    seed = int(c.get("seed", 0))
    if ev.get("threads"):
        torch.set_num_threads(int(ev["threads"]))
    _seed_everything(seed)
    return c, out_dir, seed


def _seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's generators seeded with ``seed`` (what Lightning's
    ``seed_everything`` seeds, without importing Lightning into an evaluation)."""
    if not 0 <= seed < 2**32:
        raise EvaluationError(f"seed: {seed} is not allowed; use an integer in [0, 2**32)")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rows(s: _Setup, run: GenerationRun, per_input: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The lines of ``generations.jsonl``: per input, its prompt, references, output, generated
    tokens, whether it ended at EOS, and its scores."""
    return [
        {
            "index": i,
            "input": ex.source,
            "prompt": s.task.prompt(ex.source),
            "references": list(ex.references),
            "output": run.texts[i],
            "generated_tokens": run.token_counts[i],
            "ended": run.ended[i],
            "scores": {name: values[i] for name, values in per_input.items()},
        }
        for i, ex in enumerate(s.examples)
    ]


def _model_record(s: _Setup) -> dict[str, Any]:
    """The record's ``model`` section: where it came from, its family, size and dtype."""
    model = s.lm.model
    return {
        "path": str(s.lm.path),
        "source": s.lm.source,
        "num_layers": s.decoder.num_layers,
        "family": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype),
    }


def _schedule_record(s: _Setup) -> dict[str, Any]:
    """The record's ``schedule`` section: the schedule, its calibration and origin, and the
    expected length it was resolved for."""
    return {
        **s.schedule.describe(),
        "calibration": s.calibration,
        "origin": s.schedule_origin,
        "expected_length": s.expected_length,
        "expected_length_source": s.expected_length_source,
    }


def main() -> None:
    """Console entry point ``skipdecode-evaluate`` (Hydra, ``conf/evaluate.yaml``)."""
    import hydra

    @hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="evaluate")
    def _run(cfg: DictConfig) -> None:
        record = evaluate(cfg)
        print(json.dumps(record["summary"], indent=2))

    _run()


if __name__ == "__main__":
    main()
