"""One small adapter per architecture family.

An adapter exposes what the skip-aware loop needs from a transformers causal LM, without
copying its modeling code or touching its config: the input embedding (token + position), the
list of decoder layers, the per-call keyword arguments those layers take (rotary position
embeddings for the Llama family), and the output head (final norm, projections, LM head).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import nn

__all__ = ["DecoderAdapter", "OPTAdapter", "LlamaAdapter", "get_adapter", "SUPPORTED_MODEL_TYPES"]


class DecoderAdapter(ABC):
    """Uniform view of a decoder-only transformers model."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.config = model.config

    @property
    @abstractmethod
    def layers(self) -> nn.ModuleList:
        """The decoder layers, bottom to top."""

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def max_positions(self) -> int:
        return int(self.config.max_position_embeddings)

    @abstractmethod
    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Hidden states entering layer 0, ``(B, T, D)``."""

    def layer_kwargs(self, hidden: torch.Tensor, position_ids: torch.Tensor) -> dict[str, Any]:
        """Extra per-call keyword arguments for every layer (shared across layers)."""
        return {"position_ids": position_ids}

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
        values there. A family whose layers return extra outputs (a tuple) or need other
        arguments overrides this.
        """
        layer = self.layers[layer_idx]
        if cache is None:
            out = layer(hidden, attention_mask=attention_mask, **kwargs)
        else:
            out = layer(
                hidden,
                attention_mask=attention_mask,
                past_key_values=cache,
                use_cache=True,
                **kwargs,
            )
        return out[0] if isinstance(out, tuple) else out

    def layer_kwargs_slice(self, kwargs: dict[str, Any], length: int) -> dict[str, Any]:
        """The same arguments restricted to the first ``length`` positions."""
        return {k: _slice_positions(v, length) for k, v in kwargs.items()}

    @abstractmethod
    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm / projections and the LM head: logits ``(B, T, V)``."""

    def fill_kv(
        self, layer_idx: int, hidden: torch.Tensor, kwargs: dict[str, Any], cache: Any
    ) -> None:
        """Write ``layer_idx``'s keys/values for ``hidden`` into ``cache`` without running the
        layer (CALM's state propagation: an exited token's copied state feeds the KV above)."""
        key, value = self._key_value(self.layers[layer_idx], hidden, kwargs)
        cache.update(key, value, layer_idx)

    @abstractmethod
    def _key_value(
        self, layer: nn.Module, hidden: torch.Tensor, kwargs: dict[str, Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's ``(B, H_kv, T, D)`` keys and values for input ``hidden``."""

    @property
    def kv_shape(self) -> tuple[int, int]:
        """``(num_key_value_heads, head_dim)`` of every layer's KV cache."""
        heads = int(self.config.num_attention_heads)
        kv_heads = int(getattr(self.config, "num_key_value_heads", None) or heads)
        head_dim = getattr(self.config, "head_dim", None) or self.config.hidden_size // heads
        return kv_heads, int(head_dim)


def _slice_positions(value: Any, length: int) -> Any:
    if isinstance(value, torch.Tensor):
        return value[:, :length]
    if isinstance(value, tuple):
        return tuple(_slice_positions(v, length) for v in value)
    return value


class OPTAdapter(DecoderAdapter):
    """facebook/opt-*: learned positions (offset 2), pre- or post-norm, optional projections."""

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.decoder = model.model.decoder

    @property
    def layers(self) -> nn.ModuleList:
        return self.decoder.layers

    @property
    def max_positions(self) -> int:
        return int(self.config.max_position_embeddings)

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        d = self.decoder
        tokens = d.embed_tokens(input_ids)
        if d.project_in is not None:
            tokens = d.project_in(tokens)
        # OPTLearnedPositionalEmbedding adds its offset to the given position ids.
        positions = d.embed_positions(None, 0, position_ids=position_ids)
        return tokens + positions.to(tokens.dtype)

    def _key_value(self, layer, hidden, kwargs):
        x = layer.self_attn_layer_norm(hidden) if layer.do_layer_norm_before else hidden
        attn = layer.self_attn
        B, T, _ = x.shape
        k = attn.k_proj(x).view(B, T, attn.num_heads, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(B, T, attn.num_heads, attn.head_dim).transpose(1, 2)
        return k, v

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        d = self.decoder
        if d.final_layer_norm is not None:
            hidden = d.final_layer_norm(hidden)
        if d.project_out is not None:
            hidden = d.project_out(hidden)
        return self.model.lm_head(hidden)


class LlamaAdapter(DecoderAdapter):
    """Llama-style models (Llama, SmolLM2, Qwen2, Mistral): RoPE, RMSNorm, grouped-query attention."""

    def __init__(self, model: nn.Module):
        super().__init__(model)
        self.base = model.model
        window = getattr(self.config, "sliding_window", None)
        # Full attention equals sliding-window attention while the sequence fits the window,
        # so windowed models are supported up to that length.
        self.window = (
            int(window) if window and getattr(self.config, "use_sliding_window", True) else None
        )

    @property
    def max_positions(self) -> int:
        limit = int(self.config.max_position_embeddings)
        return min(limit, self.window) if self.window else limit

    @property
    def layers(self) -> nn.ModuleList:
        return self.base.layers

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self.base.embed_tokens(input_ids)

    def layer_kwargs(self, hidden: torch.Tensor, position_ids: torch.Tensor) -> dict[str, Any]:
        cos_sin = self.base.rotary_emb(hidden, position_ids=position_ids)
        return {"position_ids": position_ids, "position_embeddings": cos_sin}

    def _key_value(self, layer, hidden, kwargs):
        import sys

        attn = layer.self_attn
        x = layer.input_layernorm(hidden)
        B, T, _ = x.shape
        k = attn.k_proj(x).view(B, T, -1, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(B, T, -1, attn.head_dim).transpose(1, 2)
        # the family's own rotary function (Llama, Qwen2, Mistral each define one)
        rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        cos, sin = kwargs["position_embeddings"]
        _, k = rotate(k, k, cos, sin)
        return k, v

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.base.norm(hidden))


_ADAPTERS: dict[str, type[DecoderAdapter]] = {
    "opt": OPTAdapter,
    "llama": LlamaAdapter,
    "qwen2": LlamaAdapter,
    "mistral": LlamaAdapter,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_ADAPTERS))


def get_adapter(model: nn.Module) -> DecoderAdapter:
    """The adapter for ``model`` (a transformers ``*ForCausalLM``), or a clear error."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    cls = _ADAPTERS.get(model_type)
    if cls is None:
        raise NotImplementedError(
            f"model_type={model_type!r} is not supported by skipdecode; supported "
            f"architectures: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return cls(model)
