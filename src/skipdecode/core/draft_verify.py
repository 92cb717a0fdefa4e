"""One draft-and-verify round of the lossless mode (:mod:`.speculative` runs the loop): up to
``k`` draft passes on the draft schedule's layers, each on the layers every earlier pass of the
round ran (a draft pass writes no key or value the next one would miss); one verify pass of the
full model over each row's input and proposals; the accepted tokens emitted, cut at EOS and at
the tokens a row still needs; the rejected columns become holes. Every pass runs on the
decoder's compiled path where it has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from .acceptance import accept_greedy, accept_sampled
from .adapters import DecoderAdapter
from .cache import KVCache
from .compiled import CompiledLayers
from .masks import block_attention_mask
from .rounds import PhaseClock, Rows, SpeculativeResult
from .sampling import SamplingConfig, probabilities
from .stats import SpeculationCounts
from .step import Speculation
from .subset_head import SubsetHead

__all__ = ["SkipDecoder", "speculative_round"]


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


@dataclass(frozen=True)
class _Round:
    """What every pass of one round reads: the decoder and its cache, the live rows, the
    speculation, the token choice, the result being counted, the position limit and the clock."""

    decoder: SkipDecoder
    cache: Any
    state: Rows
    spec: Speculation
    sampling: SamplingConfig
    generator: torch.Generator | None
    result: SpeculativeResult
    limit: int
    clock: PhaseClock


def speculative_round(
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
    pos0 = state.valid + state.lengths - 1  # (n,) position id of each row's input token
    state.visible[:, column : column + m_max + 1] = True  # this round's columns, causally below
    r = _Round(decoder, cache, state, spec, sampling, generator, result, limit, clock)
    draft = _draft(r, m_max, remaining, column, pos0, subset)
    cache.rewind(column)
    accepted, nxt, width = _verify(r, draft, column, pos0)
    _emit(state, draft.block, accepted, nxt, remaining, column, m_max)
    _count_round(result.counts, draft, accepted, remaining, len(state.rows) * width)
    # the next round starts after the furthest accepted input; the columns past it are holes
    # for every row, so they are rewritten
    after = column + int(accepted.max()) + 1
    cache.rewind(after)
    return after


@dataclass(frozen=True)
class _Draft:
    """A round's proposals: ``block`` (n, m) the tokens drafted while any row proposed,
    ``proposed`` (n,) how many each row proposed, the draft distributions when sampling, and
    per draft pass its layer budget and the rows that proposed in it."""

    block: torch.Tensor
    proposed: torch.Tensor
    q_dists: list[torch.Tensor]
    proposers: list[tuple[int, torch.Tensor]]


def _draft(
    r: _Round,
    m_max: int,
    remaining: torch.Tensor,
    column: int,
    pos0: torch.Tensor,
    subset: SubsetHead | None,
) -> _Draft:
    """Up to ``m_max`` draft passes, each on the layers every earlier pass of the round ran."""
    state, spec, result = r.state, r.spec, r.result
    n, device = len(state.rows), state.token.device
    g_min = int(state.lengths.min()) - 1  # generation step of the least advanced row's input
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
            r.decoder, r.cache, state, current[:, None], pos0[:, None] + j, column + j, layers,
            r.limit, subset, r.clock, "draft",
        )  # fmt: skip
        proposers.append((len(layers), proposing.clone()))
        result.budgets.append(len(layers))
        result.live_rows.append(n)
        result.verify_passes.append(False)
        result.counts.draft_passes += 1
        d, confidence, q = _propose(logits[:, 0], spec, r.sampling, r.generator, subset)
        if q is not None:
            q_dists.append(q)
        proposed += proposing.long()  # this pass's token is proposed: its pass was paid
        # a row stops after proposing EOS, a token drafted with less confidence than the
        # threshold (kept: the verify pass may accept it), or the tokens it still needs
        proposing = proposing & ~torch.isin(d, state.eos) & (proposed < remaining - 1)
        if spec.threshold is not None and confidence is not None:
            proposing = proposing & (confidence >= spec.threshold)
        drafts.append(d)
        current = d
        r.clock.lap("draft_head")
    m = int(proposed.max()) if drafts else 0
    block = torch.stack(drafts[:m], 1) if m else state.token.new_zeros(n, 0)
    return _Draft(block, proposed, q_dists[:m], proposers[:m])


def _propose(
    logits: torch.Tensor,
    spec: Speculation,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    subset: SubsetHead | None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """A draft pass's token per row from its logits ((n, V), or (n, N) over the draft
    vocabulary), its confidence (None where nothing reads it) and, when sampling, the draft
    distribution over the whole vocabulary."""
    q_full = None
    if sampling.do_sample:
        q = probabilities(logits, sampling)
        d = torch.multinomial(q, 1, generator=generator).squeeze(-1)
        confidence = q.max(-1).values
        q_full = q if subset is None else subset.scatter(q)
    else:
        d = logits.argmax(-1)
        confidence = logits.float().softmax(-1).max(-1).values if spec.threshold else None
    if subset is not None:
        d = subset.tokens(d)
    return d, confidence, q_full


def _verify(
    r: _Round, draft: _Draft, column: int, pos0: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The full model over each row's input and proposals: per row the proposals accepted, the
    next token, and the positions the pass computed per row."""
    state, result = r.state, r.result
    n, m, L = len(state.rows), draft.block.shape[1], r.decoder.num_layers
    inputs = torch.cat([state.token[:, None], draft.block], 1)  # (n, m + 1)
    if r.decoder.compiled is not None and 0 < m < r.spec.k:
        # the compiled path verifies k + 1 positions whatever m is (one graph per batch and
        # length); the extra inputs come after the real ones, which never attend to them, and
        # their columns lie past every row's accepted ones (holes, rewritten next round)
        inputs = torch.cat([inputs, inputs[:, -1:].expand(n, r.spec.k - m)], 1)
    positions = pos0[:, None] + torch.arange(inputs.shape[1], device=inputs.device)
    full = _pass(
        r.decoder, r.cache, state, inputs, positions, column, range(L), r.limit, None, r.clock,
        "verify",
    )[:, : m + 1]  # fmt: skip
    result.budgets.append(L)
    result.live_rows.append(n)
    result.verify_passes.append(True)
    if r.sampling.do_sample:
        p = probabilities(full, r.sampling)
        q = torch.stack(draft.q_dists, 1) if m else p[:, :0]
        accepted, nxt = accept_sampled(draft.block, draft.proposed, p, q, r.generator)
    else:
        accepted, nxt = accept_greedy(draft.block, draft.proposed, full)
    r.clock.lap("accept")
    return accepted, nxt, inputs.shape[1]


def _emit(
    state: Rows,
    block: torch.Tensor,
    accepted: torch.Tensor,
    nxt: torch.Tensor,
    remaining: torch.Tensor,
    column: int,
    m_max: int,
) -> None:
    """The round's tokens into ``state``: the accepted proposals and the next token, cut at EOS
    and at the tokens each row still needs; the accepted inputs' columns stay visible."""
    m = block.shape[1]
    idx = torch.arange(m + 1, device=block.device)
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


def _count_round(
    c: SpeculationCounts,
    draft: _Draft,
    accepted: torch.Tensor,
    remaining: torch.Tensor,
    verify_positions: int,
) -> None:
    """A round's counts: rows, proposals drafted and accepted (also per draft budget), and the
    verify pass's positions (computed: the compiled path pads to k + 1)."""
    c.rounds += 1
    c.row_rounds += int((remaining > 0).sum())
    c.drafted += int(draft.proposed.sum())
    c.accepted += int(accepted.sum())
    c.verify_passes += 1
    c.verify_positions += verify_positions
    for j, (budget, rows) in enumerate(draft.proposers):
        counted = c.by_budget.setdefault(budget, [0, 0])
        counted[0] += int(rows.sum())
        counted[1] += int((rows & (accepted > j)).sum())


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
