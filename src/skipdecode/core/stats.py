"""What one ``generate`` call reports: the layers each decode pass ran, for how many live rows,
and how long it took; the derived per-token and per-batch speedups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["GenerationStats", "GenerationOutput", "SpeculationCounts"]


@dataclass
class SpeculationCounts:
    """What the rounds of one call did (summed over rows unless said otherwise)."""

    rounds: int = 0
    row_rounds: int = 0  # verify passes per row, summed over rows
    drafted: int = 0  # proposals a row made
    accepted: int = 0  # proposals the full model agreed with
    draft_passes: int = 0
    verify_passes: int = 0
    verify_positions: int = 0  # positions the verify passes computed, over rows
    # auto_off: plain rounds (a verify pass of one position, no draft: one full step), the
    # calls that turned speculation off for the rest of their batch, and the calls that ran
    # plainly from the start (an earlier call of their batch size had turned it off)
    plain_rounds: int = 0
    turned_off: int = 0
    started_off: int = 0
    # sync-free rounds (core.device_rounds) replayed after every row had finished, before the
    # host's next read: timed, but no pass of them is counted
    idle_rounds: int = 0
    # per draft budget (layers of the pass that drafted): [proposals, accepted]
    by_budget: dict[int, list[int]] = field(default_factory=dict)
    # seconds per part of a round, when timed (``profile_rounds``): draft layers, draft head
    # (with choosing the token), verify, acceptance, bookkeeping
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def add(self, other: SpeculationCounts) -> None:
        for name in self.__dataclass_fields__:
            mine, theirs = getattr(self, name), getattr(other, name)
            if isinstance(mine, dict):
                for key, value in theirs.items():
                    if isinstance(value, list):
                        mine[key] = [
                            a + b for a, b in zip(mine.get(key, [0, 0]), value, strict=True)
                        ]
                    else:
                        mine[key] = mine.get(key, 0.0) + value
            else:
                setattr(self, name, mine + theirs)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {n: getattr(self, n) for n in self.__dataclass_fields__}
        out["by_budget"] = {
            b: {"proposed": n, "accepted": a, "acceptance_rate": a / n if n else None}
            for b, (n, a) in sorted(self.by_budget.items(), reverse=True)
        }
        out["phase_seconds"] = dict(self.phase_seconds)
        out["acceptance_rate"] = self.accepted / self.drafted if self.drafted else None
        # tokens a verify pass yields per row: the accepted proposals plus its own token
        out["tokens_per_verify"] = (
            (self.accepted + self.row_rounds) / self.row_rounds if self.row_rounds else None
        )
        return out


@dataclass
class GenerationStats:
    """Per-call accounting: which layers ran, for how many live rows, and how long it took."""

    num_layers: int
    prompt_length: int  # padded prompt width P
    budgets: list[int]  # layers the batch ran at each decode pass g = 0, 1, ... (input token g)
    live_rows: list[int]  # rows not yet finished at each decode pass
    generated_lengths: list[int]  # tokens per row, EOS included
    prefill_seconds: float
    decode_seconds: float
    batch_size: int
    # layers each row's token used at each pass, when the tokens of one pass differ (CALM)
    token_layers: list[list[int]] | None = None
    live_mask: list[list[bool]] | None = None
    # speculative decoding: ``budgets``/``live_rows`` then list every draft and verify pass
    speculation: SpeculationCounts | None = None
    # the compiled path: seconds spent compiling during this call (kept out of decode_seconds)
    compile_seconds: float = 0.0
    compiled: bool = False
    # what one compiled graph covered (step, plan or layer; None: eager), and why a call that
    # asked for whole-step graphs ran per-layer ones (core.step_graphs)
    graph: str | None = None
    graph_fallback: str | None = None

    @property
    def passes(self) -> int:
        """Forward passes after the prefill (draft and verify passes when speculative)."""
        return len(self.budgets)

    @property
    def decode_steps(self) -> int:
        """Token steps after the prefill: one per generated token of the longest row after the
        first (what the ``full`` schedule needs for the same output); equal to ``passes``
        unless decoding is speculative."""
        if self.speculation is not None:
            return max(0, max(self.generated_lengths, default=0) - 1)
        return len(self.budgets)

    @property
    def token_count(self) -> int:
        """Generated tokens the decode passes produced (every row's tokens after the first;
        for one-token passes, the live rows summed over passes)."""
        if self.speculation is not None:
            return sum(max(0, n - 1) for n in self.generated_lengths)
        return sum(self.live_rows)

    @property
    def layers_per_token(self) -> float:
        """Mean layers run per generated token over the decode passes (live rows only).

        Token 0 comes from the prefill (prompt positions run every layer); each later token is
        produced by a decode pass. When rows leave at different depths (CALM) this is each
        token's own depth. Speculative decoding: every layer pass of every draft and verify pass
        (per row), over the tokens they produced.
        """
        if self.token_layers is not None and self.live_mask is not None:
            pairs = [
                (d, ok)
                for ds, oks in zip(self.token_layers, self.live_mask, strict=True)
                for d, ok in zip(ds, oks, strict=True)
            ]
            live = [d for d, ok in pairs if ok]
            return sum(live) / len(live) if live else float(self.num_layers)
        work = sum(b * n for b, n in zip(self.budgets, self.live_rows, strict=True))
        rows = self.token_count
        return work / rows if rows else float(self.num_layers)

    @property
    def batch_layers_per_step(self) -> float:
        """Mean layers the batch actually ran per token step (the cost the clock sees)."""
        steps = self.decode_steps
        return sum(self.budgets) / steps if steps and self.budgets else float(self.num_layers)

    @property
    def theoretical_speedup(self) -> float:
        return self.num_layers / self.layers_per_token

    @property
    def batch_speedup(self) -> float:
        """``L / layers the batch ran per pass``: below the per-token figure when a batch must
        wait for its slowest token (CALM)."""
        return self.num_layers / self.batch_layers_per_step

    @property
    def tokens_generated(self) -> int:
        return sum(self.generated_lengths)

    @property
    def decode_ms_per_step(self) -> float:
        return 1000.0 * self.decode_seconds / max(1, self.decode_steps)

    @property
    def tokens_per_second(self) -> float:
        total = self.prefill_seconds + self.decode_seconds
        return self.tokens_generated / total if total > 0 else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "num_layers": self.num_layers,
            "batch_size": self.batch_size,
            "prompt_length": self.prompt_length,
            "decode_steps": self.decode_steps,
            "passes": self.passes,
            "budgets": list(self.budgets),
            "live_rows": list(self.live_rows),
            "generated_lengths": list(self.generated_lengths),
            "layers_per_token": self.layers_per_token,
            "theoretical_speedup": self.theoretical_speedup,
            "batch_layers_per_step": self.batch_layers_per_step,
            "batch_speedup": self.batch_speedup,
            "prefill_seconds": self.prefill_seconds,
            "decode_seconds": self.decode_seconds,
            "decode_ms_per_step": self.decode_ms_per_step,
            "tokens_per_second": self.tokens_per_second,
            "speculation": None if self.speculation is None else self.speculation.as_dict(),
            "graph": self.graph,
            "graph_fallback": self.graph_fallback,
        }


@dataclass
class GenerationOutput:
    sequences: torch.Tensor  # (B, P + N): left-padded prompt, then generated ids (pad after EOS)
    generated_ids: torch.Tensor  # (B, N)
    prompt_mask: torch.Tensor  # (B, P)
    stats: GenerationStats
    texts: list[str] | None = None
    step_logits: torch.Tensor | None = None  # (B, N, V): logits that chose each generated token
    active_layers: list[tuple[int, ...]] = field(default_factory=list)  # per decode pass
    schedule: dict[str, Any] = field(default_factory=dict)  # the schedule and its parameters
