"""Skip-aware execution of transformers causal LMs: a masked teacher-forced forward for training
and batched, KV-cached SkipDecode generation.

The loop is ours (embed, run the chosen layers, final norm, LM head); the layers, weights and
tokenizers are transformers'. The model's config is never touched: the plan is passed in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .adapters import DecoderAdapter, get_adapter
from .cache import DynamicKVCache, KVCache, StaticKVCache
from .clock import eval_mode, now
from .compiled import CompiledLayers, bucketed_capacity, future_mask
from .masks import (
    active_prefixes,
    causal_attention_mask,
    decode_attention_mask,
    position_ids_from_mask,
)
from .prompts import lengths_with_eos, prepare_inputs, special_ids
from .rounds import PaceBook
from .sampling import SamplingConfig, select_next
from .speculative import RoundView, speculative_generate, speculative_output
from .stats import GenerationOutput, GenerationStats
from .step import DecodeStep, LayerPlan, check_nested

__all__ = ["SkipDecoder", "GenerationOutput", "GenerationStats"]


class SkipDecoder:
    """Runs a transformers causal LM layer by layer under a skip plan.

    ``forward`` is the teacher-forced pass used in training; ``generate`` decodes a batch with a
    KV cache under any :class:`~skipdecode.schedules.Schedule`.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any | None = None,
        cache: str = "static",
        compile: bool | str = False,
        compile_graph: str = "layer",
    ):
        if cache not in ("static", "dynamic"):
            raise ValueError(f"cache={cache!r} is not allowed: choose 'static' or 'dynamic'")
        if compile and cache != "static":
            raise ValueError(
                f"compile={compile!r} needs cache='static' (the compiled step writes the "
                f"preallocated cache in place), not cache={cache!r}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.adapter: DecoderAdapter = get_adapter(model)
        self.cache_kind = cache
        # compile=True (or a torch.compile mode): decode passes run compiled (core.compiled), a
        # graph per layer kind or per layer set (compile_graph="plan"); prefill runs eager.
        self.compiled: CompiledLayers | None = None
        if compile:
            mode = "default" if compile is True else str(compile)
            self.compiled = CompiledLayers(self.adapter, mode, graph=compile_graph)
        self.paces = PaceBook()  # the lossless mode's auto_off verdicts, kept across calls

    @property
    def num_layers(self) -> int:
        return self.adapter.num_layers

    # ------------------------------------------------------------------------------------
    # Teacher-forced forward
    # ------------------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        layer_mask: torch.Tensor | None = None,
        prefix_slicing: bool = True,
    ) -> torch.Tensor:
        """Logits ``(B, T, V)``; differentiable.

        ``layer_mask`` ``(B, L, T)`` (bool) says which (layer, position) pairs run; elsewhere the
        hidden state passes through unchanged. ``None`` runs every layer. With
        ``prefix_slicing`` (default) each layer is computed only on the prefix of positions
        ending at its last active position in the batch: attention is causal, so the prefix's
        outputs do not depend on what follows, and a layer no position uses costs nothing.
        ``prefix_slicing=False`` is the plain path: every layer on every position, then masked.
        """
        B, T = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        L = self.num_layers
        if layer_mask is not None and tuple(layer_mask.shape) != (B, L, T):
            raise ValueError(
                f"layer_mask has shape {tuple(layer_mask.shape)}; expected (batch, layers, "
                f"positions) = {(B, L, T)}"
            )
        position_ids = position_ids_from_mask(attention_mask)
        hidden = self.adapter.embed(input_ids, position_ids)
        attn = causal_attention_mask(attention_mask, hidden.dtype)
        kwargs = self.adapter.layer_kwargs(hidden, position_ids)

        prefixes = active_prefixes(layer_mask, L, T) if prefix_slicing else [T] * L
        run = self.adapter.run_layer
        for layer_idx in range(L):
            n = prefixes[layer_idx]
            if n == 0:
                continue
            if n == T and (layer_mask is None or bool(layer_mask[:, layer_idx].all())):
                hidden = run(layer_idx, hidden, attn, kwargs)
                continue
            if n == T:  # whole sequence computed, then masked
                out = run(layer_idx, hidden, attn, kwargs)
                hidden = torch.where(
                    layer_mask[:, layer_idx, :, None].to(hidden.device), out, hidden
                )
                continue
            head = hidden[:, :n]
            out = run(
                layer_idx, head, attn[:, :, :n, :n], self.adapter.layer_kwargs_slice(kwargs, n)
            )
            assert layer_mask is not None
            keep = layer_mask[:, layer_idx, :n, None].to(hidden.device)
            head = torch.where(keep, out, head)
            hidden = torch.cat([head, hidden[:, n:]], dim=1) if n < T else head
        return self.adapter.head(hidden)

    def forward_exits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        exit_layers: Sequence[int],
        positions: torch.Tensor | None = None,
    ) -> dict[int, torch.Tensor]:
        """Logits ``(B, T, V)`` read out through the shared head after each layer in
        ``exit_layers`` (every layer runs; differentiable; CALM trains on their losses), or
        ``(N, V)`` at the true entries of a boolean ``positions`` mask ``(B, T)`` only."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        wanted = set(exit_layers)
        bad = sorted(i for i in wanted if not 0 <= i < self.num_layers)
        if bad:
            raise ValueError(
                f"exit layers {bad} are outside the model's layers [0, {self.num_layers - 1}]"
            )
        position_ids = position_ids_from_mask(attention_mask)
        hidden = self.adapter.embed(input_ids, position_ids)
        attn = causal_attention_mask(attention_mask, hidden.dtype)
        kwargs = self.adapter.layer_kwargs(hidden, position_ids)
        out: dict[int, torch.Tensor] = {}
        for layer_idx in range(max(wanted) + 1):
            hidden = self.adapter.run_layer(layer_idx, hidden, attn, kwargs)
            if layer_idx in wanted:
                if positions is None:
                    out[layer_idx] = self.adapter.head(hidden)
                else:
                    out[layer_idx] = self.adapter.head(hidden[positions].unsqueeze(0))[0]
        return out

    # ------------------------------------------------------------------------------------
    # Generation
    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        inputs: Sequence[str] | torch.Tensor,
        schedule: LayerPlan,
        max_new_tokens: int = 64,
        attention_mask: torch.Tensor | None = None,
        *,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        stop_at_eos: bool = True,
        return_logits: bool = False,
        decode_texts: bool = True,
        on_round: Callable[[RoundView], None] | None = None,
        profile_rounds: bool = False,
    ) -> GenerationOutput:
        """Decode a batch under ``schedule`` (any :class:`~skipdecode.schedules.Schedule`).

        ``inputs`` are prompt strings (tokenised with the decoder's tokenizer, left-padded) or
        left-padded ids with ``attention_mask``. Greedy unless ``do_sample``. Rows stop at EOS
        (and keep padding) unless ``stop_at_eos=False``; the loop ends early once every row has
        stopped. ``on_round``: a speculative schedule's per-round view (tests, inspection);
        ``profile_rounds``: time the parts of its rounds (``stats.speculation.phase_seconds``).
        """
        input_ids, attention_mask = prepare_inputs(
            inputs, attention_mask, self.tokenizer, self.device
        )
        eos_ids, pad_id = special_ids(self.model, self.tokenizer, eos_token_id, pad_token_id)
        B, P = input_ids.shape
        self._validate(schedule, P, max_new_tokens)
        sampling = SamplingConfig(do_sample, temperature, top_p, seed)
        device = input_ids.device
        generator = sampling.generator(device)
        stop = stop_at_eos and len(eos_ids) > 0
        eos_tensor = torch.tensor(eos_ids or [-1], device=device)

        n_steps = max(0, max_new_tokens - 1)
        speculation = schedule.speculation()
        if speculation is not None:
            if return_logits:  # its tokens come from verify passes, several per pass
                raise ValueError("return_logits=True is not available with a speculative schedule")
            with eval_mode(self.model):  # draft plans nest per round (see core.speculative)
                result = speculative_generate(
                    self, input_ids, attention_mask, speculation, max_new_tokens, sampling,
                    eos_ids, pad_id, stop, on_round, profile_rounds, self.paces,
                )  # fmt: skip
            out = speculative_output(result, self.num_layers, input_ids, attention_mask)
            out.schedule = schedule.describe()
            if decode_texts and self.tokenizer is not None:
                out.texts = self.decode(out.generated_ids, eos_ids if stop else [])
            return out
        run = schedule.start(B)
        static = schedule.static()
        if static is not None:
            check_nested([static.active_layers(g) for g in range(n_steps)])
        token_layers: list[torch.Tensor] = []
        ran_layers: list[tuple[int, ...]] = []

        compiled = self.compiled
        with eval_mode(self.model):
            capacity = P + max(0, max_new_tokens - 1)
            if compiled is not None:  # fewer distinct shapes, fewer compiles
                capacity = bucketed_capacity(capacity)
            cache = self.new_cache(B, capacity)
            dtype = self.dtype
            # Without padding, SDPA needs no mask (causal prefill, full decode rows), which also
            # lets it run grouped-query attention without copying K/V per head.
            maskless = self._sdpa() and bool(attention_mask.all())
            decode_mask = (
                None if maskless else decode_attention_mask(attention_mask, capacity, dtype)
            )
            # The compiled step attends over the whole capacity: unwritten columns are hidden.
            full = (
                None if compiled is None else decode_attention_mask(attention_mask, capacity, dtype)
            )
            valid = attention_mask.long().sum(-1)  # (B,) real prompt tokens per row

            generated: list[torch.Tensor] = []
            logits_seen: list[torch.Tensor] = []
            live_history: list[torch.Tensor] = []
            finished = torch.zeros(B, dtype=torch.bool, device=device)

            compiling = 0.0 if compiled is None else compiled.compile_seconds
            t0 = now(device)
            logits = self.prefill(input_ids, attention_mask, cache, maskless)
            t1 = now(device)
            budgets: list[int] = []
            if max_new_tokens > 0:
                token = select_next(logits, sampling, generator)
                generated.append(token)
                if return_logits:
                    logits_seen.append(logits.float())
                if stop:
                    finished = torch.isin(token, eos_tensor)
            # Checking "all rows finished" reads a device value; on a GPU that is a host sync,
            # so it is done every few steps there (extra steps only decode padding).
            check_every = 8 if device.type == "cuda" else 1
            for g in range(n_steps):
                if stop and g % check_every == 0 and bool(finished.all()):
                    break
                live = ~finished
                live_history.append(live)
                step = DecodeStep(
                    index=g,
                    token=token,
                    position=(valid + g)[:, None],  # (B, 1) position id of token g
                    live=live,
                    adapter=self.adapter,
                    cache=cache,
                    cache_position=P + g,
                    attention_mask=None if decode_mask is None else decode_mask[..., : P + g + 1],
                    compiled=compiled,
                    capacity_mask=None if full is None else future_mask(full, P + g),
                )
                result = run.decode(step)
                logits = result.logits
                ran_layers.append(tuple(result.layers))
                budgets.append(len(result.layers))
                if result.token_layers is not None:
                    token_layers.append(result.token_layers)
                nxt = select_next(logits, sampling, generator)
                if stop:
                    nxt = torch.where(finished, torch.full_like(nxt, pad_id), nxt)
                    finished = finished | torch.isin(nxt, eos_tensor)
                token = nxt
                generated.append(token)
                if return_logits:
                    logits_seen.append(logits.float())
            t2 = now(device)
            if compiled is not None:  # compile time is reported, never counted as decoding
                compiling = compiled.compile_seconds - compiling

        gen = torch.stack(generated, 1) if generated else input_ids.new_zeros(B, 0)
        # per-row depths, when the schedule's rows left at different depths (every pass reports)
        per_row = None
        if token_layers and len(token_layers) == len(budgets):
            per_row = [d.tolist() for d in token_layers]
        out = GenerationOutput(
            sequences=torch.cat([input_ids, gen], dim=1),
            generated_ids=gen,
            prompt_mask=attention_mask,
            stats=GenerationStats(
                num_layers=self.num_layers,
                prompt_length=P,
                budgets=budgets,
                live_rows=[int(x) for x in torch.stack(live_history).sum(-1).tolist()]
                if live_history
                else [],
                generated_lengths=lengths_with_eos(gen, eos_ids if stop else []),
                prefill_seconds=t1 - t0,
                decode_seconds=t2 - t1 - compiling,
                batch_size=B,
                compile_seconds=compiling,
                compiled=compiled is not None,
                token_layers=per_row,
                live_mask=[x.tolist() for x in live_history] if per_row is not None else None,
            ),
            step_logits=torch.stack(logits_seen, 1) if logits_seen else None,
            active_layers=ran_layers,
            schedule=schedule.describe(),
        )
        if decode_texts and self.tokenizer is not None:
            out.texts = self.decode(gen, eos_ids if stop else [])
        return out

    def decode(self, generated: torch.Tensor, eos_ids: Sequence[int] = ()) -> list[str]:
        """Texts of generated ids, cut at the first EOS."""
        texts = []
        for row, n in zip(generated.tolist(), lengths_with_eos(generated, eos_ids), strict=True):
            ids = row[:n]
            if ids and ids[-1] in eos_ids:
                ids = ids[:-1]
            texts.append(self.tokenizer.decode(ids, skip_special_tokens=True))
        return texts

    # ------------------------------------------------------------------------------------
    def prefill(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: KVCache,
        maskless: bool = False,
    ) -> torch.Tensor:
        """All layers over the prompt, filling every layer's cache; last-position logits."""
        position_ids = position_ids_from_mask(attention_mask)
        hidden = self.adapter.embed(input_ids, position_ids)
        attn = None if maskless else causal_attention_mask(attention_mask, hidden.dtype)
        kwargs = self.adapter.layer_kwargs(hidden, position_ids)
        cache.begin(0)
        for layer_idx in range(self.num_layers):
            hidden = self.adapter.run_layer(layer_idx, hidden, attn, kwargs, cache)
        return self.adapter.head(hidden[:, -1:])[:, 0]

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty KV cache for ``batch`` rows and ``capacity`` positions (the decoder's kind)."""
        device = self.device
        if self.cache_kind == "dynamic":
            return DynamicKVCache(self.num_layers)
        kv_heads, head_dim = self.adapter.kv_shape
        return StaticKVCache(
            self.num_layers, batch, kv_heads, head_dim, capacity, self.dtype, device
        )

    def _sdpa(self) -> bool:
        return getattr(self.model.config, "_attn_implementation", None) == "sdpa"

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _validate(self, schedule: LayerPlan, prompt_len: int, max_new_tokens: int) -> None:
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(
                f"max_new_tokens={max_new_tokens!r} is not allowed: must be an integer >= 0"
            )
        if schedule.num_layers != self.num_layers:
            raise ValueError(
                f"schedule is built for {schedule.num_layers} layers but the model has "
                f"{self.num_layers}; build it for this model (e.g. schedule=target_2x)"
            )
        limit = self.adapter.max_positions
        if prompt_len + max_new_tokens > limit:
            raise ValueError(
                f"prompt length {prompt_len} + max_new_tokens {max_new_tokens} exceeds the "
                f"model's {limit} positions (max_position_embeddings); shorten the prompt "
                "(dataset truncation) or lower max_new_tokens"
            )
