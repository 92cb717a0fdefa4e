"""Skip-aware execution of transformers causal LMs: a masked teacher-forced forward for training
and batched, KV-cached SkipDecode generation.

The loop is ours (embed, run the chosen layers, final norm, LM head); the layers, weights and
tokenizers are transformers'. The model's config is never touched: the plan is passed in."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .adapters import DecoderAdapter, get_adapter
from .cache import DynamicKVCache, KVCache, StaticKVCache
from .clock import eval_mode
from .compiled import CompiledLayers
from .context import Demand, check_context
from .device_rounds import device_generate, sync_free
from .loop import DecodeRequest, plan_generate
from .masks import active_prefixes, causal_attention_mask, position_ids_from_mask
from .options import DecodeOptions
from .pool import CachePool
from .prompts import lengths_with_eos, prepare_inputs, special_ids
from .rounds import PaceBook
from .sampling import SamplingConfig
from .speculative import RoundView, speculative_generate, speculative_output
from .stats import GenerationOutput, GenerationStats
from .step import LayerPlan, Speculation

__all__ = ["SkipDecoder", "GenerationOutput", "GenerationStats"]

log = logging.getLogger(__name__)


class SkipDecoder:
    """Runs a transformers causal LM layer by layer under a skip plan.

    ``forward`` is the teacher-forced pass used in training; ``generate`` decodes a batch with a
    KV cache under any :class:`~skipdecode.schedules.Schedule`.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any | None = None,
        cache: str | None = None,
        compile: bool | str | None = None,
        compile_graph: str | None = None,
        *,
        options: DecodeOptions | None = None,
    ):
        """``options`` (:class:`~skipdecode.core.options.DecodeOptions`), or its settings one by
        one (``cache``, ``compile``, ``compile_graph``; each left out at its default)."""
        given = {"cache": cache, "compile": compile, "compile_graph": compile_graph}
        given = {k: v for k, v in given.items() if v is not None}
        if options is not None and given:
            raise ValueError(f"give options or {sorted(given)}, not both")
        self.model = model
        self.tokenizer = tokenizer
        self.adapter: DecoderAdapter = get_adapter(model)
        # compile="auto": the fastest exact path for the device, chosen now (core.auto)
        self.options = (options or DecodeOptions(**given)).resolved(self.device, self.num_layers)
        self.cache_kind = self.options.cache
        # compile=True (or a torch.compile mode): decode passes run compiled (core.compiled), a
        # graph per layer kind or per layer set (compile_graph="plan"); prefill runs eager.
        self.compiled: CompiledLayers | None = None
        mode = self.options.compile_mode
        # CUDA graphs: every decode step is recorded once per shape and replayed (core.graphs),
        # on caches from a pool at fixed addresses kept across calls (core.pool); the compiled
        # functions themselves compile in the default mode
        self.pool: CachePool | None = None
        if self.options.cuda_graphs:
            kv_heads, head_dim = self.adapter.kv_shape
            self.pool = CachePool(self.num_layers, kv_heads, head_dim, self.dtype, self.device)
            mode = "default"
            if self.device.type != "cuda":
                log.warning(
                    "compile=%r replays CUDA graphs, which need a CUDA device; on %s each "
                    "recorded step is called on its static buffers instead (the same results, "
                    "no graph), on the same cache pool",
                    self.options.compile, self.device.type,
                )  # fmt: skip
        if mode is not None:
            self.compiled = CompiledLayers(
                self.adapter, mode, graph=self.options.compile_graph,
                cuda_graphs=self.options.cuda_graphs,
            )  # fmt: skip
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
        A layer plan decodes in :func:`~skipdecode.core.loop.plan_generate`, a speculative
        schedule in :func:`~skipdecode.core.speculative.speculative_generate`.
        """
        input_ids, attention_mask = prepare_inputs(
            inputs, attention_mask, self.tokenizer, self.device
        )
        eos_ids, pad_id = special_ids(self.model, self.tokenizer, eos_token_id, pad_token_id)
        self._validate(schedule, input_ids.shape[1], max_new_tokens)
        req = DecodeRequest(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            sampling=SamplingConfig(do_sample, temperature, top_p, seed),
            eos_ids=list(eos_ids),
            pad_id=pad_id,
            stop=stop_at_eos and len(eos_ids) > 0,
            return_logits=return_logits,
        )
        speculation = schedule.speculation()
        if speculation is None:
            out = plan_generate(self, req, schedule)
        else:
            out = self._speculative(req, schedule, speculation, on_round, profile_rounds)
        if decode_texts and self.tokenizer is not None:
            out.texts = self.decode(out.generated_ids, req.eos_ids if req.stop else [])
        return out

    def _speculative(
        self,
        req: DecodeRequest,
        schedule: LayerPlan,
        speculation: Speculation,
        on_round: Callable[[RoundView], None] | None,
        profile_rounds: bool,
    ) -> GenerationOutput:
        if req.return_logits:  # its tokens come from verify passes, several per pass
            raise ValueError("return_logits=True is not available with a speculative schedule")
        stops = req.eos_ids if req.stop else []
        watched = on_round is not None or profile_rounds
        rounds, why = sync_free(self, speculation, req.sampling, stops, req.max_new_tokens, watched)
        with eval_mode(self.model):  # draft plans nest per round (see core.speculative)
            if rounds:  # on the device, no host sync inside a round (core.device_rounds)
                result = device_generate(self, req.input_ids, req.attention_mask, speculation,
                                         req.max_new_tokens, stops, req.pad_id)  # fmt: skip
            else:
                result = speculative_generate(
                    self, req.input_ids, req.attention_mask, speculation, req.max_new_tokens,
                    req.sampling, req.eos_ids, req.pad_id, req.stop, on_round, profile_rounds,
                    self.paces, fallback=why,
                )  # fmt: skip
        out = speculative_output(result, self.num_layers, req.input_ids, req.attention_mask)
        out.schedule = schedule.describe()
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
        if self.pool is not None:  # the same buffers every call (CUDA graphs replay them)
            return self.pool.cache(batch, capacity)
        if self.cache_kind == "dynamic":
            return DynamicKVCache(self.num_layers)
        kv_heads, head_dim = self.adapter.kv_shape
        return StaticKVCache(
            self.num_layers, batch, kv_heads, head_dim, capacity, self.dtype, device
        )

    @property
    def uses_sdpa(self) -> bool:
        """Whether the model attends with SDPA (which then runs unmasked where nothing pads)."""
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
        # the same check and message as the pipeline's (core.context); the lossless mode's
        # drafted positions past the output's end are clamped, so they need no room
        demand = Demand(
            "prompt + new tokens",
            ("prompt length", prompt_len),
            (("max_new_tokens", max_new_tokens),),
        )
        model = getattr(self.model.config, "name_or_path", None) or self.model.config.model_type
        check_context([demand], self.adapter.context_limit, str(model), rule_setting=None)
