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
for each smaller size a compaction reaches.

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
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from .acceptance import accept_greedy, accept_sampled
from .adapters import DecoderAdapter
from .cache import KVCache
from .clock import now
from .compiled import CompiledLayers, CompileTime, bucketed_capacity
from .masks import block_attention_mask
from .rounds import (
    Pace,
    PaceBook,
    PhaseClock,
    RoundView,
    Rows,
    SpeculativeResult,
    speculative_output,
)
from .sampling import SamplingConfig, probabilities, select_next
from .stats import SpeculationCounts
from .step import Speculation
from .subset_head import SubsetHead


class SkipDecoder(Protocol):
    """What the loop needs from the engine (:class:`~skipdecode.core.engine.SkipDecoder`)."""

    adapter: DecoderAdapter
    num_layers: int
    compiled: CompiledLayers | None

    def new_cache(self, batch: int, capacity: int) -> KVCache: ...

    def prefill(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: KVCache,
        maskless: bool = False,
    ) -> torch.Tensor: ...


__all__ = ["RoundView", "SpeculativeResult", "speculative_generate", "speculative_output"]


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
) -> SpeculativeResult:
    """Decode a left-padded batch speculatively (see the module docstring). ``on_round`` sees
    the cache and the live rows after every round (for tests and inspection); ``profile``
    times the parts of every round (``counts.phase_seconds``); ``paces``: the decoder's
    ``auto_off`` verdicts from earlier calls (a fresh judgement per call without it)."""
    B, P = input_ids.shape
    N = max_new_tokens
    device = input_ids.device
    generator = sampling.generator(device)
    eos = torch.tensor(list(eos_ids) if stop and eos_ids else [-1], device=device)
    out = torch.full((B, N), pad_id, dtype=torch.long, device=device)
    counts = SpeculationCounts()
    result = SpeculativeResult(out, [], [], counts, 0.0, 0.0)
    compiled = decoder.compiled
    capacity = P + N + spec.k + 1
    cache = decoder.new_cache(B, capacity if compiled is None else bucketed_capacity(capacity))
    compiling = CompileTime(compiled)
    result.compiled = compiled is not None
    subset = None if spec.draft_vocab is None else SubsetHead(decoder.adapter, spec.draft_vocab)

    t0 = now(device)
    logits = decoder.prefill(input_ids, attention_mask, cache, maskless=False)
    t1 = now(device)
    result.prefill_seconds = t1 - t0
    if N == 0:
        result.lengths = [0] * B
        return result
    clock = PhaseClock(device, counts.phase_seconds if profile else None, compiling.seconds)
    pace = None
    if spec.auto_off:
        pace = paces.start(spec, B) if paces is not None else Pace()
        counts.started_off += int(pace.judged_before)
    state = Rows.start(input_ids, attention_mask, select_next(logits, sampling, generator), eos)
    out[:, 0] = state.token
    final_lengths = state.lengths.clone()  # per original row, EOS included
    column = P  # the next cache column every row writes
    limit = decoder.adapter.max_positions - 1
    while True:
        state.finished |= state.lengths >= N
        if bool(state.finished.all()):
            break
        live = ~state.finished
        if 2 * int(live.sum()) <= len(live):  # compact rarely: each time copies every layer
            keep = live.nonzero().squeeze(1)
            state = state.select(keep)
            cache.select_rows(keep)
        # finished rows still in the batch need nothing: they propose and emit no token
        remaining = torch.where(state.finished, 0, N - state.lengths)
        plain = pace is not None and pace.plain
        m_max = 0 if plain else min(spec.k, int(remaining.max()) - 1)
        cache.reserve(column + (m_max if compiled is None else spec.k) + 1)
        state.reserve(column + m_max + 1)
        clock.lap("bookkeeping")
        timed = pace is not None and not pace.off  # an off pace needs no clock (a GPU sync)
        compiled_before = compiling.seconds()
        started = now(device) if timed else 0.0
        column = _round(
            decoder,
            cache,
            state,
            spec,
            m_max,
            remaining,
            column,
            sampling,
            generator,
            result,
            limit,
            subset,
            clock,
        )
        counts.plain_rounds += int(plain)
        # a round that compiled is not timed: its first calls' run time is counted as compiling
        if timed and compiling.seconds() == compiled_before:
            elapsed = now(device) - started
            pace.record(elapsed, float(state.new_counts[remaining > 0].float().mean()))
            counts.turned_off += int(pace.off)
        for r, row in enumerate(state.rows.tolist()):  # this round's tokens into the output
            n_new = int(state.new_counts[r])
            start = int(state.lengths[r]) - n_new
            out[row, start : start + n_new] = state.new_tokens[r, :n_new]
        final_lengths[state.rows] = state.lengths
        if on_round is not None:
            on_round(RoundView(cache, state.rows, state.visible[:, :column], state.lengths))
    clock.lap("bookkeeping")
    if pace is not None and paces is not None:
        paces.finish(spec, B, pace)
    result.compile_seconds = compiling.seconds()
    result.decode_seconds = now(device) - t1 - result.compile_seconds
    result.lengths = [int(n) for n in final_lengths.tolist()]
    return result


def _round(
    decoder: SkipDecoder,
    cache: Any,
    state: Rows,
    spec: Speculation,
    m_max: int,
    remaining: torch.Tensor,
    column: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    result: SpeculativeResult,
    limit: int,
    subset: SubsetHead | None = None,
    clock: PhaseClock | None = None,
) -> int:
    """One draft-and-verify round over the live rows; returns the next round's first column.
    ``subset``: the draft passes score only these tokens (the verify pass scores all)."""
    clock = clock or PhaseClock(state.token.device, None)
    n = len(state.rows)
    device = state.token.device
    L = decoder.num_layers
    g_min = int(state.lengths.min()) - 1  # generation step of the least advanced row's input
    pos0 = state.valid + state.lengths - 1  # (n,) position id of each row's input token
    state.visible[:, column : column + m_max + 1] = True  # this round's columns, causally below
    # -- draft ------------------------------------------------------------------------------
    drafts: list[torch.Tensor] = []
    q_dists: list[torch.Tensor] = []
    proposing = remaining > 1  # a row needs proposals only if it still needs 2+ tokens
    proposed = torch.zeros(n, dtype=torch.long, device=device)
    current = state.token
    ran: set[int] | None = None  # layers every earlier draft pass of this round ran
    proposers: list[tuple[int, torch.Tensor]] = []  # (budget, rows proposing) per draft pass
    for j in range(m_max):
        if not bool(proposing.any()):
            break
        layers = spec.draft.active_layers(g_min + j)
        if ran is not None:
            layers = tuple(i for i in layers if i in ran)
        ran = set(layers)
        logits = _pass(
            decoder, cache, state, current[:, None], pos0[:, None] + j, column + j, layers, limit,
            subset, clock, "draft",
        )  # fmt: skip
        proposers.append((len(layers), proposing.clone()))
        result.budgets.append(len(layers))
        result.live_rows.append(n)
        result.verify_passes.append(False)
        result.counts.draft_passes += 1
        logits = logits[:, 0]  # (n, V), or (n, N) over the draft vocabulary
        if sampling.do_sample:
            q = probabilities(logits, sampling)
            d = torch.multinomial(q, 1, generator=generator).squeeze(-1)
            confidence = q.max(-1).values
            q_dists.append(q if subset is None else subset.scatter(q))
        else:
            d = logits.argmax(-1)
            confidence = logits.float().softmax(-1).max(-1).values if spec.threshold else None
        if subset is not None:
            d = subset.tokens(d)
        proposed += proposing.long()  # this pass's token is proposed: its pass was paid
        # a row stops after proposing EOS, a token drafted with less confidence than the
        # threshold (kept: the verify pass may accept it), or the tokens it still needs
        proposing = proposing & ~torch.isin(d, state.eos) & (proposed < remaining - 1)
        if spec.threshold is not None and confidence is not None:
            proposing = proposing & (confidence >= spec.threshold)
        drafts.append(d)
        current = d
        clock.lap("draft_head")
    m = int(proposed.max()) if drafts else 0
    block = torch.stack(drafts[:m], 1) if m else state.token.new_zeros(n, 0)
    # -- verify -----------------------------------------------------------------------------
    cache.rewind(column)
    inputs = torch.cat([state.token[:, None], block], 1)  # (n, m + 1)
    if decoder.compiled is not None and 0 < m < spec.k:
        # the compiled path verifies k + 1 positions whatever m is (one graph per batch and
        # length); the extra inputs come after the real ones, which never attend to them, and
        # their columns lie past every row's accepted ones (holes, rewritten next round)
        inputs = torch.cat([inputs, inputs[:, -1:].expand(n, spec.k - m)], 1)
    positions = pos0[:, None] + torch.arange(inputs.shape[1], device=device)
    full = _pass(
        decoder, cache, state, inputs, positions, column, range(L), limit, None, clock, "verify"
    )[:, : m + 1]
    result.budgets.append(L)
    result.live_rows.append(n)
    result.verify_passes.append(True)
    if sampling.do_sample:
        p = probabilities(full, sampling)
        q = torch.stack(q_dists[:m], 1) if m else p[:, :0]
        accepted, nxt = accept_sampled(block, proposed, p, q, generator)
    else:
        accepted, nxt = accept_greedy(block, proposed, full)
    clock.lap("accept")
    # -- emit -------------------------------------------------------------------------------
    idx = torch.arange(m + 1, device=device)
    emitted = torch.where(idx < accepted[:, None], torch.cat([block, nxt[:, None]], 1), 0)
    emitted = emitted.scatter(1, accepted[:, None], nxt[:, None])
    count = torch.minimum(accepted + 1, remaining)
    is_eos = torch.isin(emitted, state.eos) & (idx < count[:, None])
    hit = is_eos.any(-1)
    count = torch.where(hit, is_eos.long().argmax(-1) + 1, count)
    state.new_tokens, state.new_counts = emitted, count
    state.lengths = state.lengths + count
    state.finished = state.finished | hit
    state.token = nxt
    # accepted inputs (t0 and the accepted proposals) stay visible; the rest become holes
    state.visible[:, column : column + m_max + 1] = False
    needed = remaining > 0  # rows that had not finished: the others' columns stay hidden
    state.visible[:, column : column + m + 1] = (idx <= accepted[:, None]) & needed[:, None]
    c = result.counts
    c.rounds += 1
    c.row_rounds += int(needed.sum())
    c.drafted += int(proposed.sum())
    c.accepted += int(accepted.sum())
    c.verify_passes += 1
    c.verify_positions += n * inputs.shape[1]  # computed: the compiled path pads to k + 1
    for j, (budget, rows) in enumerate(proposers[:m]):
        counted = c.by_budget.setdefault(budget, [0, 0])
        counted[0] += int(rows.sum())
        counted[1] += int((rows & (accepted > j)).sum())
    # the next round starts after the furthest accepted input; the columns past it are holes
    # for every row, so they are rewritten
    after = column + int(accepted.max()) + 1
    cache.rewind(after)
    return after


def _pass(
    decoder: SkipDecoder,
    cache: Any,
    state: Rows,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    column: int,
    layers: Sequence[int],
    limit: int,
    subset: SubsetHead | None = None,
    clock: PhaseClock | None = None,
    kind: str = "verify",
) -> torch.Tensor:
    """``tokens`` ``(n, T)`` at ``positions`` through ``layers``, writing cache columns
    ``column ..``; logits ``(n, T, V)`` (``subset``: over the draft vocabulary, ``(n, T, N)``),
    on the decoder's compiled path when it has one. Positions past the model's limit (inputs
    no row will use) are clamped. ``clock`` times the layers as ``kind`` ("draft":
    ``draft_layers``; the head then as ``draft_head``)."""
    adapter, compiled = decoder.adapter, decoder.compiled
    positions = positions.clamp(max=limit)
    hidden = adapter.embed(tokens, positions)
    kwargs = adapter.layer_kwargs(hidden, positions)
    T = tokens.shape[1]
    mask = block_attention_mask(state.visible, column, T, hidden.dtype)
    cache.begin(column)
    if compiled is None:
        for layer_idx in layers:
            hidden = adapter.run_layer(layer_idx, hidden, mask, kwargs, cache)
    else:  # attends over the whole capacity: the columns after the block are hidden
        mask = F.pad(mask, (0, cache.capacity - column - T), value=torch.finfo(mask.dtype).min)
        hidden = compiled.run(hidden, kwargs, layers, cache, column, mask)
    if clock is not None:
        clock.lap("draft_layers" if kind == "draft" else kind)
    if subset is None:
        logits = adapter.head(hidden) if compiled is None else compiled.head(hidden)
    elif compiled is None:
        logits = subset(hidden)
    else:
        logits = compiled.subset_head(hidden, subset.weight, subset.bias)
    if clock is not None:
        clock.lap("draft_head" if kind == "draft" else kind)
    return logits
