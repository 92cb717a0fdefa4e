"""Where the time of one decode pass goes: a wall-clock timer and the cost split of a step.

A step that runs ``m`` of ``L`` layers ideally costs ``t_other + m * t_layer``, with ``t_other``
the time outside the decoder layers (embedding, final norm, LM head, token choice, bookkeeping),
measured by running the same step with no layers, and ``t_layer = (t_full - t_other) / L``. The
benchmark and the evaluation's consistency check both use this split.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from .compiled import bucketed_capacity, future_mask
from .engine import SkipDecoder
from .masks import decode_attention_mask
from .step import DecodeStep

__all__ = ["time_call", "step_cost_split", "ideal_speedup"]


def time_call(fn: Callable[[], Any], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def transformers_generate_seconds(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    new_tokens: int,
    pad_id: int,
    compiled: bool = False,
) -> tuple[float, float]:
    """(prefill, decode) seconds of transformers' greedy ``generate`` for exactly
    ``new_tokens`` tokens (EOS off). The prefill is ``generate`` for one token (its prefill
    computes the LM head at the last prompt position only, ``logits_to_keep=1``), the decode is
    the rest: the same split as the engine's own timing. (Timing a plain forward as the prefill
    would count the LM head at every prompt position, which ``generate`` never pays, and so
    understate its decode time: by ~14 ms/step at batch 32 for the smollm2-135m shape.)

    ``compiled``: the optimized peer a user would run, a static cache and ``generate``'s own
    ``torch.compile`` of the forward (on every device). Both calls get a fresh static cache of
    the same size, so they run the same compiled graphs."""

    def run(n: int) -> Any:
        extra: dict[str, Any] = {}
        if compiled:
            from transformers import StaticCache
            from transformers.generation.configuration_utils import CompileConfig

            # static shapes, as the compiled decode path: the default (dynamic=None) would
            # turn the batch dimension dynamic once a second batch size compiles
            config = CompileConfig(dynamic=False)
            config._compile_all_devices = True  # generate compiles on GPUs only by default
            cache = StaticCache(model.config, max_cache_len=ids.shape[1] + new_tokens)
            extra = {"past_key_values": cache, "compile_config": config}
        return model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            eos_token_id=None,
            pad_token_id=pad_id,
            **extra,
        )

    with torch.no_grad():
        prefill = time_call(lambda: run(1), ids.device)
        total = time_call(lambda: run(new_tokens), ids.device)
    return prefill, max(total - prefill, 0.0)


def step_cost_split(
    dec: SkipDecoder, ids: torch.Tensor, mask: torch.Tensor, steps: int
) -> dict[str, float]:
    """Time of one decode step outside the layers, and of the LM head alone (seconds), on the
    decoder's own path (a compiled decoder's step and head run compiled)."""
    B, P = ids.shape
    device = ids.device
    compiled = dec.compiled
    capacity = P + 1 if compiled is None else bucketed_capacity(P + 1)
    cache = dec.new_cache(B, capacity)
    decode_mask = decode_attention_mask(mask, capacity, dec.dtype)
    with torch.no_grad():
        logits = dec.prefill(ids, mask, cache)
        token = logits.argmax(-1)
        position = mask.sum(-1, keepdim=True)
        hidden = dec.adapter.embed(token[:, None], position)
        step = DecodeStep(
            index=0,
            token=token,
            position=position,
            live=torch.ones_like(token, dtype=torch.bool),
            adapter=dec.adapter,
            cache=cache,
            cache_position=P,
            attention_mask=decode_mask[..., : P + 1],
            compiled=compiled,
            capacity_mask=None if compiled is None else future_mask(decode_mask, P),
        )
        head = dec.adapter.head if compiled is None else compiled.head

        def no_layer_step():
            return step.run(()).argmax(-1)

        no_layer_step(), head(hidden)  # a compiled head compiles here, untimed
        other = [time_call(no_layer_step, device) for _ in range(steps)]
        heads = [time_call(lambda: head(hidden), device) for _ in range(steps)]
    return {"non_layer_s": statistics.median(other), "head_s": statistics.median(heads)}


def ideal_speedup(
    full_step_s: float, non_layer_s: float, num_layers: int, layers_run: float
) -> float:
    """Decode speedup of a pass running ``layers_run`` of ``num_layers`` layers if every layer
    cost the same and the work outside the layers stayed as measured."""
    per_layer = max(0.0, full_step_s - non_layer_s) / num_layers
    return full_step_s / (non_layer_s + layers_run * per_layer)
