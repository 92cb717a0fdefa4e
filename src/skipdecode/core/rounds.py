"""The state a speculative decode carries between rounds: the live rows, what a round leaves
behind for inspection, what a call returns, the clock that splits a round's time into its parts, and the pace that
decides whether speculating still pays for a batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .clock import now
from .stats import GenerationOutput, GenerationStats, SpeculationCounts

__all__ = [
    "JUDGE_ROUNDS",
    "RETRY_EVERY",
    "Pace",
    "PaceBook",
    "PhaseClock",
    "RoundView",
    "Rows",
    "SpeculativeResult",
    "kept_rows",
    "timed_prefill",
    "speculative_output",
]

#: speculative rounds a batch times before ``auto_off`` may turn speculation off
JUDGE_ROUNDS = 3
#: calls of a batch size that decode plainly after it was judged not to pay, before one judges
#: again (the prompt mix may have changed)
RETRY_EVERY = 8


@dataclass
class SpeculativeResult:
    generated: torch.Tensor  # (B, N), padded after EOS
    budgets: list[int]  # layers of every pass (draft and verify), in order
    live_rows: list[int]  # rows in every pass
    counts: SpeculationCounts
    prefill_seconds: float
    decode_seconds: float
    verify_passes: list[bool] = field(default_factory=list)  # which passes were verify passes
    lengths: list[int] = field(default_factory=list)  # tokens per row, EOS included
    compile_seconds: float = 0.0  # the compiled path's compiling during the call, not decoding
    compiled: bool = False  # the passes ran on the decoder's compiled path
    graph: str | None = None  # "round": sync-free rounds (core.device_rounds)
    graph_fallback: str | None = None  # why they were asked for and not used


def speculative_output(
    result: SpeculativeResult,
    num_layers: int,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
) -> GenerationOutput:
    """The engine's output for a speculative call: ids cut to the longest row, and stats that
    list every draft and verify pass (``GenerationStats.speculation`` holds the counts)."""
    lengths = result.lengths
    gen = result.generated[:, : max(lengths, default=0)]
    return GenerationOutput(
        sequences=torch.cat([input_ids, gen], dim=1),
        generated_ids=gen,
        prompt_mask=attention_mask,
        stats=GenerationStats(
            num_layers=num_layers,
            prompt_length=input_ids.shape[1],
            budgets=result.budgets,
            live_rows=result.live_rows,
            generated_lengths=lengths,
            prefill_seconds=result.prefill_seconds,
            decode_seconds=result.decode_seconds,
            batch_size=input_ids.shape[0],
            speculation=result.counts,
            compile_seconds=result.compile_seconds,
            compiled=result.compiled,
            graph=result.graph,
            graph_fallback=result.graph_fallback,
        ),
    )


@dataclass(frozen=True)
class RoundView:
    """The state after a round: ``cache`` (live rows only), which original row each cache row
    is, each row's visible cache columns ``(n, columns)`` and its generated length (its last
    token is not in the cache yet)."""

    cache: Any
    rows: torch.Tensor
    visible: torch.Tensor
    lengths: torch.Tensor


@dataclass
class Rows:
    """The live rows' state (original row index, lengths, positions, key visibility)."""

    rows: torch.Tensor  # (n,) index into the original batch
    token: torch.Tensor  # (n,) last chosen token, not yet in the cache
    lengths: torch.Tensor  # (n,) tokens generated so far
    valid: torch.Tensor  # (n,) real prompt tokens
    visible: torch.Tensor  # (n, capacity) bool: cache columns this row may attend to
    finished: torch.Tensor  # (n,) bool
    eos: torch.Tensor
    new_tokens: torch.Tensor | None = None  # (n, m + 1) this round's emitted tokens
    new_counts: torch.Tensor | None = None  # (n,)

    @classmethod
    def start(cls, input_ids, attention_mask, token, eos) -> Rows:
        B, P = input_ids.shape
        visible = torch.zeros(B, P, dtype=torch.bool, device=input_ids.device)
        visible[:, :P] = attention_mask.bool()
        return cls(
            rows=torch.arange(B, device=input_ids.device),
            token=token,
            lengths=torch.ones(B, dtype=torch.long, device=input_ids.device),
            valid=attention_mask.long().sum(-1),
            visible=visible,
            finished=torch.isin(token, eos),
            eos=eos,
        )

    def select(self, keep: torch.Tensor) -> Rows:
        return Rows(
            rows=self.rows[keep],
            token=self.token[keep],
            lengths=self.lengths[keep],
            valid=self.valid[keep],
            visible=self.visible[keep],
            finished=self.finished[keep],
            eos=self.eos,
        )

    def reserve(self, columns: int) -> None:
        extra = columns - self.visible.shape[1]
        if extra > 0:
            self.visible = torch.cat(
                [self.visible, self.visible.new_zeros(len(self.rows), extra)], 1
            )


class PhaseClock:
    """Adds the time since its last lap to a named phase (a no-op without a ``seconds`` dict).
    ``compiling``: seconds compiled so far (the compiled path's), left out of every phase."""

    def __init__(
        self,
        device: torch.device,
        seconds: dict[str, float] | None,
        compiling: Callable[[], float] = lambda: 0.0,
    ):
        self.device, self.seconds, self.compiling = device, seconds, compiling
        self.last = now(device) - compiling() if seconds is not None else 0.0

    def lap(self, phase: str) -> None:
        if self.seconds is None:
            return
        t = now(self.device) - self.compiling()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + t - self.last
        self.last = t


@dataclass
class Pace:
    """Whether speculating pays for this batch, by the clock (``Speculation.auto_off``).

    The batch's first round is plain (one full step, one token per row) and times a plain step
    ``plain_s`` at this batch size. Every speculative round after it adds its seconds and the
    tokens it gave the mean live row (a plain step gives one). From ``judge_after`` speculative
    rounds on, speculation stays on only while those tokens, at ``plain_s`` each, took longer
    than the rounds did: once it is slower than plain decoding, the rest of the batch decodes
    plainly. The output does not depend on it (a plain round is a verify pass of one position),
    only the speed does. A decoder keeps the verdicts (:class:`PaceBook`).
    """

    judge_after: int = JUDGE_ROUNDS
    plain_s: float | None = None
    spent_s: float = 0.0  # seconds of the speculative rounds
    tokens: float = 0.0  # tokens per live row those rounds gave, summed over rounds
    rounds: int = 0  # speculative rounds timed
    off: bool = False
    judged_before: bool = False  # off from the start: an earlier call of this batch size

    @property
    def plain(self) -> bool:
        """Whether the next round runs plainly (the measuring round, or speculation off)."""
        return self.plain_s is None or self.off

    def record(self, seconds: float, tokens_per_row: float) -> None:
        """Time one round (the first is the plain one); a pace that is off records nothing."""
        if self.off:
            return
        if self.plain_s is None:
            self.plain_s = seconds / max(tokens_per_row, 1.0)
            return
        self.spent_s += seconds
        self.tokens += tokens_per_row
        self.rounds += 1
        if self.rounds >= self.judge_after and not self.pays():
            self.off = True

    def pays(self) -> bool:
        """Whether the timed speculative rounds beat plain steps for the same tokens."""
        return self.plain_s is not None and self.tokens * self.plain_s > self.spent_s


@dataclass
class PaceBook:
    """A decoder's ``auto_off`` verdicts across calls, per (speculation, batch size): a batch
    size judged not to pay decodes its next ``retry_every`` calls plainly from the start (no
    measuring round, no judged rounds), then is judged again."""

    retry_every: int = RETRY_EVERY
    # (id of the Speculation, batch size) -> (the Speculation, calls run plainly since)
    plain_since: dict[tuple[int, int], tuple[Any, int]] = field(default_factory=dict)

    def start(self, spec: Any, batch: int) -> Pace:
        key = (id(spec), batch)
        held = self.plain_since.get(key)
        if held is not None and held[1] < self.retry_every:
            self.plain_since[key] = (spec, held[1] + 1)
            return Pace(off=True, judged_before=True)
        self.plain_since.pop(key, None)
        return Pace()

    def finish(self, spec: Any, batch: int, pace: Pace) -> None:
        if pace.off and not pace.judged_before:
            self.plain_since[(id(spec), batch)] = (spec, 0)


def kept_rows(live: torch.Tensor, bucketed: bool) -> torch.Tensor:
    """The rows a compaction keeps, in order: the live ones, and where ``bucketed`` (the
    compiled path) as many finished ones beside them as fill the next power of two, so that the
    batch sizes a call passes through are buckets its pool and graphs share across calls
    rather than one shape per live count. A finished row proposes and emits nothing."""
    keep = live.nonzero().squeeze(1)
    if not bucketed:
        return keep
    bucket = 1 << (len(keep) - 1).bit_length()
    filler = (~live).nonzero().squeeze(1)[: bucket - len(keep)]
    return torch.cat([keep, filler]).sort().values


def timed_prefill(
    result: SpeculativeResult, decoder: Any, input_ids: torch.Tensor, mask: torch.Tensor, cache: Any
) -> tuple[torch.Tensor, float]:
    """The prefill of a speculative call, timed into ``result`` (whose lengths are all 0 when it
    generates nothing): its logits and the clock after it."""
    device = input_ids.device
    t0 = now(device)
    logits = decoder.prefill(input_ids, mask, cache, maskless=False)
    t1 = now(device)
    result.prefill_seconds = t1 - t0
    if result.generated.shape[1] == 0:
        result.lengths = [0] * input_ids.shape[0]
    return logits, t1
