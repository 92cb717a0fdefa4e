"""Generation over a split, and its timing against the ``full`` schedule.

With ``eval.speed.baseline: full`` every batch is, right after its generation, decoded again with
the ``full`` schedule on the same model, batch, cache and loop, for exactly as many decode steps
as the evaluated schedule ran (EOS stop off), so the two runs do the same work apart from the
layers skipped; ``eval.speed.repeats`` interleaved rounds per timed batch. What the speed figures
are and how they are computed from these timings: :mod:`.speed`.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import count, flag
from ..core.costs import step_cost_split
from ..core.engine import SkipDecoder
from ..core.prompts import special_ids
from ..core.stats import GenerationOutput, GenerationStats, SpeculationCounts
from ..data.collate import left_pad
from ..progress import progress
from ..schedules import Schedule
from .references import References

log = logging.getLogger(__name__)

__all__ = ["SpeedTotals", "GenerationRun", "generate_all", "timed_batch_indices"]


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
    passes: int = 0  # forward passes after the prefill (draft + verify when speculative)
    speculation: SpeculationCounts | None = None
    compiled: bool = False  # decode passes ran the compiled path (core.compiled)
    compile_s: float = 0.0  # time its first calls compiled, kept out of decode_s

    def add(self, stats: GenerationStats) -> None:
        tokens = stats.token_count
        self.work += stats.layers_per_token * tokens  # per-token depth (per row for CALM)
        self.rows += tokens
        self.batch_work += sum(stats.budgets)
        self.passes += stats.passes
        if stats.speculation is not None:
            self.speculation = self.speculation or SpeculationCounts()
            self.speculation.add(stats.speculation)
        self.steps += stats.decode_steps
        self.tokens += stats.tokens_generated
        self.prefill_s += stats.prefill_seconds
        self.decode_s += stats.decode_seconds
        self.compiled = self.compiled or stats.compiled
        self.compile_s += stats.compile_seconds
        self.lengths = (self.lengths or []) + list(stats.generated_lengths)

    def summary(self) -> dict[str, Any]:
        lpt = self.work / self.rows if self.rows else float(self.num_layers)
        total = self.prefill_s + self.decode_s
        n = len(self.lengths or [])
        return {
            "layers_per_token": lpt,
            "theoretical_speedup": self.num_layers / lpt,
            # L / layers the batch ran per pass, unweighted: what the clock sees, since finished
            # rows still occupy the batch (see the module docstring)
            "batch_speedup": self.num_layers * self.steps / self.batch_work
            if self.batch_work
            else 1.0,
            "decode_steps": self.steps,
            "passes": self.passes,
            "tokens_generated": self.tokens,
            "mean_generated_length": self.tokens / n if n else 0.0,
            "prefill_seconds": self.prefill_s,
            "decode_seconds": self.decode_s,
            "total_seconds": total,
            "decode_ms_per_step": 1000.0 * self.decode_s / max(1, self.steps),
            "tokens_per_second": self.tokens / total if total > 0 else float("nan"),
            "speculation": None if self.speculation is None else self.speculation.as_dict(),
            "compiled": self.compiled,
            "compile_seconds_outside_decode": self.compile_s,
        }


@dataclass
class GenerationRun:
    """Texts in input order, summed stats of the schedule and of the baseline, and the timing
    of every repeat (seconds per batch)."""

    texts: list[str]
    main: SpeedTotals
    base: SpeedTotals | None
    repeats: int
    # per batch, per repeat: decode and prefill seconds of the schedule and of the baseline
    times: list[dict[str, list[float]]] = field(default_factory=list)
    cost_split: dict[str, float] | None = None  # measured on the first batch (see core.costs)
    # per input: generated tokens (EOS included) and whether the row ended at EOS
    token_counts: list[int] = field(default_factory=list)
    ended: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class _Decoding:
    """The decoder and the settings every decode of one :func:`generate_all` shares."""

    decoder: SkipDecoder
    schedule: Schedule
    baseline: Schedule | None
    gen: Mapping[str, Any]
    sampling: dict[str, Any]  # do_sample, temperature, top_p
    stop: bool  # the schedule's rows stop at EOS (the baseline's never do)
    references: References | None = None  # timed like the baseline (module .references)

    def generate(
        self, ids: Any, mask: Any, schedule: Schedule, n: int, seed: int, stop: bool, texts: bool
    ) -> GenerationOutput:
        """At most ``n`` new tokens for ``ids`` under ``schedule``; ``stop``: at EOS."""
        return self.decoder.generate(
            ids, schedule, n, mask, seed=seed, stop_at_eos=stop, decode_texts=texts, **self.sampling
        )


def generate_all(
    decoder: SkipDecoder,
    batches: list[list[int]],
    prompt_ids: list[list[int]],
    schedule: Schedule,
    baseline: Schedule | None,
    gen: Mapping[str, Any],
    seed: int,
    warmup_batches: int,
    repeats: int = 1,
    timed_batches: int | None = None,
    references: References | None = None,
) -> GenerationRun:
    """Generate every batch under ``schedule`` and time it against ``baseline``.

    Per batch, ``repeats`` rounds alternate the order, (schedule, baseline), (baseline,
    schedule), ..., so neither profits from running second. The baseline decodes exactly as many
    steps as the schedule ran (EOS stop off), so both do the same work apart from the layers.
    Outputs and the layer accounting come from the first round (decoding is seeded, so every
    round produces the same tokens); timings keep every round. With ``timed_batches`` only that
    many batches, evenly spaced over the (length-sorted) list, are timed against the baseline;
    the others decode once. ``references``: timed in every round of a timed batch too, after the
    pair, for as many tokens as the baseline (keys ``<name>_decode``, ``<name>_prefill``).
    """
    count(repeats, "eval.speed.repeats", 1)
    compared = baseline is not None or references is not None  # else every batch, once
    timed = timed_batch_indices(len(batches), timed_batches if compared else None)
    pad_id = decoder.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = decoder.tokenizer.eos_token_id
    texts = [""] * len(prompt_ids)
    main = SpeedTotals(decoder.num_layers)
    base = SpeedTotals(decoder.num_layers) if baseline is not None else None
    kwargs = dict(
        do_sample=flag(gen["do_sample"], "eval.generation.do_sample"),
        temperature=float(gen["temperature"]),
        top_p=float(gen["top_p"]),
    )
    d = _Decoding(decoder, schedule, baseline, gen, kwargs, gen["stop"] == "eos", references)
    for w in range(min(warmup_batches, len(batches))):  # untimed: first-call overheads
        ids, mask = left_pad([prompt_ids[i] for i in batches[w]], pad_id)
        for sched in (schedule, baseline):
            if sched is not None:
                d.generate(ids, mask, sched, min(8, gen["max_new_tokens"]), seed, d.stop, False)
    run = GenerationRun(texts, main, base, repeats)
    run.token_counts, run.ended = [0] * len(prompt_ids), [False] * len(prompt_ids)
    eos_ids = set(special_ids(decoder.model, decoder.tokenizer, None, None)[0])
    for b, index in progress(enumerate(batches), "generating", total=len(batches)):
        ids, mask = left_pad([prompt_ids[i] for i in index], pad_id)
        run.times.append(_decode_batch(d, run, seed + b, index, ids, mask, b in timed, eos_ids))
        if b == min(timed, default=-1) and baseline is not None:
            run.cost_split = step_cost_split(decoder, ids, mask, steps=5)
        log.info("batch %d/%d done", b + 1, len(batches))
    # medians over repeats, summed over batches, for the totals' timing fields
    main.decode_s = sum(statistics.median(t["decode"]) for t in run.times)
    main.prefill_s = sum(statistics.median(t["prefill"]) for t in run.times)
    if base is not None:
        timed_times = [t for t in run.times if t["base_decode"]]
        base.decode_s = sum(statistics.median(t["base_decode"]) for t in timed_times)
        base.prefill_s = sum(statistics.median(t["base_prefill"]) for t in timed_times)
    return run


def _decode_batch(
    d: _Decoding,
    run: GenerationRun,
    seed: int,
    index: list[int],
    ids: Any,
    mask: Any,
    timed: bool,
    eos_ids: set[int],
) -> dict[str, list[float]]:
    """A batch's seconds per round (``run.repeats`` rounds if ``timed``, else one) and, from the
    first, its passes and layers; its outputs and layer accounting go into ``run``."""
    keys = ["decode", "prefill", "base_decode", "base_prefill"]
    for name in d.references.names if d.references is not None else ():
        keys += [f"{name}_decode", f"{name}_prefill"]
    times: dict[str, list[float]] = {key: [] for key in keys}
    # what the batch is: its rows, its prompt tokens (padding left out) and its padded width
    times["rows"] = [float(len(index))]
    times["prompt_tokens"] = [float(mask.sum())]
    times["width"] = [float(ids.shape[1])]
    steps = None
    for r in range(run.repeats if timed else 1):
        order = ("schedule", "baseline") if r % 2 == 0 else ("baseline", "schedule")
        for who in order:
            if who == "schedule":
                out = d.generate(
                    ids, mask, d.schedule, d.gen["max_new_tokens"], seed, d.stop, r == 0
                )
                times["decode"].append(out.stats.decode_seconds)
                times["prefill"].append(out.stats.prefill_seconds)
                if r == 0:
                    run.main.add(out.stats)
                    for i, text in zip(index, out.texts, strict=True):
                        run.texts[i] = text.strip()
                    rows = out.generated_ids.tolist()
                    for i, n, ids_ in zip(index, out.stats.generated_lengths, rows, strict=True):
                        run.token_counts[i] = int(n)
                        run.ended[i] = n > 0 and ids_[n - 1] in eos_ids
                    steps = out.stats.decode_steps + (1 if out.generated_ids.shape[1] else 0)
                    times["passes"] = [float(out.stats.decode_steps)]
                    times["layers"] = [float(sum(out.stats.budgets))]
            elif d.baseline is not None and timed:
                assert steps is not None  # round 0 runs the schedule first
                ref = d.generate(ids, mask, d.baseline, steps, seed, False, False)
                times["base_decode"].append(ref.stats.decode_seconds)
                times["base_prefill"].append(ref.stats.prefill_seconds)
                if r == 0:
                    run.base.add(ref.stats)  # type: ignore[union-attr]
        for name in d.references.names if d.references is not None and timed else ():
            assert steps is not None
            prefill, decode = d.references.time(name, ids, mask, steps)
            times[f"{name}_decode"].append(decode)
            times[f"{name}_prefill"].append(prefill)
    return times


def timed_batch_indices(num_batches: int, timed_batches: int | None) -> set[int]:
    """The batches timed against the baseline: all (``None``), or ``timed_batches`` of them
    evenly spaced from the first to the last (so short and long prompts are both timed)."""
    if timed_batches is None:
        return set(range(num_batches))
    n = min(count(timed_batches, "eval.speed.timed_batches", 1), num_batches)
    if n == 1:
        return {0}
    return {round(i * (num_batches - 1) / (n - 1)) for i in range(n)}
