"""Lossless self-speculative decoding, batched: a skip plan drafts, every layer verifies.

A *round*, from each row's last chosen token ``t0`` (not yet in the cache):

1. **draft**: up to ``k`` one-token passes through the draft plan's layers (a static skip plan
   at the batch's earliest generation step), proposing ``d1 .. dk``; with a ``threshold`` a row
   stops proposing once the draft's top-1 probability falls below it (the round's drafting ends
   when no row proposes);
2. **verify**: one pass of ``[t0, d1 .. dm]`` through every layer (``m`` = the most any row
   proposed); each row accepts its longest agreeing prefix of its own proposals and appends the
   full model's token after it (the correction at the first disagreement, or the bonus token
   after a fully accepted draft). Greedy: a proposal is accepted when it is the full model's
   argmax. Sampling: the speculative sampling rule (:func:`accept_sampled`), so every output
   follows the full model's distribution exactly.

Draft plan. The verify pass rewrites every layer of the round's columns, so the draft's layer
sets need to be nested only within a round, not over the whole generation: a draft pass runs
the layers of its step that every earlier pass of the round ran (for a non-increasing plan,
exactly its step's layers; a constant budget is the simplest draft). Any static plan drafts.

Cache. The batch shares one cache column pointer. Draft passes write their columns in the draft
layers only; the verify pass rewinds to the round's first column and writes every layer there,
so an accepted position holds exactly the full model's keys and values. Rows accept different
numbers of tokens: a row's rejected columns become *holes*, hidden from that row by its own key
mask (``visible``) and never read again, and the next round starts after the furthest accepted
position (the columns past it, rejected by every row, are rewritten). Position ids count each
row's own tokens, so holes do not shift them. A finished row stays in the batch (it proposes and
emits nothing, and the columns it writes stay hidden) until at most half the rows are live;
then the finished rows leave (the cache keeps only live rows). A compaction copies every
layer's cache, so a batch of ``B`` compacts at most ``log2(B)`` times, not once per row.

Compiled path. On a decoder built with ``compile=`` (:mod:`~skipdecode.core.compiled`) every
draft and verify pass runs the compiled layer step and head (a draft vocabulary gets its own
compiled head). A draft pass is a one-position step; a verify pass after any proposal computes
``k + 1`` positions (padded after the real ones when fewer were proposed; a plain round's is a
one-position step), so each batch size compiles two layer graphs per layer kind, and again
for each smaller size a compaction reaches. There a compaction keeps the next power of two of
rows (the live ones and finished ones to fill it, :func:`kept_rows`), so those sizes are
buckets shared by every call and batch size, not one per live count.

Turning itself off. With ``auto_off`` a batch first runs one plain round (a verify pass of one
position: one full step) and times it, then speculates; after a few timed rounds, once its
rounds took longer than plain steps would have for the same tokens, the rest of the batch runs
plain rounds (:class:`~skipdecode.core.rounds.Pace`). The decision is the batch's own, by the
clock, so it follows the batch size, the prompt mix and the device; the output is the same. The
decoder remembers it: its next calls of that batch size decode plainly from the start, and every
``RETRY_EVERY``-th call is judged again (:class:`~skipdecode.core.rounds.PaceBook`).

Accounting: every pass reports the layers it ran and for how many rows. ``layers_per_token`` is
the layer passes (draft + verify, per row) per generated token after the first: what decoding
costs when it is bound by reading weights, as small-batch decoding is; the verify pass computes
``m + 1`` positions per layer, so its arithmetic is higher (``verify_positions``). Acceptance
is also counted per draft budget (``by_budget``), and with ``profile`` a round's time is split
into draft layers, draft head (with choosing the token), verify, acceptance and bookkeeping
(``phase_seconds``; on a GPU each split synchronises, so profile only to measure the split).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .clock import now
from .compiled import CompileTime, bucketed_capacity
from .draft_verify import SkipDecoder, speculative_round
from .rounds import (
    Pace,
    PaceBook,
    PhaseClock,
    RoundView,
    Rows,
    SpeculativeResult,
    kept_rows,
    speculative_output,
    timed_prefill,
)
from .sampling import SamplingConfig, select_next
from .stats import SpeculationCounts
from .step import Speculation
from .subset_head import SubsetHead

__all__ = [
    "RoundView",
    "SpeculativeResult",
    "kept_rows",
    "speculative_generate",
    "speculative_output",
]


# ----------------------------------------------------------------------------------------------
# The decode loop
# ----------------------------------------------------------------------------------------------
def speculative_generate(
    decoder: SkipDecoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    spec: Speculation,
    max_new_tokens: int,
    sampling: SamplingConfig,
    eos_ids: Sequence[int],
    pad_id: int,
    stop: bool,
    on_round: Callable[[RoundView], None] | None = None,
    profile: bool = False,
    paces: PaceBook | None = None,
    fallback: str | None = None,
) -> SpeculativeResult:
    """Decode a left-padded batch speculatively (see the module docstring). ``on_round`` sees
    the cache and the live rows after every round (for tests and inspection); ``profile``
    times the parts of every round (``counts.phase_seconds``); ``paces``: the decoder's
    ``auto_off`` verdicts from earlier calls (a fresh judgement per call without it);
    ``fallback``: why the sync-free rounds (:mod:`.device_rounds`) were asked for and not used."""
    B, P = input_ids.shape
    N = max_new_tokens
    device = input_ids.device
    generator = sampling.generator(device)
    eos = torch.tensor(list(eos_ids) if stop and eos_ids else [-1], device=device)
    out = torch.full((B, N), pad_id, dtype=torch.long, device=device)
    result = _new_result(decoder, out, fallback)
    counts, compiled = result.counts, decoder.compiled
    capacity = P + N + spec.k + 1
    cache = decoder.new_cache(B, capacity if compiled is None else bucketed_capacity(capacity))
    compiling = CompileTime(compiled)
    subset = None if spec.draft_vocab is None else SubsetHead(decoder.adapter, spec.draft_vocab)

    logits, t1 = timed_prefill(result, decoder, input_ids, attention_mask, cache)
    if N == 0:
        return result
    clock = PhaseClock(device, counts.phase_seconds if profile else None, compiling.seconds)
    pace = _start_pace(spec, paces, B, counts)
    state = Rows.start(input_ids, attention_mask, select_next(logits, sampling, generator), eos)
    out[:, 0] = state.token
    final_lengths = state.lengths.clone()  # per original row, EOS included
    column = P  # the next cache column every row writes
    limit = decoder.adapter.max_positions - 1
    while True:
        state.finished |= state.lengths >= N
        if bool(state.finished.all()):
            break
        state, remaining, m_max, plain = _prepare_round(
            state, cache, spec, N, column, pace, compiled is not None
        )
        clock.lap("bookkeeping")
        timed = pace is not None and not pace.off  # an off pace needs no clock (a GPU sync)
        compiled_before = compiling.seconds()
        started = now(device) if timed else 0.0
        column = speculative_round(
            decoder, cache, state, spec, m_max, remaining, column, sampling, generator, result,
            limit, subset, clock,
        )  # fmt: skip
        counts.plain_rounds += int(plain)
        # a round that compiled is not timed: its first calls' run time is counted as compiling
        if timed and compiling.seconds() == compiled_before:
            elapsed = now(device) - started
            pace.record(elapsed, float(state.new_counts[remaining > 0].float().mean()))
            counts.turned_off += int(pace.off)
        _write_round(out, state, final_lengths)
        if on_round is not None:
            on_round(RoundView(cache, state.rows, state.visible[:, :column], state.lengths))
    clock.lap("bookkeeping")
    if pace is not None and paces is not None:
        paces.finish(spec, B, pace)
    result.compile_seconds = compiling.seconds()
    result.decode_seconds = now(device) - t1 - result.compile_seconds
    result.lengths = [int(n) for n in final_lengths.tolist()]
    return result


def _new_result(decoder: SkipDecoder, out: torch.Tensor, fallback: str | None) -> SpeculativeResult:
    """A host-driven call's result, before any pass: which path its passes run on, and why not
    the sync-free rounds where they were asked for (``fallback``)."""
    result = SpeculativeResult(out, [], [], SpeculationCounts(), 0.0, 0.0, graph_fallback=fallback)
    compiled = decoder.compiled
    result.compiled = compiled is not None
    if compiled is not None:  # whole-step graphs asked for: the rounds' passes run per layer
        result.graph = "layer" if compiled.graph == "step" else compiled.graph
    return result


def _start_pace(
    spec: Speculation, paces: PaceBook | None, batch: int, counts: SpeculationCounts
) -> Pace | None:
    """The call's pace where ``spec.auto_off`` asks for one: the decoder's verdict for this
    batch size from earlier calls, or a fresh judgement (None: draft every round)."""
    if not spec.auto_off:
        return None
    pace = paces.start(spec, batch) if paces is not None else Pace()
    counts.started_off += int(pace.judged_before)
    return pace


def _prepare_round(
    state: Rows,
    cache: Any,
    spec: Speculation,
    N: int,
    column: int,
    pace: Pace | None,
    compiled: bool,
) -> tuple[Rows, torch.Tensor, int, bool]:
    """Before a round: the live rows (compacted when half or more have finished), the tokens
    each still needs, the round's most draft passes, whether it is a plain step (the pace
    judged drafting not to pay), and the cache and rows reserved for it."""
    live = ~state.finished
    if 2 * int(live.sum()) <= len(live):  # compact rarely: each time copies every layer
        keep = kept_rows(live, bucketed=compiled)
        state = state.select(keep)
        cache.select_rows(keep)
    # finished rows still in the batch need nothing: they propose and emit no token
    remaining = torch.where(state.finished, 0, N - state.lengths)
    plain = pace is not None and pace.plain
    m_max = 0 if plain else min(spec.k, int(remaining.max()) - 1)
    # the compiled path verifies k + 1 positions whatever the round drafts
    cache.reserve(column + (spec.k if compiled else m_max) + 1)
    state.reserve(column + m_max + 1)
    return state, remaining, m_max, plain


def _write_round(out: torch.Tensor, state: Rows, final_lengths: torch.Tensor) -> None:
    """The round's new tokens into the output, at each original row's place."""
    for r, row in enumerate(state.rows.tolist()):
        n_new = int(state.new_counts[r])
        start = int(state.lengths[r]) - n_new
        out[row, start : start + n_new] = state.new_tokens[r, :n_new]
    final_lengths[state.rows] = state.lengths
