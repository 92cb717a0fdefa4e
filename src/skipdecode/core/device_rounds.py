"""The lossless mode's round with no host sync: ``compile_graph="step"``'s speculative path.

The host-driven round (:mod:`.draft_verify`) reads device values to steer itself: the most
proposals any row may make, whether any row still proposes, the longest proposal, the next
column, the counts, every row's emitted tokens; on a GPU each read waits for the device (about
eighteen a round). Here the round is a fixed computation over device state (:class:`RoundState`)
and is recorded once per (batch, capacity, k, draft layers) and replayed:

- **draft**: always ``k`` one-token passes through the constant draft plan's layers; a row
  proposes while it still needs two or more tokens and has not proposed EOS (a row that stopped
  proposing still runs the pass; its tokens are not proposals);
- **verify**: one pass of ``[t0, d1 .. dk]`` through every layer at the round's columns; greedy
  acceptance of each row's longest agreeing prefix, then the full model's token after it;
- **emit**: the accepted tokens and the next one, cut at EOS and at the tokens a row still
  needs, scattered into the output buffer at each row's length; the rejected columns become
  holes (hidden by the row's ``visible`` mask); the next round starts after the furthest
  accepted column; the counts (rounds, proposals, acceptances, per draft pass) add up on the
  device.

The cache column, positions, lengths and masks are device tensors, so nothing in a round needs
the host. The host reads the state between rounds (one transfer: the tokens each row still
needs) to stop, and to compact the batch when half or more rows have finished (into the pool's
power-of-two buckets, :func:`~.rounds.kept_rows`, as the host-driven round does). Rounds
after every row has finished, before the next read, change nothing but the column.

When to read: a row that needs ``r`` more tokens needs at least ``ceil(r / (k + 1))`` more rounds,
so after each read the host runs that many rounds for the row that needs the most before it
reads again: with EOS off no round runs after the last row finishes, and a call reads a few
times, not every round. The capacity is fixed for the call: each round writes ``k + 1`` columns,
a row is live in at most ``N - 1`` rounds (``N`` new tokens, the first from the prefill), and at
most ``ceil(N / (k + 1))`` rounds run after the last row finished (by EOS), so ``P + (N +
ceil(N / (k + 1))) * (k + 1)`` columns suffice.

Tokens equal the full model's greedy tokens (what the host-driven round emits): drafting more
passes than a row needs changes only proposals that are not counted, and every emitted token is
the verify pass's argmax. What this round does not do runs on the host-driven round, the reason
in the output's stats (``graph_fallback``): sampling, a confidence threshold, a draft vocabulary,
``auto_off``, a draft plan whose layers change with the position, more EOS ids than
:data:`~.step_graphs.EOS_SLOTS`, ``on_round`` or ``profile_rounds``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from .acceptance import accept_greedy
from .clock import now
from .compiled import CompileTime, bucketed_capacity
from .graphs import Recordings
from .rounds import SpeculativeResult, kept_rows, timed_prefill
from .sampling import SamplingConfig
from .stats import SpeculationCounts
from .step import Speculation
from .step_graphs import EOS_SLOTS, STEP_GRAPH_LIMIT, data_dependent_rope

__all__ = ["sync_free", "RoundGraphs", "RoundState", "device_refusal", "device_generate"]


def device_refusal(
    spec: Speculation,
    sampling: SamplingConfig,
    eos_ids: Sequence[int],
    steps: int,
    watched: bool,
    config: Any = None,
) -> str | None:
    """Why this call cannot run the sync-free round (None: it can). ``steps``: the generation
    steps the draft plan must cover; ``watched``: ``on_round`` or ``profile_rounds`` given;
    ``config``: the model's (a rotary scaling that reads positions on the host cannot be
    recorded)."""
    plans = {tuple(spec.draft.active_layers(g)) for g in range(max(steps, 1))}
    checks = (
        (data_dependent_rope(config), "a rotary scaling that reads the positions on the host"),
        (sampling.do_sample, "sampling (the sync-free round accepts greedily)"),
        (spec.threshold is not None, "a confidence threshold (rows would stop drafting)"),
        (spec.draft_vocab is not None, "a draft vocabulary"),
        (spec.auto_off, "auto_off (it times rounds on the host)"),
        (len(plans) > 1, f"a draft plan of {len(plans)} layer sets (a constant one is needed)"),
        (len(eos_ids) > EOS_SLOTS, f"{len(eos_ids)} EOS ids (at most {EOS_SLOTS})"),
        (watched, "on_round or profile_rounds (they read every round on the host)"),
    )
    return next((reason for failed, reason in checks if failed), None)


def sync_free(
    decoder: Any,
    spec: Speculation,
    sampling: SamplingConfig,
    stops: Sequence[int],
    steps: int,
    watched: bool,
) -> tuple[bool, str | None]:
    """Whether a lossless call on ``decoder`` runs sync-free rounds, and why not where they
    were asked for (``compile_graph="step"``); ``stops``: the EOS ids rows stop at. A decoder
    that asked for them first checks that its recordings still read the weights."""
    compiled = decoder.compiled
    if compiled is None or compiled.graph != "step":
        return False, None
    compiled.steps.check_weights()
    why = device_refusal(spec, sampling, stops, steps, watched, decoder.adapter.config)
    return why is None, why


class RoundState:
    """The device buffers of one (batch, capacity): each row's last token, lengths, real prompt
    tokens, finished flag, visible cache columns and output (``capacity + 1`` wide, the last a
    column that receives writes no row keeps); the round's first column; the tokens each row
    must reach; the EOS ids; the counts (rounds, row rounds, proposals, acceptances, verify
    positions) and per draft pass (proposals, acceptances)."""

    def __init__(self, batch: int, capacity: int, k: int, device: torch.device):
        long = {"dtype": torch.long, "device": device}
        self.token = torch.zeros(batch, **long)
        self.lengths = torch.ones(batch, **long)
        self.valid = torch.zeros(batch, **long)
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.visible = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.out = torch.zeros(batch, capacity + 1, **long)
        self.column = torch.zeros(1, **long)
        self.target = torch.zeros(1, **long)
        self.eos = torch.full((EOS_SLOTS,), -1, **long)
        self.counts = torch.zeros(5, **long)
        self.by_pass = torch.zeros(k, 2, **long)

    def per_row(self) -> list[torch.Tensor]:
        return [self.token, self.lengths, self.valid, self.finished, self.visible, self.out]

    def shared(self) -> list[torch.Tensor]:
        return [self.column, self.target, self.eos, self.counts, self.by_pass]

    def tensors(self) -> list[torch.Tensor]:
        return self.per_row() + self.shared()

    def copy_rows(self, other: RoundState, keep: torch.Tensor) -> None:
        """This state from ``other``'s rows ``keep`` (and its shared values)."""
        for mine, theirs in zip(self.per_row(), other.per_row(), strict=True):
            mine.copy_(theirs[keep])
        for mine, theirs in zip(self.shared(), other.shared(), strict=True):
            mine.copy_(theirs)


def _mask(state: RoundState, start: torch.Tensor, T: int, dtype: torch.dtype) -> torch.Tensor:
    """``(n, 1, T, capacity)`` additive: each row's visible columns before ``start``, then the
    block of ``T`` written from ``start`` causally; every later column hidden."""
    capacity = state.visible.shape[1]
    cols = torch.arange(capacity, device=start.device)
    before = (cols < start) & state.visible  # (n, C)
    offsets = torch.arange(T, device=start.device)[:, None]
    block = (cols >= start) & (cols <= start + offsets)  # (T, C)
    allowed = before[:, None, :] | block[None]
    zero = torch.zeros((), dtype=dtype, device=start.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)[:, None]


class RoundGraphs(Recordings):
    """The sync-free rounds of one decoder, recorded per (batch, capacity, k, draft layers) on
    its compiled path's recorder (``compiled``: a :class:`~.compiled.CompiledLayers`), at most
    :data:`~.step_graphs.STEP_GRAPH_LIMIT` (:class:`~.graphs.Recordings`)."""

    def __init__(self, compiled: Any):
        super().__init__(STEP_GRAPH_LIMIT)
        self.compiled = compiled
        self.adapter = compiled.adapter
        self.states: dict[tuple[int, int, int], RoundState] = {}

    def state(self, batch: int, capacity: int, k: int, device: torch.device) -> RoundState:
        key = (batch, capacity, k)
        if key not in self.states:
            self.states[key] = RoundState(batch, capacity, k, device)
        return self.states[key]

    def round(self, state: RoundState, cache: Any, draft: tuple[int, ...], limit: int) -> None:
        """One round on ``state`` (replayed, or recorded first)."""
        n, C = state.visible.shape
        k = state.by_pass.shape[0]
        buffers = (*cache.keys, *cache.values)
        record = functools.partial(self._record, state, buffers, draft, limit)
        self.replay((n, C, k, draft), buffers, record, "the round")

    def _record(self, state: RoundState, buffers, draft: tuple[int, ...], limit: int):
        """Record the round (on a CPU: keep it to call); the time, with the compiling of its
        first layer steps and head and the timing of their product forms, goes to the compiled
        path's compile seconds, never to decoding."""
        compiled, (n, k) = self.compiled, (state.token.shape[0], state.by_pass.shape[0])
        weights = [*compiled._weights(range(len(buffers) // 2)), self.adapter.lm_head.weight]
        step = functools.partial(self._round, state, buffers, draft, limit)
        return compiled.compiling(
            (n, n * (k + 1)), weights, compiled.recorder.record, step, state.tensors()
        )

    def _pass(self, state, buffers, tokens, positions, start, layers, limit) -> torch.Tensor:
        """``tokens`` ``(n, T)`` at ``positions`` through ``layers``, writing columns ``start
        ..`` of each layer's cache in place: logits ``(n, T, V)``."""
        adapter, compiled = self.adapter, self.compiled
        L = len(buffers) // 2
        positions = positions.clamp(max=limit)
        hidden = adapter.embed(tokens, positions)
        kwargs = adapter.layer_kwargs(hidden, positions)
        T = tokens.shape[1]
        mask = _mask(state, start, T, hidden.dtype)
        columns = start + torch.arange(T, device=start.device)
        for i in layers:
            hidden = compiled._layer(
                compiled._modules[i], hidden, buffers[i], buffers[L + i], columns, mask,
                adapter._layer_call_kwargs(i, kwargs), adapter._cache_kwarg,
            )  # fmt: skip
        return compiled._head(hidden)

    def _round(self, state: RoundState, buffers, draft: tuple[int, ...], limit: int) -> None:
        """The round (see the module doc), every value on the device."""
        k, n = state.by_pass.shape[0], state.token.shape[0]
        L = len(buffers) // 2
        device = state.token.device
        state.finished.logical_or_(state.lengths >= state.target)
        remaining = torch.where(state.finished, 0, state.target - state.lengths)
        pos0 = state.valid + state.lengths - 1
        idx = torch.arange(k + 1, device=device)
        columns = state.column + idx
        state.visible.index_fill_(1, columns, True)  # the round's columns, causally below
        proposing = remaining > 1
        proposed = torch.zeros(n, dtype=torch.long, device=device)
        current, drafts, proposers = state.token, [], []
        for j in range(k):
            logits = self._pass(state, buffers, current[:, None], (pos0 + j)[:, None],
                                state.column + j, draft, limit)  # fmt: skip
            d = logits[:, 0].argmax(-1)
            proposers.append(proposing)
            proposed = proposed + proposing.long()
            is_eos = (d[:, None] == state.eos).any(-1)
            proposing = proposing & ~is_eos & (proposed < remaining - 1)
            drafts.append(d)
            current = d
        block = torch.stack(drafts, 1)  # (n, k)
        inputs = torch.cat([state.token[:, None], block], 1)
        full = self._pass(state, buffers, inputs, pos0[:, None] + idx, state.column, range(L),
                          limit)  # fmt: skip
        accepted, nxt = accept_greedy(block, proposed, full)
        self._emit(state, block, accepted, nxt, remaining, columns)
        rows = torch.stack(proposers, 0)  # (k, n)
        passes = torch.stack([rows.sum(-1), (rows & (accepted > idx[:k, None])).sum(-1)], -1)
        state.by_pass.add_(passes)
        live = (remaining > 0).long().sum()
        ran = (live > 0).long()  # a round after every row finished counts as idle, not a round
        counts = [ran, live, proposed.sum(), accepted.sum(), ran * (n * (k + 1))]
        state.counts.add_(torch.stack(counts))
        state.column.add_(accepted.max() + 1)

    @staticmethod
    def _emit(state, block, accepted, nxt, remaining, columns) -> None:
        """The round's tokens into the output, cut at EOS and at the tokens a row needs."""
        k = block.shape[1]
        idx = torch.arange(k + 1, device=block.device)
        emitted = torch.where(idx < accepted[:, None], torch.cat([block, nxt[:, None]], 1), 0)
        emitted = emitted.scatter(1, accepted[:, None], nxt[:, None])
        count = torch.minimum(accepted + 1, remaining)
        is_eos = (emitted[..., None] == state.eos).any(-1) & (idx < count[:, None])
        hit = is_eos.any(-1)
        count = torch.where(hit, is_eos.long().argmax(-1) + 1, count)
        spare = state.out.shape[1] - 1  # receives what no row keeps
        where = torch.where(idx < count[:, None], state.lengths[:, None] + idx, spare)
        state.out.scatter_(1, where, emitted)
        state.lengths.add_(count)
        state.finished.logical_or_(hit)
        state.token.copy_(nxt)
        kept = (idx <= accepted[:, None]) & (remaining > 0)[:, None]
        state.visible.index_copy_(1, columns, kept)


def _start(state: RoundState, token, attention_mask, eos_ids, pad_id, new_tokens: int) -> None:
    """A call's state after the prefill (its first token ``token``)."""
    P = attention_mask.shape[1]
    eos = state.eos
    eos.fill_(-1)
    eos[: len(eos_ids)] = torch.tensor(list(eos_ids), dtype=torch.long)
    state.token.copy_(token)
    state.lengths.fill_(1)
    state.valid.copy_(attention_mask.long().sum(-1))
    state.finished.copy_((token[:, None] == eos).any(-1))
    state.visible.zero_()
    state.visible[:, :P] = attention_mask.bool()
    state.out.fill_(pad_id)
    state.out[:, 0] = token
    state.column.fill_(P)
    state.target.fill_(new_tokens)
    state.counts.zero_()
    state.by_pass.zero_()


def device_generate(
    decoder: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    spec: Speculation,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    pad_id: int,
) -> SpeculativeResult:
    """Decode a left-padded batch with sync-free rounds (see the module doc); ``eos_ids``: the
    ids rows stop at (none: rows run to ``max_new_tokens``)."""
    B, P = input_ids.shape
    N, k, L = max_new_tokens, spec.k, decoder.num_layers
    device, compiled = input_ids.device, decoder.compiled
    if compiled.rounds is None:
        compiled.rounds = RoundGraphs(compiled)
    graphs: RoundGraphs = compiled.rounds
    capacity = bucketed_capacity(P + (N + -(-N // (k + 1))) * (k + 1))
    cache = decoder.new_cache(B, capacity)
    compiling = CompileTime(compiled)
    result = SpeculativeResult(input_ids.new_full((B, N), pad_id), [], [], SpeculationCounts(),
                               0.0, 0.0, compiled=True, graph="round")  # fmt: skip
    logits, t1 = timed_prefill(result, decoder, input_ids, attention_mask, cache)
    if N == 0:
        return result
    state = graphs.state(B, capacity, k, device)
    _start(state, logits.argmax(-1), attention_mask, eos_ids, pad_id, N)
    rows = torch.arange(B, device=device)
    final = torch.full((B, capacity + 1), pad_id, dtype=torch.long, device=device)
    lengths = torch.ones(B, dtype=torch.long, device=device)
    draft, limit = tuple(spec.draft.active_layers(0)), decoder.adapter.max_positions - 1
    ran = 0  # rounds replayed, idle ones included
    while True:
        needs = torch.where(state.finished, 0, state.target - state.lengths)
        needs = needs.tolist()  # the host's one read between rounds
        n, most = len(needs), max(needs)
        if most <= 0:
            break
        live = sum(1 for r in needs if r > 0)
        if 2 * live <= n:
            keep = kept_rows(torch.tensor([r > 0 for r in needs], device=device), True)
            final[rows], lengths[rows] = state.out, state.lengths
            smaller = graphs.state(len(keep), capacity, k, device)
            smaller.copy_rows(state, keep)
            state, rows = smaller, rows[keep]
            cache.select_rows(keep)
            n = len(keep)
        for _ in range(-(-most // (k + 1))):
            graphs.round(state, cache, draft, limit)
            ran += 1
            result.budgets += [len(draft)] * k + [L]
            result.live_rows += [n] * (k + 1)
            result.verify_passes += [False] * k + [True]
    final[rows], lengths[rows] = state.out, state.lengths
    result.generated = final[:, :N].clone()
    result.lengths = lengths.tolist()
    _count(result.counts, state, len(draft), ran)
    live_passes = result.counts.rounds * (k + 1)  # idle rounds (the last before the final
    for passes in (result.budgets, result.live_rows, result.verify_passes):  # read) ran no row
        del passes[live_passes:]
    result.compile_seconds = compiling.seconds()
    result.decode_seconds = now(device) - t1 - result.compile_seconds
    return result


def _count(counts: SpeculationCounts, state: RoundState, budget: int, ran: int) -> None:
    """The call's counts from the device (read once, at the end)."""
    rounds, row_rounds, drafted, accepted, positions = state.counts.tolist()
    counts.idle_rounds = ran - rounds
    k = state.by_pass.shape[0]
    counts.rounds, counts.row_rounds = rounds, row_rounds
    counts.drafted, counts.accepted = drafted, accepted
    counts.draft_passes, counts.verify_passes = rounds * k, rounds
    counts.verify_positions = positions
    proposals, accepts = state.by_pass.sum(0).tolist()
    if proposals:  # as the host-driven round: a budget only where a pass drafted
        counts.by_budget[budget] = [proposals, accepts]
