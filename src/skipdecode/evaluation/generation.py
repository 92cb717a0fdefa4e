"""Generation over a split and its timing against the ``full`` schedule.

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

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.engine import SkipDecoder
from ..core.stats import GenerationStats
from ..data.collate import left_pad
from ..schedules import Schedule

log = logging.getLogger(__name__)

__all__ = ["SpeedTotals", "generate_all", "speed_record", "ratio"]


@dataclass
class SpeedTotals:
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

    def add(self, stats: GenerationStats) -> None:
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
            "batch_speedup": self.num_layers * self.steps / self.batch_work
            if self.batch_work
            else 1.0,
            "decode_steps": self.steps,
            "tokens_generated": self.tokens,
            "mean_generated_length": self.tokens / n if n else 0.0,
            "prefill_seconds": self.prefill_s,
            "decode_seconds": self.decode_s,
            "total_seconds": total,
            "decode_ms_per_step": 1000.0 * self.decode_s / max(1, self.steps),
            "tokens_per_second": self.tokens / total if total > 0 else float("nan"),
        }


def ratio(a: float, b: float) -> float | None:
    return a / b if b and b > 0 and not math.isnan(a) and not math.isnan(b) else None


def generate_all(
    decoder: SkipDecoder,
    batches: list[list[int]],
    prompt_ids: list[list[int]],
    schedule: Schedule,
    baseline: Schedule | None,
    gen: Mapping[str, Any],
    seed: int,
    warmup_batches: int,
) -> tuple[list[str], SpeedTotals, SpeedTotals | None]:
    """Generate every batch under ``schedule``; after each, time ``baseline`` on the same batch
    for exactly the same number of decode steps (EOS stop off), so both do the same work apart
    from the layers. Returns the texts (input order) and the summed stats of both."""
    pad_id = decoder.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = decoder.tokenizer.eos_token_id
    texts = [""] * len(prompt_ids)
    main, base = (
        SpeedTotals(decoder.num_layers),
        (SpeedTotals(decoder.num_layers) if baseline else None),
    )
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


def speed_record(
    main: SpeedTotals, base: SpeedTotals | None, baseline: str | None
) -> dict[str, Any]:
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
        speed["measured_speedup_decode"] = ratio(ref["decode_seconds"], speed["decode_seconds"])
        speed["measured_speedup_e2e"] = ratio(ref["total_seconds"], speed["total_seconds"])
    return speed
