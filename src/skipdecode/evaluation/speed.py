"""The speed section of a record, computed from the timings of :mod:`.generation`.

Speed definitions. With ``eval.speed.baseline: full`` every batch is, right after its
generation, decoded again with the ``full`` schedule on the same model, batch, cache and loop,
for exactly as many decode steps as the evaluated schedule ran (EOS stop off), so the two runs do
the same work apart from the layers skipped:

* ``layers_per_token`` and ``theoretical_speedup = L / layers_per_token`` (the paper's
  speedup): a generated token costs the layers of the decode pass that produced it (token 0
  comes from the prefill and is prompt work); averaged over every (decode pass, live row), so
  each token's own depth counts (CALM's exit depth) and finished rows do not.
* ``batch_speedup``: ``L / mean layers the batch ran per decode pass``, unweighted by live
  rows. A pass costs the same however many rows are still live (finished rows still occupy the
  batch), so this, not the theoretical speedup, is what measured wall-clock is compared with.
  The two differ whenever budgets change while rows finish: for static schedules whose budget
  shrinks, later passes (small budgets) have fewer live rows, so the per-token figure is lower;
  for CALM in a batch the pass waits for its slowest token, so the batch figure is lower.
* ``measured_speedup_decode`` (:func:`paired_speedups`, the one definition): each of the
  ``eval.speed.repeats`` interleaved rounds times the schedule and full on every timed batch, so a
  round is one paired draw: full's decode seconds summed over the timed batches / the schedule's.
  The point is the median of the rounds' ratios and the interval their range (``timing``), so
  the point lies inside its interval. ``eval.speed.timed_batches: N`` times only N batches,
  evenly spaced over the length-sorted split (the rest decode once, for quality).
* ``consistency``: measured decode speedup / batch speedup, and the speedup a step's cost split
  predicts (``core.costs``), with ``efficiency`` = measured / predicted.
* ``measured_speedup_e2e``: the same with prefill added to both sides of each round. The prompt
  runs every layer under every schedule, so the prefill is identical work and is measured once:
  per batch the median over every round of both sides' prefill seconds, the same figure on both
  sides (``timing.prefill``). This is lower than the decode ratio; it is the end-to-end latency
  ratio per batch.
* ``long_prompts``: where prompts are long the prefill eats the decode speedup. Over the timed
  batches: ``prefill_share`` (prefill / (prefill + decode) seconds) of the schedule and of the
  baseline, and ``predicted_speedup_e2e``, the end-to-end speedup the layer counts predict: the
  baseline's own prefill and decode seconds, its decode shrunk by the layers the schedule ran
  (``predicted_speedup_decode``: L x passes / layers run, over the same batches), i.e.
  ``(P + D) / (P + D / predicted_speedup_decode)``. Not for speculative schedules (wider passes).
* ``tokens_per_second``: generated tokens (EOS included) / (prefill + decode) seconds of the
  evaluated schedule; ``mean_generated_length``: tokens per input.
* Speculative schedules (lossless): ``layers_per_token`` counts every draft and verify pass's
  layers per row over the tokens they produced (weight reads per token); ``decode_steps`` is the
  token steps the full model needs for the same output, ``passes`` the passes it took;
  ``speculation`` holds acceptance (accepted / drafted), tokens per verify pass and the counts.
  No ``consistency`` entry: its one-token cost model does not describe wider verify passes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.costs import ideal_speedup
from .generation import GenerationRun

__all__ = [
    "own_baseline",
    "reference_speedups",
    "speed_record",
    "ratio",
    "raw_timings",
    "paired_speedups",
    "published_speedups",
    "WITHDRAWN_E2E",
]

#: How ``timing`` says which definition made a record's measured speedups (older records: none).
DEFINITION = "median of paired rounds; prefill pooled"

#: ``speedup_source`` of a record written before raw timings were kept
#: (see :func:`published_speedups`).
WITHDRAWN_E2E = (
    "the decode rounds' ratios it kept; end-to-end not recomputable (raw timings not kept)"
)


def ratio(a: float, b: float) -> float | None:
    return a / b if b and b > 0 and not math.isnan(a) and not math.isnan(b) else None


def speed_record(
    run: GenerationRun, baseline: str | None, first_runs: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """Speed section of the record (definitions in the module docstring); ``first_runs``: the
    references timed (:func:`reference_speedups`) and their untimed first runs' seconds."""
    main, base = run.main, run.base
    speed: dict[str, Any] = dict(main.summary())
    speed.update(baseline=None, measured_speedup_decode=None, measured_speedup_e2e=None)
    speed["raw"] = raw_timings(run)
    if first_runs is not None:
        speed["references"] = reference_speedups(run.times, first_runs)
    if baseline == "self":  # the evaluated schedule is the baseline: ratios are 1 by definition
        speed.update(
            baseline={"schedule": "self"}, measured_speedup_decode=1.0, measured_speedup_e2e=1.0
        )
        share = ratio(main.prefill_s, main.prefill_s + main.decode_s)
        speed["long_prompts"] = {
            "prefill_share": share,
            "prefill_share_baseline": share,
            "predicted_speedup_decode": 1.0,
            "predicted_speedup_e2e": 1.0,
        }
        return speed
    if base is None:
        return speed
    ref = base.summary()
    for key in ("layers_per_token", "theoretical_speedup", "mean_generated_length"):
        ref.pop(key, None)  # the baseline decodes a fixed number of steps; these mean nothing
    speed["baseline"] = {"schedule": baseline, "mode": "same batches, same decode steps", **ref}
    timed = [t for t in run.times if t["base_decode"]]  # batches timed against the baseline

    paired = paired_speedups(timed)
    speed["measured_speedup_decode"] = paired["measured_speedup_decode"]
    speed["measured_speedup_e2e"] = paired["measured_speedup_e2e"]
    speed["timing"] = {
        "timed_batches": len(timed),
        "batches": len(run.times),
        "repeats": run.repeats,
        "order": "interleaved per batch: (schedule, full), (full, schedule), ...",
        "definition": DEFINITION,
        "aggregation": "per round, full's seconds summed over the timed batches / the "
        "schedule's; the point is the median of the rounds' ratios, the spread their range",
        "prefill": "identical work on both sides: per batch the median over every round of "
        "both sides' prefill seconds, added to both",
    }
    for key in ("decode_per_repeat", "decode_spread", "e2e_per_repeat", "e2e_spread"):
        speed["timing"][f"measured_speedup_{key}"] = paired[f"measured_speedup_{key}"]
    speed["timing"]["prefill_seconds_pooled"] = paired["prefill_seconds_pooled"]
    speed["consistency"] = _consistency(run, speed)
    speed["long_prompts"] = _long_prompts(run, timed)
    return speed


def reference_speedups(
    times: Sequence[Mapping[str, Sequence[float]]], first_run_seconds: Mapping[str, float]
) -> dict[str, Any]:
    """Per reference (:mod:`.references`), over the batches it was timed on: the evaluated
    schedule's decode speedup over it by :func:`paired_speedups`' definition, and the
    end-to-end one with each side's own prefill (a reference's prefill is its own code), per
    round; and its untimed first runs' seconds."""
    out: dict[str, Any] = {}
    for name, seconds in first_run_seconds.items():
        timed = [
            {
                "decode": t["decode"],
                "prefill": t["prefill"],
                "base_decode": t[f"{name}_decode"],
                "base_prefill": t[f"{name}_prefill"],
            }
            for t in times
            if t.get(f"{name}_decode")
        ]
        decode = paired_speedups(timed)
        rounds = min((len(t["decode"]) for t in timed), default=0)
        e2e = [
            ratio(*(sum(t[p][r] + t[d][r] for t in timed) for p, d in _SIDES))
            for r in range(rounds)
        ]
        whole = bool(e2e) and all(x is not None for x in e2e)
        out[name] = {
            "timed_batches": len(timed),
            "first_run_seconds": seconds,
            **{k: v for k, v in decode.items() if "decode" in k},
            "measured_speedup_e2e": statistics.median(e2e) if whole else None,
            "measured_speedup_e2e_per_repeat": e2e,
            "decode_seconds": sum(statistics.median(t["base_decode"]) for t in timed),
        }
    return out


#: A reference's own (prefill, decode) keys, then the schedule's, for an end-to-end ratio.
_SIDES = (("base_prefill", "base_decode"), ("prefill", "decode"))


def paired_speedups(timed: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, Any]:
    """The measured speedups of batches timed against the baseline (the module doc's definition).

    ``timed``: per batch, every round's ``decode``, ``prefill``, ``base_decode`` and
    ``base_prefill`` seconds (a record's ``speed.raw`` batches). Round r is one paired draw; the
    prefill, the same work on both sides, is one pooled median per batch."""
    rounds = min((len(t["decode"]) for t in timed), default=0)
    pooled = sum(statistics.median([*t["prefill"], *t["base_prefill"]]) for t in timed)
    decode = [
        ratio(*(sum(t[k][r] for t in timed) for k in ("base_decode", "decode")))
        for r in range(rounds)
    ]
    e2e = [
        ratio(
            pooled + sum(t["base_decode"][r] for t in timed),
            pooled + sum(t["decode"][r] for t in timed),
        )
        for r in range(rounds)
    ]
    out: dict[str, Any] = {}
    for name, draws in (("decode", decode), ("e2e", e2e)):
        whole = bool(draws) and all(x is not None for x in draws)
        out[f"measured_speedup_{name}"] = statistics.median(draws) if whole else None
        out[f"measured_speedup_{name}_per_repeat"] = draws
        out[f"measured_speedup_{name}_spread"] = [min(draws), max(draws)] if whole else None
    out["prefill_seconds_pooled"] = pooled
    return out


def own_baseline(speed: Mapping[str, Any]) -> bool:
    """Whether a record's speed was timed against itself (its speedups are 1 by definition)."""
    return (speed.get("baseline") or {}).get("schedule") == "self"


def published_speedups(speed: Mapping[str, Any]) -> dict[str, Any]:
    """A record's measured speedups as the tables publish them: :func:`paired_speedups` over its
    raw timings. A record written before raw timings were kept publishes the median of the decode
    rounds' ratios it kept, and no end-to-end figure (it timed each side's prefill on its own and
    kept no prefill rounds, so no end-to-end speedup of the one definition follows from it); one
    whose baseline is itself publishes 1 for both, by definition. ``speedup_source`` says which."""
    raw = [b for b in (speed.get("raw") or {}).get("batches", []) if b.get("timed")]
    if raw:
        paired = paired_speedups(raw)
        return {
            "measured_speedup_decode": paired["measured_speedup_decode"],
            "measured_speedup_e2e": paired["measured_speedup_e2e"],
            "speedup_source": "raw timings",
        }
    if own_baseline(speed):
        return {
            "measured_speedup_decode": 1.0,
            "measured_speedup_e2e": 1.0,
            "speedup_source": "its own baseline (1 by definition)",
        }
    rounds = (speed.get("timing") or {}).get("measured_speedup_decode_per_repeat") or []
    out: dict[str, Any] = {"measured_speedup_decode": None, "measured_speedup_e2e": None}
    if rounds and all(isinstance(x, (int, float)) and math.isfinite(x) for x in rounds):
        out["measured_speedup_decode"] = statistics.median(rounds)
        out["speedup_source"] = WITHDRAWN_E2E
    else:
        out["speedup_source"] = None
    return out


def raw_timings(run: GenerationRun) -> dict[str, Any]:
    """Every measurement the speed figures are arithmetic on: per batch (in decoding order), its
    rows, prompt tokens and padded width, the passes and layers its first round ran, and the
    seconds of every round, prefill and decode, of the schedule and (timed batches) of the
    baseline, in the order the rounds ran them (see :func:`generate_all`)."""
    return {
        "unit": "seconds",
        "order": "round r: (schedule, baseline) when r is even, (baseline, schedule) when odd",
        "batches": [
            {"batch": b, "timed": bool(t["base_decode"]), **{k: list(v) for k, v in t.items()}}
            for b, t in enumerate(run.times)
        ],
    }


def _long_prompts(run: GenerationRun, timed: list[dict[str, list[float]]]) -> dict[str, Any]:
    """Prefill shares and the layer counts' end-to-end prediction (module doc)."""

    def total(key: str) -> float:
        return sum(statistics.median(t[key]) for t in timed)

    prefill, decode = total("prefill"), total("decode")
    base_prefill, base_decode = total("base_prefill"), total("base_decode")
    out: dict[str, Any] = {
        "prefill_share": ratio(prefill, prefill + decode),
        "prefill_share_baseline": ratio(base_prefill, base_prefill + base_decode),
        "predicted_speedup_decode": None,
        "predicted_speedup_e2e": None,
    }
    layers = sum(t["layers"][0] for t in timed if t.get("layers"))
    passes = sum(t["passes"][0] for t in timed if t.get("passes"))
    if run.main.speculation is None and layers > 0 and passes > 0:
        predicted = run.main.num_layers * passes / layers
        out["predicted_speedup_decode"] = predicted
        out["predicted_speedup_e2e"] = ratio(
            base_prefill + base_decode, base_prefill + base_decode / predicted
        )
    return out


def _consistency(run: GenerationRun, speed: Mapping[str, Any]) -> dict[str, Any] | None:
    """Measured decode speedup against what the layers the batch ran predict.

    ``measured_over_batch`` = measured decode speedup / batch speedup (1.0 if time were
    proportional to layers run); ``ideal_speedup_decode`` is what the cost split of a step on
    the first batch predicts once the work outside the layers is counted (as the benchmark
    does); ``efficiency`` = measured / ideal.
    """
    measured, batch = speed.get("measured_speedup_decode"), speed.get("batch_speedup")
    if measured is None or not batch or run.cost_split is None or run.base is None:
        return None
    if run.main.speculation is not None:  # more passes than token steps; verify passes are wider
        return None
    first = run.times[0]
    passes = first.get("passes", [0.0])[0]
    if not passes or not first["base_decode"]:
        return None
    full_step = statistics.median(first["base_decode"]) / passes
    layers_run = run.main.num_layers / batch
    ideal = ideal_speedup(full_step, run.cost_split["non_layer_s"], run.main.num_layers, layers_run)
    return {
        "measured_over_batch": measured / batch,
        "ideal_speedup_decode": ideal,
        "efficiency": measured / ideal,
        "full_step_ms_first_batch": 1000 * full_step,
        "non_layer_ms_first_batch": 1000 * run.cost_split["non_layer_s"],
    }
