"""One view of every decoder family: what the skip-aware loop needs from a causal LM.

An adapter exposes, without copying modeling code or touching the config: the input embedding
(token + position), the decoder layers, the per-call keyword arguments those layers take (rotary
position embeddings, per layer type where a family has several), the only place a layer is
called (``run_layer``), the output head (final norm, LM head, logit scale or soft-cap), and
``fill_kv`` (a layer's keys and values for a hidden state without running the layer).

:class:`GenericAdapter` serves every family of the common shape from a
:class:`~skipdecode.core.families.Family` description; :class:`OPTAdapter` keeps OPT's learned
positions with their offset and optional projections. ``fill_kv`` and ``kv_shape`` are generic
for all: the layer itself runs with a cache that records what the layer writes and stops the
layer right there, so the layer's own norm, projections (fused, Conv1D), q/k norms and rotary are
used exactly, and the rest of the layer never runs.
"""

from __future__ import annotations

import inspect
from functools import cached_property
from typing import Any

import torch
from torch import nn

from .context import ContextLimit, context_limit
from .families import FAMILIES, Family

__all__ = [
    "DecoderAdapter",
    "GenericAdapter",
    "OPTAdapter",
    "get_adapter",
    "SUPPORTED_MODEL_TYPES",
    "UnsupportedModelError",
]

SUPPORTED_MODEL_TYPES = tuple(sorted(FAMILIES))


class UnsupportedModelError(NotImplementedError):
    """A model skipdecode cannot run exactly; the message names the model type and why."""


class _KVWritten(Exception):
    """Raised by :class:`_StopAfterKV` once the layer has handed over its keys and values."""


class _StopAfterKV:
    """A cache that forwards a layer's keys/values to ``target`` (if any), then stops the layer."""

    def __init__(self, target: Any | None = None):
        self.target = target
        self.shape: tuple[int, ...] | None = None

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.shape = tuple(key.shape)
        if self.target is not None:
            self.target.update(key, value, layer_idx)
        raise _KVWritten

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0 if self.target is None else self.target.get_seq_length(layer_idx)


#: The names a layer takes its KV cache under, preferred first (transformers 5.24: cache).
CACHE_ARGUMENTS = ("cache", "past_key_values", "layer_past")


def cache_argument(layer: nn.Module) -> str | None:
    """The name ``layer`` takes its cache under (:data:`CACHE_ARGUMENTS`), or None."""
    params = inspect.signature(layer.forward).parameters
    return next((name for name in CACHE_ARGUMENTS if name in params), None)


class DecoderAdapter:
    """Uniform view of a decoder-only transformers model (see module docstring)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.config = model.config
        self._kv_shape: tuple[int, int] | None = None

    # -- the parts a family defines -------------------------------------------------------------
    @property
    def layers(self) -> nn.ModuleList:
        raise NotImplementedError

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Hidden states entering layer 0, ``(B, T, D)``."""
        raise NotImplementedError

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm / projections and the LM head: logits ``(B, T, V)``."""
        return self.head_logits(self.head_input(hidden), self.lm_head.weight, self.lm_head.bias)

    def head_input(self, hidden: torch.Tensor) -> torch.Tensor:
        """What the LM head multiplies: hidden states after the final norm (and projection)."""
        raise NotImplementedError

    @property
    def lm_head(self) -> nn.Module:
        raise NotImplementedError  # the output projection: ``weight`` (V, D), ``bias``

    def head_logits(self, inputs: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
        """Logits of ``inputs`` against rows of ``weight`` (all of the head's, or a subset's:
        ``core.subset_head``), with the family's logit scaling and soft-capping."""
        return torch.nn.functional.linear(inputs, weight, bias)

    def layer_kwargs(self, hidden: torch.Tensor, position_ids: torch.Tensor) -> dict[str, Any]:
        """Extra per-call keyword arguments for every layer (shared across layers)."""
        return {"position_ids": position_ids}

    def _layer_call_kwargs(self, layer_idx: int, kwargs: dict[str, Any]) -> dict[str, Any]:
        return kwargs

    def layer_kind(self, layer_idx: int) -> str:
        """The kind of layer ``layer_idx`` (Gemma 3: sliding or full attention); layers of one
        kind share their structure, so one compiled layer step serves them all."""
        types = getattr(self.config, "layer_types", None)
        return str(types[layer_idx]) if types else "layer"

    @cached_property
    def _cache_kwarg(self) -> str:  # read once: the layers' signature does not change
        return cache_argument(self.layers[0]) or "past_key_values"

    # -- common -----------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def context_limit(self) -> ContextLimit:
        """The positions this engine runs the model in, and the config field that sets them."""
        return context_limit(self.config)

    @property
    def max_positions(self) -> int:
        return self.context_limit.positions

    def layer_kwargs_slice(self, kwargs: dict[str, Any], length: int) -> dict[str, Any]:
        """The same arguments restricted to the first ``length`` positions."""
        return {k: _slice_positions(v, length) for k, v in kwargs.items()}

    def run_layer(
        self,
        layer_idx: int,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor | None,
        kwargs: dict[str, Any],
        cache: Any | None = None,
    ) -> torch.Tensor:
        """Run decoder layer ``layer_idx`` on ``hidden`` ``(B, T, D)``; its new hidden states.

        The one place the engine calls a layer: with ``cache`` the layer appends its keys and
        values there. Layers that return a tuple give their first element.
        """
        call = dict(self._layer_call_kwargs(layer_idx, kwargs))
        if cache is not None:
            call[self._cache_kwarg] = cache
            call["use_cache"] = True
        out = self.layers[layer_idx](hidden, attention_mask=attention_mask, **call)
        return out[0] if isinstance(out, tuple) else out

    def fill_kv(
        self, layer_idx: int, hidden: torch.Tensor, kwargs: dict[str, Any], cache: Any
    ) -> None:
        """Write ``layer_idx``'s keys/values for ``hidden`` into ``cache`` without running the
        rest of the layer (CALM's state propagation: an exited token's state feeds the KV above).
        """
        try:
            self.run_layer(layer_idx, hidden, None, kwargs, _StopAfterKV(cache))
        except _KVWritten:
            return
        raise UnsupportedModelError(
            f"model_type={self.config.model_type!r}: layer {layer_idx} did not write keys and "
            "values through the cache, so CALM's fill_kv cannot be computed for this family"
        )

    @property
    def kv_shape(self) -> tuple[int, int]:
        """``(num_key_value_heads, head_dim)`` of every layer's KV cache, as layer 0 writes them
        (a one-token dry run, read from the layer rather than from the config)."""
        if self._kv_shape is None:
            param = next(self.model.parameters())
            ids = torch.zeros(1, 1, dtype=torch.long, device=param.device)
            pos = torch.zeros_like(ids)
            probe = _StopAfterKV()
            with torch.no_grad():
                hidden = self.embed(ids, pos)
                try:
                    self.run_layer(0, hidden, None, self.layer_kwargs(hidden, pos), probe)
                except _KVWritten:
                    pass
            if probe.shape is None:
                raise UnsupportedModelError(
                    f"model_type={self.config.model_type!r}: layer 0 writes no keys and values "
                    "through the cache; the KV cache cannot be sized"
                )
            self._kv_shape = (int(probe.shape[1]), int(probe.shape[3]))
        return self._kv_shape


def _slice_positions(value: Any, length: int) -> Any:
    if isinstance(value, torch.Tensor):
        return value[:, :length]
    if isinstance(value, tuple):
        return tuple(_slice_positions(v, length) for v in value)
    if isinstance(value, dict):
        return {k: _slice_positions(v, length) for k, v in value.items()}
    return value


class GenericAdapter(DecoderAdapter):
    """Any family of the common shape (see :mod:`.families`)."""

    def __init__(self, model: nn.Module, family: Family):
        super().__init__(model)
        self.family = family
        missing = [
            name
            for name, owner in (
                (family.base, model),
                (family.head, model),
            )
            if not hasattr(owner, name)
        ]
        if missing:
            raise UnsupportedModelError(
                f"model_type={self.config.model_type!r} has no {missing} where its family "
                "description expects them"
            )
        self.base = getattr(model, family.base)
        parts = [family.embed_tokens, family.layers, family.norm] + (
            [family.positions] if family.positions else []
        )
        absent = [p for p in parts if not hasattr(self.base, p)]
        if absent:
            raise UnsupportedModelError(
                f"model_type={self.config.model_type!r}: its decoder stack has no {absent} (it "
                "does not have the common shape: embedding, layers, final norm)"
            )
        self._layers = getattr(self.base, family.layers)
        self.rotary = getattr(self.base, "rotary_emb", None)
        self.layer_types: list[str] | None = getattr(self.config, "layer_types", None)
        self._rotary_per_type = self.rotary is not None and (
            "layer_type" in inspect.signature(self.rotary.forward).parameters
        )
        if cache_argument(self._layers[0]) is None:
            raise UnsupportedModelError(
                f"model_type={self.config.model_type!r}: its layers take no cache argument "
                f"(one of {CACHE_ARGUMENTS}); the KV cache cannot be handed to them"
            )

    @property
    def layers(self) -> nn.ModuleList:
        return self._layers

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        hidden = getattr(self.base, self.family.embed_tokens)(input_ids)
        if self.family.positions:  # padding positions (-1) read row 0; their outputs are unused
            table = getattr(self.base, self.family.positions)
            hidden = hidden + table(position_ids.clamp(min=0)).to(hidden.dtype)
        if self.family.embedding_multiplier:
            hidden = hidden * getattr(self.config, self.family.embedding_multiplier)
        return hidden

    def layer_kwargs(self, hidden: torch.Tensor, position_ids: torch.Tensor) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"position_ids": position_ids}
        if self.rotary is None:
            return kwargs
        if self._rotary_per_type and self.layer_types:
            kwargs["position_embeddings"] = {
                t: self.rotary(hidden, position_ids, t) for t in sorted(set(self.layer_types))
            }
        else:
            kwargs["position_embeddings"] = self.rotary(hidden, position_ids=position_ids)
        return kwargs

    def _layer_call_kwargs(self, layer_idx: int, kwargs: dict[str, Any]) -> dict[str, Any]:
        emb = kwargs.get("position_embeddings")
        if isinstance(emb, dict):  # rotary per layer type (Gemma 3: local and global)
            assert self.layer_types is not None
            return {**kwargs, "position_embeddings": emb[self.layer_types[layer_idx]]}
        return kwargs

    def head_input(self, hidden: torch.Tensor) -> torch.Tensor:
        return getattr(self.base, self.family.norm)(hidden)

    @property
    def lm_head(self) -> nn.Module:
        return getattr(self.model, self.family.head)

    def head_logits(self, inputs: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
        logits = torch.nn.functional.linear(inputs, weight, bias)
        if self.family.logit_divisor:
            logits = logits / getattr(self.config, self.family.logit_divisor)
        cap = (
            getattr(self.config, self.family.logit_softcap, None)
            if self.family.logit_softcap
            else None
        )
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits


class OPTAdapter(DecoderAdapter):
    """facebook/opt-*: learned positions (offset 2), pre- or post-norm, optional projections."""

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.decoder = model.model.decoder

    @property
    def layers(self) -> nn.ModuleList:
        return self.decoder.layers

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        d = self.decoder
        tokens = d.embed_tokens(input_ids)
        if d.project_in is not None:
            tokens = d.project_in(tokens)
        # OPTLearnedPositionalEmbedding adds its offset to the given position ids.
        positions = d.embed_positions(None, 0, position_ids=position_ids)
        return tokens + positions.to(tokens.dtype)

    def head_input(self, hidden: torch.Tensor) -> torch.Tensor:
        d = self.decoder
        if d.final_layer_norm is not None:
            hidden = d.final_layer_norm(hidden)
        if d.project_out is not None:
            hidden = d.project_out(hidden)
        return hidden

    @property
    def lm_head(self) -> nn.Module:
        return self.model.lm_head


def get_adapter(model: nn.Module, verify_unknown: bool = True) -> DecoderAdapter:
    """The adapter for ``model`` (a transformers ``*ForCausalLM``), or a clear error.

    A model type not in :data:`~skipdecode.core.families.FAMILIES` is tried with the common
    shape and accepted only if the generic path reproduces the model's own logits on a short
    input; otherwise the error says why and lists the supported types.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type == "opt":
        return OPTAdapter(model)
    if model_type in FAMILIES:
        return GenericAdapter(model, FAMILIES[model_type])
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    try:
        adapter = GenericAdapter(model, Family())
    except UnsupportedModelError as e:
        raise UnsupportedModelError(f"{e}; supported model types: {supported}") from None
    if verify_unknown:
        diff = _max_logit_diff(model, adapter)
        if not diff <= 1e-4:
            raise UnsupportedModelError(
                f"model_type={model_type!r} has the common shape, but its own forward does "
                f"something between embedding and head that skipdecode does not reproduce "
                f"(max |logit difference| {diff:.3g} on a short input); supported model types: "
                f"{supported}"
            )
    return adapter


def _max_logit_diff(model: nn.Module, adapter: DecoderAdapter) -> float:
    """Largest difference between the adapter's layer loop and the model's own logits."""
    param = next(model.parameters())
    vocab = int(getattr(model.config, "vocab_size", 8))
    ids = torch.arange(1, 6, device=param.device)[None] % max(1, vocab)
    pos = torch.arange(ids.shape[1], device=param.device)[None]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            hidden = adapter.embed(ids, pos)
            kwargs = adapter.layer_kwargs(hidden, pos)
            for i in range(adapter.num_layers):
                hidden = adapter.run_layer(i, hidden, None, kwargs)
            ours = adapter.head(hidden).float()
            theirs = model(input_ids=ids).logits.float()
    finally:
        model.train(was_training)
    return float((ours - theirs).abs().max())
