"""The decode loop a GPU engineer would write around a transformers model (gpt-fast style).

The baseline ``generate`` is not: ``generate`` spends most of a small model's step in host work
(per-step Python, a stop check that reads the device every step, a fresh cache per call).
:class:`FastLoop` is one compiled one-token step (``fullgraph=True``; ``reduce-overhead``, CUDA
graphs, on a GPU) over the model's own forward with one static cache allocated once and reused
(reset between calls), greedy choice on the device, each step's token copied out of the graph's
static output before the next replay overwrites it, tokens written into a preallocated buffer and
positions and the attention mask kept on the device: no host sync inside the loop; the clock
reads the device once at each end. Prefill is the model's forward over the prompt (its logits at
the last position only), eager. Every row of a left-padded batch keeps its own positions.

    loop = FastLoop(model, batch_size=8, max_len=96)
    tokens, prefill_s, decode_s = loop.generate(ids, mask, new_tokens=32)
"""

from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["FastLoop"]


def _sync(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class FastLoop:
    """A compiled one-token greedy decode loop over ``model`` (module docstring)."""

    def __init__(self, model: Any, batch_size: int, max_len: int, compiled: bool = True):
        from transformers import StaticCache

        self.model = model
        self.device = next(model.parameters()).device
        self.max_len = int(max_len)
        self.cache = StaticCache(model.config, max_cache_len=self.max_len)
        self.batch_size = int(batch_size)
        self.mask = torch.zeros(batch_size, max_len, dtype=torch.long, device=self.device)
        mode = "reduce-overhead" if self.device.type == "cuda" else "default"
        self._step = (
            torch.compile(self._one_token, fullgraph=True, mode=mode, dynamic=False)
            if compiled
            else self._one_token
        )
        self.compiled = compiled

    def _one_token(
        self, token: torch.Tensor, position: torch.Tensor, column: torch.Tensor
    ) -> torch.Tensor:
        """The next greedy token of every row: ``token`` ``(B, 1)`` at ``position`` ``(B, 1)``
        written into cache column ``column`` ``(1,)``."""
        out = self.model(
            input_ids=token,
            attention_mask=self.mask,
            position_ids=position,
            cache_position=column,
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits[:, -1].argmax(-1, keepdim=True)

    @torch.no_grad()
    def generate(
        self, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int
    ) -> tuple[torch.Tensor, float, float]:
        """``new_tokens`` greedy tokens per row of the left-padded ``ids`` (EOS never stops a
        row); returns them ``(B, new_tokens)``, the prefill seconds and the decode seconds."""
        B, P = ids.shape
        if B != self.batch_size or P + new_tokens > self.max_len:
            raise ValueError(
                f"FastLoop built for batch {self.batch_size} and {self.max_len} positions; "
                f"got batch {B}, prompt {P} + {new_tokens} new tokens"
            )
        self.cache.reset()
        self.mask.zero_()
        self.mask[:, :P] = mask
        self.mask[:, P : P + new_tokens] = 1
        out = torch.empty(B, new_tokens, dtype=torch.long, device=self.device)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        t0 = _sync(self.device)
        logits = self.model(
            input_ids=ids,
            attention_mask=self.mask[:, :P],
            position_ids=positions,
            cache_position=torch.arange(P, device=self.device),
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits
        token = logits[:, -1].argmax(-1, keepdim=True)
        out[:, :1] = token
        t1 = _sync(self.device)
        position = positions[:, -1:] + 1
        column = torch.tensor([P], device=self.device)
        for i in range(1, new_tokens):
            if self.device.type == "cuda":  # a new step: the last step's outputs are done with
                torch.compiler.cudagraph_mark_step_begin()
            # a replay writes its output into one static buffer that the next replay overwrites:
            # the token is copied out before it feeds the next step (as gpt-fast does)
            token = self._step(token, position, column).clone()
            out[:, i : i + 1] = token
            position = position + 1
            column = column + 1
        t2 = _sync(self.device)
        return out, t1 - t0, t2 - t1
